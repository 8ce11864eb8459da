package tensorcuda

import (
	"bytes"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
)

// TestWriteParamBytes: bytes of the dtype a parameter copy stores (bf16
// into the compute copy, f32 into the masters) land in device memory as
// they are, a signalling NaN's payload included (no float32 round trip on
// the host, which would quiet it); bytes of another dtype land as
// WriteParams of their decoded values does, bit for bit.
func TestWriteParamBytes(t *testing.T) {
	rng := testseed.New(t)
	b, _, _, mem := fakeBackend()
	const n = 41
	for _, raw := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F32, dtype.F64} {
		for _, master := range []bool{true, false} {
			values, compute := b.AllocParams(n, true)
			ref, refCompute := b.AllocParams(n, true)
			dst, want := compute.(Buf), refCompute.(Buf)
			if master {
				dst, want = values.(Buf), ref.(Buf)
			}
			src := make([]byte, n*raw.Size())
			vals := make([]float32, n)
			for i := range vals {
				vals[i] = float32(rng.NormFloat64())
			}
			dtype.EncodeFloat32(raw, src, vals)
			if raw == dst.dt && raw == dtype.BF16 {
				src[2*7], src[2*7+1] = 0x81, 0x7f // bf16 0x7f81: a signalling NaN
			}
			b.WriteParamBytes(dst, raw, src)
			decoded := make([]float32, n)
			dtype.DecodeFloat32(raw, decoded, src)
			b.WriteParams(want, decoded)
			got, ref2 := mem.Bytes(dst.Buffer()), mem.Bytes(want.Buffer())
			switch {
			case raw == dst.dt && !bytes.Equal(got, src):
				t.Errorf("%v into %v: the device holds other bytes than the file's", raw, dst.dt)
			case raw != dst.dt && !bytes.Equal(got, ref2):
				t.Errorf("%v into %v: the device holds other bytes than WriteParams of the decoded values writes", raw, dst.dt)
			}
		}
	}
}
