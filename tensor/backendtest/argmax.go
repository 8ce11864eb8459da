package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/tensor"
)

// ArgmaxShapes are the rows × cols of the ArgmaxRows cases: rows of one
// element, columns below, at and past a block of threads and a 16-byte
// vector (odd ones take the scalar loop on CUDA), and Qwen3's vocabulary
// for a verification block of 16 tokens.
var ArgmaxShapes = [][2]int{{1, 1}, {6, 1}, {6, 7}, {12, 8}, {6, 512}, {7, 513}, {6, 1003}, {12, 4096}, {16, 151936}}

// ArgmaxInput returns rows × cols values for ArgmaxRows, every one exactly
// representable in bf16 (so that a backend's storage rounding changes no
// comparison), the rows cycling through six kinds: normal values; the
// row's maximum repeated at up to four random places (a tie the lowest
// index must win); −Inf among normal values; a row of −Inf only (index 0);
// a NaN or two among values with +Inf (the first NaN wins); negative
// values and several zeros of either sign as the maximum (−0 = +0, the
// lowest index wins).
func ArgmaxInput(rng *rand.Rand, rows, cols int) []float64 {
	x := make([]float64, rows*cols)
	for r := range rows {
		row := x[r*cols : (r+1)*cols]
		for j := range row {
			row[j] = bf16Exact(3 * rng.NormFloat64())
		}
		switch r % 6 {
		case 1:
			m := slices.Max(row)
			for range 1 + rng.IntN(4) {
				row[rng.IntN(cols)] = m
			}
		case 2:
			for j := range row {
				if rng.IntN(3) == 0 {
					row[j] = math.Inf(-1)
				}
			}
		case 3:
			for j := range row {
				row[j] = math.Inf(-1)
			}
		case 4:
			row[rng.IntN(cols)] = math.Inf(1)
			for range 1 + rng.IntN(2) {
				row[rng.IntN(cols)] = math.NaN()
			}
		case 5:
			for j := range row {
				row[j] = bf16Exact(-math.Abs(row[j]) - 1)
			}
			for range 1 + rng.IntN(3) {
				row[rng.IntN(cols)] = math.Copysign(0, float64(rng.IntN(2)*2-1))
			}
		}
	}
	return x
}

// bf16Exact truncates v to the nearest bf16 value towards zero.
func bf16Exact(v float64) float64 {
	return float64(math.Float32frombits(math.Float32bits(float32(v)) &^ 0xffff))
}

// NaiveArgmax is the reference of ArgmaxRows, written apart from
// tensor.Argmax: per row, the first NaN if there is one; else the maximum
// found in a first pass and the first index equal to it in a second.
func NaiveArgmax(x []float64, rows, cols int) []int32 {
	out := make([]int32, rows)
	for r := range out {
		row := x[r*cols : (r+1)*cols]
		if i := slices.IndexFunc(row, math.IsNaN); i >= 0 {
			out[r] = int32(i)
			continue
		}
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		out[r] = int32(slices.Index(row, m)) // −0 == +0: the first zero of either sign
	}
	return out
}

// runArgmax checks ArgmaxRows through tensor.RowArgmax against NaiveArgmax
// for every shape of ArgmaxShapes, on whole allocations and on storage that
// starts one element into its allocation (unaligned on a device).
func runArgmax(t *testing.T, b tensor.Backend[float32], rng *rand.Rand) {
	for _, sh := range ArgmaxShapes {
		rows, cols := sh[0], sh[1]
		for _, off := range []int{0, 1} {
			t.Run(fmt.Sprintf("rows%d_cols%d_off%d", rows, cols, off), func(t *testing.T) {
				x := ArgmaxInput(rng, rows, cols)
				f := make([]float32, off+len(x))
				for i, v := range x {
					f[off+i] = float32(v)
				}
				s := b.Upload(f, false).Slice(off, off+len(x))
				got := tensor.RowArgmax(b, tensor.FromStorage("x", s, rows, cols))
				if want := NaiveArgmax(x, rows, cols); !slices.Equal(got, want) {
					for r := range want {
						switch g := int(got[r]); {
						case g < 0 || g >= cols:
							t.Errorf("row %d (kind %d): argmax %d out of [0, %d), want %d", r, r%6, g, cols, want[r])
						case g != int(want[r]):
							t.Errorf("row %d (kind %d): argmax %d of value %g, want %d of value %g", r, r%6, g, x[r*cols+g], want[r], x[r*cols+int(want[r])])
						}
					}
				}
			})
		}
	}
}
