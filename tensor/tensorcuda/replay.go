package tensorcuda

import (
	"log/slog"

	"dflash/gpu"
	"dflash/tensor"
)

var _ tensor.Replayer = (*Backend)(nil)

// Replay runs fn through gpu.Device.Replay: a CUDA graph per key after the
// key's first run. A profiling backend runs fn plainly (its per-op events
// cannot be recorded), as does the CPU tests' fake memory. A failed
// recording is logged once per key and the region runs plainly from then
// on.
func (b *Backend) Replay(key any, fn func()) string {
	if b.d == nil || b.profiling {
		fn()
		return gpu.ReplayEager.String()
	}
	kind, err := b.d.Replay(key, func() error { fn(); return nil })
	if err != nil {
		panic(err) // as every op of the backend: the interface returns no error
	}
	if kind == gpu.ReplayUngraphed && b.ungraphed[key] == nil {
		if b.ungraphed == nil {
			b.ungraphed = map[any]error{}
		}
		b.ungraphed[key] = b.d.ReplayErr(key)
		slog.Warn("CUDA graph capture failed: this region runs without a graph", "key", key, "err", b.ungraphed[key])
	}
	return kind.String()
}
