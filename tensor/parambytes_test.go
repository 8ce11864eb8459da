package tensor_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
	"dflash/tensor"
)

// WriteParamBytes of fakeDevice writes the values the CPU decodes, as a
// device converts on the host what it does not store.
func (f fakeDevice) WriteParamBytes(dst tensor.Storage[float64], dt dtype.DType, raw []byte) {
	v := make(tensor.Host[float64], dst.Len())
	f.CPU.WriteParamBytes(v, dt, raw)
	f.WriteParams(dst, v)
}

// randRaw returns the bytes of n random values of dt (normal, scaled over
// several octaves), and those values as float64 (exact: each is a value
// of dt).
func randRaw(rng *rand.Rand, dt dtype.DType, n int) ([]byte, []float64) {
	vals := make([]float64, n)
	raw := make([]byte, n*dt.Size())
	for i := range vals {
		x := rng.NormFloat64() * math.Exp2(float64(rng.IntN(9)-4))
		if dt == dtype.F64 {
			binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(x))
			vals[i] = x
			continue
		}
		dtype.EncodeFloat32(dt, raw[dt.Size()*i:], []float32{float32(x)})
		f := make([]float32, 1)
		dtype.DecodeFloat32(dt, f, raw[dt.Size()*i:])
		vals[i] = float64(f[0])
	}
	return raw, vals
}

// TestSetParamBytes: a parameter written in pieces from the bytes of any
// float dtype (SetParamBytes) holds what SetParam of the decoded values
// writes, bit for bit: on the CPU in float32 (F64 rounded to nearest) and
// float64 (every dtype exactly), and on a backend that places parameters
// itself, master and compute copies both; the pieces' offsets land where
// they say and the other parameters are untouched.
func TestSetParamBytes(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testSetParamBytes(t, tensor.Backend[float32](tensor.NewCPU[float32](1))) })
	t.Run("float64", func(t *testing.T) { testSetParamBytes(t, tensor.Backend[float64](tensor.NewCPU[float64](1))) })
	t.Run("device", func(t *testing.T) {
		testSetParamBytes(t, tensor.Backend[float64](fakeDevice{tensor.NewCPU[float64](1)}))
	})
}

func testSetParamBytes[T tensor.Float](t *testing.T, b tensor.Backend[T]) {
	rng := testseed.New(t)
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F32, dtype.F64} {
		t.Run(dt.String(), func(t *testing.T) {
			build := func() *tensor.Arena[T] {
				var a tensor.Arena[T]
				a.Param("before", 3)
				a.Param("w", 7, 11)
				a.Param("after", 2)
				a.AllocOn(b, true)
				return &a
			}
			raw, vals := randRaw(rng, dt, 77)
			got, want := build(), build()
			want.SetParam(b, 1, hostValues[T](vals))
			for _, i := range []int{0, 2} {
				got.SetParam(b, i, make([]T, got.Params()[i].Numel()))
			}
			// Pieces of random lengths (empty ones too), written in reverse.
			var cuts []int
			for at := 0; at < 77; at += rng.IntN(20) {
				cuts = append(cuts, at)
			}
			cuts = append(cuts, 77)
			for k := len(cuts) - 2; k >= 0; k-- {
				lo, hi := cuts[k], cuts[k+1]
				got.SetParamBytes(b, 1, lo, dt, raw[lo*dt.Size():hi*dt.Size()])
			}
			for _, c := range []struct {
				name string
				s    func(a *tensor.Arena[T]) tensor.Storage[T]
			}{{"master", func(a *tensor.Arena[T]) tensor.Storage[T] { return a.Values }}, {"compute", func(a *tensor.Arena[T]) tensor.Storage[T] { return a.Compute }}} {
				g, w := make([]T, got.Len()), make([]T, want.Len())
				b.Download(c.s(got), g)
				b.Download(c.s(want), w)
				if !sameBits(g, w) {
					t.Fatalf("%s copy: SetParamBytes in pieces wrote %v, SetParam of the values %v", c.name, g, w)
				}
			}
		})
	}
}

// hostValues returns vals as T, rounded to nearest for float32.
func hostValues[T tensor.Float](vals []float64) []T {
	out := make([]T, len(vals))
	for i, v := range vals {
		out[i] = T(v)
	}
	return out
}

func sameBits[T tensor.Float](a, b []T) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool { return math.Float64bits(float64(x)) == math.Float64bits(float64(y)) })
}
