//go:build !linux

package gpu

// gettid returns 0: thread ids are not checked on this platform.
func gettid() int { return 0 }
