package model

import (
	"fmt"
	"math/rand/v2"

	"dflash/tensor"
)

// Rows are rows of logits [n, Vocab] as decoding reads them off a backend
// (ReadRows): greedily only each row's argmax, IDs [n] (n int32 downloaded
// instead of n·Vocab floats); when sampling the logits themselves in host
// memory, Logits [n·Vocab] with Vocab columns. Exactly one of IDs and
// Logits is set.
type Rows struct {
	IDs    []int32
	Logits []float32
	Vocab  int
}

// ReadRows reads logits [n, Vocab] on b for decoding: greedily each row's
// argmax alone (tensor.RowArgmax, lowest id on ties), else the logits
// (tensor.Values). It waits for the backend's queued work.
func ReadRows(b tensor.Backend[float32], logits *tensor.Tensor, greedy bool) Rows {
	if greedy {
		return Rows{IDs: tensor.RowArgmax(b, logits)}
	}
	return Rows{Logits: tensor.Values(b, logits), Vocab: logits.Shape[len(logits.Shape)-1]}
}

// Len returns the number of rows.
func (r Rows) Len() int {
	if r.IDs != nil {
		return len(r.IDs)
	}
	if r.Vocab <= 0 {
		return 0
	}
	return len(r.Logits) / r.Vocab
}

// Row returns the logits of row i; it panics for rows read greedily (IDs
// only).
func (r Rows) Row(i int) []float32 {
	if r.Logits == nil {
		panic(fmt.Sprintf("model.Rows.Row(%d) of rows read greedily: no logits", i))
	}
	return r.Logits[i*r.Vocab : (i+1)*r.Vocab]
}

// Pick returns the token of row i: its argmax with IDs, else Sample of its
// logits (an argmax too at temperature ≤ 0, where rng is not drawn from).
func (r Rows) Pick(i int, temperature float64, topK int, rng *rand.Rand) int32 {
	if r.IDs != nil {
		return r.IDs[i]
	}
	return Sample(r.Row(i), temperature, topK, rng)
}

// Sub returns rows lo..hi−1 (sharing r's memory).
func (r Rows) Sub(lo, hi int) Rows {
	if lo < 0 || hi < lo || hi > r.Len() {
		panic(fmt.Sprintf("model.Rows.Sub(%d, %d) of %d rows", lo, hi, r.Len()))
	}
	if r.IDs != nil {
		return Rows{IDs: r.IDs[lo:hi:hi]}
	}
	return Rows{Logits: r.Logits[lo*r.Vocab : hi*r.Vocab : hi*r.Vocab], Vocab: r.Vocab}
}
