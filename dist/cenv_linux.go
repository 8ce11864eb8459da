package dist

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

var libc struct {
	once   sync.Once
	getenv uintptr
	err    error
}

// CEnv returns the value of name in the C library's environment, read with
// libc's getenv: what NCCL and the CUDA libraries see, as opposed to Go's
// own copy of the environment.
func CEnv(name string) (value string, ok bool, err error) {
	libc.once.Do(func() {
		h, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			libc.err = fmt.Errorf("dist: open libc.so.6 to read the C environment: %w", err)
			return
		}
		if libc.getenv, err = purego.Dlsym(h, "getenv"); err != nil {
			libc.err = fmt.Errorf("dist: libc.so.6 getenv: %w", err)
		}
	})
	if libc.err != nil {
		return "", false, libc.err
	}
	b, err := unix.BytePtrFromString(name)
	if err != nil {
		return "", false, fmt.Errorf("dist: C environment variable name %q: %w", name, err)
	}
	p, _, _ := purego.SyscallN(libc.getenv, uintptr(unsafe.Pointer(b)))
	runtime.KeepAlive(b)
	if p == 0 {
		return "", false, nil
	}
	return unix.BytePtrToString(*(**byte)(unsafe.Pointer(&p))), true, nil
}
