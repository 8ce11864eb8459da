//go:build !linux

package gpu

// mapHost returns n bytes of Go memory (the CUDA driver runs on Linux;
// elsewhere this only has to build).
func mapHost(n int64) ([]byte, error) { return make([]byte, n), nil }

// unmapHost lets the collector have memory from mapHost.
func unmapHost([]byte) error { return nil }
