package tensorcuda

import (
	"fmt"
	"math"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
)

// TestGPUWriteParamBytes: on the device, a parameter copy written from the
// bytes of a float dtype (WriteParamBytes: bf16 into the compute copy and
// f32 into the masters as they are, the rest converted on the host) reads
// back as WriteParams of the decoded values does, bit for bit, for a
// parameter larger than a staging slot (split over slots) and a small one.
func TestGPUWriteParamBytes(t *testing.T) {
	w, cache := gputest.Worker0Cache(t)
	rng := testseed.New(t)
	err := w.Run(func(d *gpu.Device) error {
		b, err := NewBackend(cache, d)
		if err != nil {
			return err
		}
		defer b.Close()
		for _, n := range []int{37, 9<<20 + 3} {
			for _, raw := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F32, dtype.F64} {
				vals := make([]float32, n)
				for i := range vals {
					vals[i] = float32(rng.NormFloat64())
				}
				src := make([]byte, n*raw.Size())
				dtype.EncodeFloat32(raw, src, vals)
				decoded := make([]float32, n)
				dtype.DecodeFloat32(raw, decoded, src)
				values, compute := b.AllocParams(n, true)
				refValues, refCompute := b.AllocParams(n, true)
				b.WriteParamBytes(values, raw, src)
				b.WriteParamBytes(compute, raw, src)
				b.WriteParams(refValues, decoded)
				b.WriteParams(refCompute, decoded)
				for _, c := range []struct {
					name      string
					got, want Buf
				}{{"master", values.(Buf), refValues.(Buf)}, {"compute", compute.(Buf), refCompute.(Buf)}} {
					g, wnt := make([]float32, n), make([]float32, n)
					b.Download(c.got, g)
					b.Download(c.want, wnt)
					for i := range g {
						if math.Float32bits(g[i]) != math.Float32bits(wnt[i]) {
							return fmt.Errorf("%d %v elements into the %s copy (%v): [%d] = %v, WriteParams wrote %v", n, raw, c.name, c.got.dt, i, g[i], wnt[i])
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
