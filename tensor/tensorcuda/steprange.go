package tensorcuda

import (
	"fmt"
	"log/slog"

	"dflash/gpu"
	"dflash/internal/switches"
)

// stepMemory returns the growable memory of d's step arena, or nil for
// chunks from the device allocator, as DFLASH_STEP_VMM and the device
// decide.
func stepMemory(d *gpu.Device, pool *gpu.Pool) (growable, error) {
	in, err := stepInPlace(d.Ordinal(), d.VMMSupported)
	if !in || err != nil {
		return nil, err
	}
	return &rangeMemory{d: d, pool: pool}, nil
}

// stepInPlace says whether the step arena of GPU gpu is a range grown in
// place, from DFLASH_STEP_VMM (off: chunks from the device allocator; on: a
// range, an error where the GPU cannot; unset: a range where it can) and
// whether the GPU supports virtual memory management.
func stepInPlace(gpu int, supported func() (bool, error)) (bool, error) {
	want, set, err := switches.StepVMM.Lookup()
	switch {
	case err != nil:
		return false, fmt.Errorf("tensorcuda: %w", err)
	case set && !want:
		return false, nil
	}
	ok, err := supported()
	switch {
	case err != nil:
		return false, fmt.Errorf("tensorcuda: step memory on GPU %d: %w", gpu, err)
	case !ok && set:
		return false, fmt.Errorf("tensorcuda: %s is on, but GPU %d does not support virtual memory management", switches.StepVMM.Name, gpu)
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
