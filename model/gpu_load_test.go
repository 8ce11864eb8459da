package model

import (
	"fmt"
	"math"
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/tensor/tensorcuda"
)

// TestGPULoadOn: a target loaded onto the CUDA backend by LoadWith (the
// files' bytes in pieces from several readers, bf16 straight into the
// compute copy, other dtypes converted on the host) holds on the device
// the compute copy that the old path left there (the serial reference
// load into host float32, then Arena.Place: WriteParams rounding to
// bf16), bit for bit, for every fixture of TestLoadParallelMatchesSerial.
func TestGPULoadOn(t *testing.T) {
	w, cache := gputest.Worker0Cache(t)
	for name, dir := range loadFixtures(t) {
		t.Run(name, func(t *testing.T) {
			old := loadSerial(t, dir)
			err := w.Run(func(d *gpu.Device) error {
				b, err := tensorcuda.NewBackend(cache, d)
				if err != nil {
					return err
				}
				defer b.Close()
				old.Arena().Place(b, false)
				for _, o := range []LoadOptions{{}, {Readers: 8, Piece: 30}} {
					m, st, err := LoadWith(dir, b, o)
					if err != nil {
						return err
					}
					if m.Arena().Values != nil {
						return fmt.Errorf("%+v: the loaded target keeps master values", o)
					}
					got, want := make([]float32, m.Arena().Len()), make([]float32, old.Arena().Len())
					b.Download(m.Arena().Compute, got)
					b.Download(old.Arena().Compute, want)
					if len(got) != len(want) {
						return fmt.Errorf("%+v: %d parameter elements, the old path %d", o, len(got), len(want))
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							return fmt.Errorf("%+v: compute copy [%d] = %v, the old path's %v", o, i, got[i], want[i])
						}
					}
					t.Logf("%+v: %d bytes in %v (%v writing)", o, st.Bytes, st.Elapsed, st.Write)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
