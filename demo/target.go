package demo

import (
	"context"
	"fmt"

	"dflash/data/order"
	"dflash/internal/rngstream"
	"dflash/model"
	"dflash/tensor"
	"dflash/train"
)

// lmData serves fixed-length next-token-prediction batches from sequences in
// a seeded, epoch-shuffled order (order.Order).
type lmData struct {
	seqs  [][]int32
	pad   int32
	order *order.Order
}

// next returns ids [batch, L] (padded with pad) and next-token targets
// (−1 on padding and at each sequence's last token).
func (d *lmData) next() (ids, targets []int32, L int) {
	idx := d.order.Next()
	n := len(idx)
	for _, i := range idx {
		L = max(L, len(d.seqs[i]))
	}
	ids = make([]int32, n*L)
	targets = make([]int32, n*L)
	for r, i := range idx {
		s := d.seqs[i]
		for j := 0; j < L; j++ {
			ids[r*L+j] = d.pad
			targets[r*L+j] = -1
			if j < len(s) {
				ids[r*L+j] = s[j]
			}
			if j+1 < len(s) {
				targets[r*L+j] = s[j+1]
			}
		}
	}
	return ids, targets, L
}

// TrainTarget trains m as a language model on seqs with train.Run (progress
// on stderr, checkpoints and metrics under cfg.Out) on backend, where m's
// parameters are (Arena.Place with master values on a device); each step
// ends with the backend's ResetStep.
func TrainTarget(ctx context.Context, m *model.Model, seqs [][]int32, batch int, pad int32, cfg train.Config, backend tensor.Backend[float32]) (*train.Result, error) {
	if len(seqs) == 0 {
		return nil, fmt.Errorf("demo: no target training sequences")
	}
	d := &lmData{seqs: seqs, pad: pad, order: order.New(len(seqs), batch, cfg.Seed, rngstream.Data)}
	cj, err := m.Config.HFConfig("float32")
	if err != nil {
		return nil, err
	}
	h := train.Hooks{
		Backend: backend,
		Arena:   m.Arena(),
		Step: func(ctx context.Context, s train.StepInfo) (float64, map[string]float64, int, error) {
			defer backend.ResetStep()
			ids, targets, L := d.next()
			tp := tensor.NewTape(backend)
			out := m.Forward(tp, model.Input{IDs: ids, Batch: len(ids) / L, Len: L})
			x := m.Loss(tp, out.Final, targets, nil, 0)
			tp.Backward(x.Loss)
			_, argmax := x.Read(backend)
			var ok, n int
			for i, t := range targets {
				if t >= 0 {
					n++
					if argmax[i] == t {
						ok++
					}
				}
			}
			return float64(tensor.Values(backend, x.Loss)[0]), map[string]float64{"acc": float64(ok) / float64(max(n, 1))}, n, nil
		},
		DataState:   d.order.State,
		RestoreData: d.order.Restore,
		ModelConfig: func() ([]byte, error) { return cj, nil },
	}
	return train.Run(ctx, cfg, h)
}
