package tensor

// Replayer is a backend that can queue a region of ops that repeats, step
// after step, with the same shapes as one recorded launch (the CUDA
// backend: a CUDA graph per key). The first run of a key runs its ops as
// usual; later runs run the region's host code and launch the recorded
// work when everything it queues (addresses, shapes, scalars) is what was
// recorded, and record it anew otherwise: a replay never runs other work
// than the region's.
type Replayer interface {
	// Replay runs fn, a region keyed by key (compared with ==), and returns
	// what it did: "eager", "captured", "launched", "recaptured" or
	// "ungraphed" (recording failed once; the reason is in the error log).
	// fn must not read values back from the backend (Download) nor
	// upload: do those before or after the region.
	Replay(key any, fn func()) string
}

// Replay runs fn as a replayed region keyed by key when b is a Replayer,
// and plainly otherwise (returning "").
func Replay[T Float](b Backend[T], key any, fn func()) string {
	if r, ok := b.(Replayer); ok {
		return r.Replay(key, fn)
	}
	fn()
	return ""
}
