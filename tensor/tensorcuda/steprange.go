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
func stepMemory(d *gpu.Device) (growable, error) {
	env := os.Getenv(stepVMMEnv)
	switch env {
	case "0":
		return nil, nil
	case "", "1":
	default:
		return nil, fmt.Errorf("tensorcuda: $%s=%q: want 0 (step memory in chunks) or 1 (one range grown in place)", stepVMMEnv, env)
	}
	ok, err := d.VMMSupported()
	if err != nil {
		return nil, fmt.Errorf("tensorcuda: step memory: %w", err)
	}
	if !ok {
		if env == "1" {
			return nil, fmt.Errorf("tensorcuda: $%s=1, but GPU %d does not support virtual memory management", stepVMMEnv, d.Ordinal())
		}
		slog.Info("tensorcuda: step memory in chunks: the GPU does not support virtual memory management", "gpu", d.Ordinal())
		return nil, nil
	}
	return &rangeMemory{d: d}, nil
}

// rangeMemory is growable step memory on a device: a gpu.Range reserved on
// the first grow. It reserves twice the device's memory (addresses cost
// none), so that a step too large for the device fails as out of memory
// when it is backed rather than on the range's end.
type rangeMemory struct {
	d *gpu.Device
	r *gpu.Range
}

func (m *rangeMemory) grow(n int64) (gpu.Buffer, error) {
	if m.r == nil {
		r, err := m.d.ReserveRange(2 * m.d.Info().TotalMem)
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
