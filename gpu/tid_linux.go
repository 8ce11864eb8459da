package gpu

import "syscall"

// gettid returns the calling OS thread's id.
func gettid() int { return syscall.Gettid() }
