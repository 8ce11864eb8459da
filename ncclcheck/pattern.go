package ncclcheck

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"

	"dflash/dtype"
)

// maxPeriod is the period of the inputs for up to 8 ranks.
const maxPeriod = 31

// blockRepeats is how many periods one verification block holds: blocks
// are 2 Mi elements for 31-periodic inputs (4 MiB of bf16, 8 of f32).
// Tests lower it to cross block boundaries with small buffers.
var blockRepeats int64 = 1 << 16

// Period returns p, the period of the inputs for nranks ranks:
// min(31, floor(256/nranks)), so that n*p <= 256. It panics when nranks is
// not in 1..256 (beyond 256 ranks no such inputs exist).
func Period(nranks int) int {
	if nranks < 1 || nranks > 256 {
		panic(fmt.Sprintf("ncclcheck: %d ranks: exact bf16 sums need 1..256", nranks))
	}
	return min(maxPeriod, 256/nranks)
}

// Value returns rank's input at element i: 1 + (i + 7*rank) mod p.
func Value(i int64, rank, nranks int) int {
	p := int64(Period(nranks))
	return 1 + int((i+7*int64(rank))%p)
}

// Sum returns the exact all-reduce result at element i: the sum of Value
// over all ranks.
func Sum(i int64, nranks int) int {
	s := 0
	for r := range nranks {
		s += Value(i, r, nranks)
	}
	return s
}

// element decodes element i of b as a float64 (for messages).
func element(b []byte, i int64, t dtype.DType) float64 {
	var f [1]float32
	e := int64(t.Size())
	dtype.DecodeFloat32(t, f[:], b[i*e:(i+1)*e])
	return float64(f[0])
}

// block encodes f(i) for i in [0, n): small integers, exact in bf16 and f32.
func block(n int64, t dtype.DType, f func(i int64) int) []byte {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(f(int64(i)))
	}
	b := make([]byte, n*int64(t.Size()))
	dtype.EncodeFloat32(t, b, v)
	return b
}

// blockElems is the number of elements in one verification block (a
// multiple of the period, so every block of a buffer looks the same).
func blockElems(nranks int) int64 { return int64(Period(nranks)) * blockRepeats }

// RankInput returns rank's first n input elements, encoded as t.
func RankInput(rank, nranks int, n int64, t dtype.DType) []byte {
	return block(n, t, func(i int64) int { return Value(i, rank, nranks) })
}

// expectedBlock returns the exact all-reduce result of one verification
// block over nranks ranks, encoded as t.
func expectedBlock(t dtype.DType, nranks int) []byte {
	return block(blockElems(nranks), t, func(i int64) int { return Sum(i, nranks) })
}

// ExpectedDigest returns the hex SHA-256 of the exact all-reduce result of
// bytes bytes of t over nranks ranks, computed on the host.
func ExpectedDigest(t dtype.DType, bytes int64, nranks int) string {
	want := expectedBlock(t, nranks)
	v := newVerifier(t, want)
	for left := bytes; left > 0; left -= int64(len(want)) {
		v.check(want[:min(left, int64(len(want)))])
	}
	return v.digest()
}

// verifier checks a result read back in consecutive chunks against the
// exact sums and hashes it.
type verifier struct {
	t          dtype.DType
	want       []byte // the expected sums of one block (expectedBlock)
	h          hash.Hash
	n          int64 // elements checked so far
	mismatches int64
	firstBad   int64 // index of the first wrong element, -1 if none
	got, exp   float64
}

// newVerifier starts a check against want, one block of expected sums
// (expectedBlock); the block is only read, so one serves every verifier of
// the same dtype and rank count.
func newVerifier(t dtype.DType, want []byte) *verifier {
	return &verifier{t: t, want: want, h: sha256.New(), firstBad: -1}
}

// check verifies the next chunk, which must start at a multiple of the
// block length and hold at most one block.
func (v *verifier) check(chunk []byte) {
	e := int64(v.t.Size())
	if int64(len(chunk))%e != 0 || len(chunk) > len(v.want) || v.n%(int64(len(v.want))/e) != 0 {
		panic(fmt.Sprintf("ncclcheck: verify chunk of %d bytes at element %d", len(chunk), v.n))
	}
	v.h.Write(chunk)
	want := v.want[:len(chunk)]
	if !bytes.Equal(chunk, want) {
		for j := int64(0); j < int64(len(chunk))/e; j++ {
			if !bytes.Equal(chunk[j*e:(j+1)*e], want[j*e:(j+1)*e]) {
				if v.firstBad < 0 {
					v.firstBad, v.got, v.exp = v.n+j, element(chunk, j, v.t), element(want, j, v.t)
				}
				v.mismatches++
			}
		}
	}
	v.n += int64(len(chunk)) / e
}

func (v *verifier) digest() string { return hex.EncodeToString(v.h.Sum(nil)) }
