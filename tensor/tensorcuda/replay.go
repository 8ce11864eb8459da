package tensorcuda

import (
	"fmt"
	"log/slog"

	"dflash/gpu"
)

// Replay runs fn through gpu.Device.Replay: a CUDA graph per key after the
// key's first run. A profiling backend runs fn plainly (its per-op events
// cannot be recorded), as does the CPU tests' fake memory and a process
// with DFLASH_CUDA_GRAPHS off. A failed recording is logged once per key and
// the region runs plainly from then on.
func (b *Backend) Replay(key any, fn func()) string {
	if b.d == nil || b.profiling || b.noGraphs {
		fn()
		b.replays[gpu.ReplayEager]++
		return gpu.ReplayEager.String()
	}
	kind, err := b.d.Replay(key, func() error { fn(); return nil })
	if err != nil {
		panic(err) // as every op of the backend: the interface returns no error
	}
	b.replays[kind]++
	if (kind == gpu.ReplayRecaptured || kind == gpu.ReplayUngraphed) && !b.warned[replayWarning{key, kind}] {
		if b.warned == nil {
			b.warned = map[replayWarning]bool{}
		}
		b.warned[replayWarning{key, kind}] = true
		if kind == gpu.ReplayRecaptured {
			slog.Warn("CUDA graph captured again: the region's work changed since its capture (logged once per region)",
				"key", fmt.Sprintf("%+v", key), "first difference", b.d.ReplayDiff(key))
		} else {
			slog.Warn("CUDA graph capture failed: this region runs without a graph", "key", fmt.Sprintf("%+v", key), "err", b.d.ReplayErr(key))
		}
	}
	return kind.String()
}

// replayWarning is a region and what Replay logged about it.
type replayWarning struct {
	key  any
	kind gpu.ReplayKind
}

// Replays returns how many Replay calls ended each way so far, by
// gpu.ReplayKind's name ("eager" for every plain run), kinds that never
// happened left out.
func (b *Backend) Replays() map[string]int {
	n := map[string]int{}
	for k, c := range b.replays {
		if c > 0 {
			n[gpu.ReplayKind(k).String()] = c
		}
	}
	return n
}
