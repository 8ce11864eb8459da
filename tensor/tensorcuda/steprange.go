package tensorcuda

import (
	"fmt"
	"log/slog"
	"os"

	"dflash/gpu"
)

// stepVMMEnv chooses the step arena's memory: "0" chunks from the device
// allocator; "1" a range grown in place (an error where the device cannot);
// unset, the range where the device supports virtual memory management.
const stepVMMEnv = "DFLASH_STEP_VMM"

// stepMemory returns the growable memory of d's step arena, or nil for
// chunks from the device allocator, as $DFLASH_STEP_VMM and the device
// decide.
func stepMemory(d *gpu.Device, pool *gpu.Pool) (growable, error) {
	in, err := stepInPlace(os.Getenv(stepVMMEnv), d.Ordinal(), d.VMMSupported)
	if !in || err != nil {
		return nil, err
	}
	return &rangeMemory{d: d, pool: pool}, nil
}

// stepInPlace says whether the step arena of GPU gpu is a range grown in
// place, from the value of $DFLASH_STEP_VMM and whether the GPU supports
// virtual memory management.
func stepInPlace(env string, gpu int, supported func() (bool, error)) (bool, error) {
	switch env {
	case "0":
		return false, nil
	case "", "1":
	default:
		return false, fmt.Errorf("tensorcuda: $%s=%q: want 0 (step memory in chunks) or 1 (one range grown in place)", stepVMMEnv, env)
	}
	ok, err := supported()
	switch {
	case err != nil:
		return false, fmt.Errorf("tensorcuda: step memory on GPU %d: %w", gpu, err)
	case !ok && env == "1":
		return false, fmt.Errorf("tensorcuda: $%s=1, but GPU %d does not support virtual memory management", stepVMMEnv, gpu)
	case !ok:
		slog.Info("tensorcuda: step memory in chunks: the GPU does not support virtual memory management", "gpu", gpu)
	}
	return ok, nil
}

// rangeMemory is growable step memory on a device: a gpu.Range of pool
// reserved on the first grow. It reserves twice the device's memory
// (addresses cost none), so that a step too large for the device fails as
// out of memory when it is backed rather than on the range's end.
type rangeMemory struct {
	d    *gpu.Device
	pool *gpu.Pool
	r    *gpu.Range
}

func (m *rangeMemory) grow(n int64) (gpu.Buffer, error) {
	if m.r == nil {
		r, err := m.pool.ReserveRange(2 * m.d.Info().TotalMem)
		if err != nil {
			return gpu.Buffer{}, err
		}
		m.r = r
	}
	if err := m.r.Grow(n); err != nil {
		return gpu.Buffer{}, err
	}
	return gpu.Buffer{Ptr: m.r.Base(), Size: m.r.Mapped()}, nil
}

func (m *rangeMemory) release() {
	if m.r != nil {
		must("step arena: free its range", m.r.Free())
		m.r = nil
	}
}
