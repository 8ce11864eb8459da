package cuda

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
)

// proc is one C function of a library, resolved on first use.
type proc struct {
	lib  *library
	name string
	// free marks calls that need no current context (driver init, device
	// queries, version and error-string lookups); the thread check skips them.
	free bool

	once sync.Once
	addr uintptr
	err  error
}

func newProc(l *library, name string) *proc     { return &proc{lib: l, name: name} }
func newFreeProc(l *library, name string) *proc { return &proc{lib: l, name: name, free: true} }

func (p *proc) resolve() (uintptr, error) {
	p.once.Do(func() {
		h, err := p.lib.load()
		if err != nil {
			p.err = fmt.Errorf("%s: %w", p.name, err)
			return
		}
		a, err := purego.Dlsym(h, p.name)
		if err != nil {
			p.err = fmt.Errorf("%s: symbol not found in %s (%s): %v", p.name, p.lib.path, p.lib.name, err)
			return
		}
		p.addr = a
	})
	return p.addr, p.err
}

// threadCheck, when set, runs before every context-bound call.
var threadCheck atomic.Pointer[func(call string) error]

// SetThreadCheck installs f to run before every context-bound call; a non-nil
// result is returned instead of making the call. A nil f removes the check.
func SetThreadCheck(f func(call string) error) {
	if f == nil {
		threadCheck.Store(nil)
		return
	}
	threadCheck.Store(&f)
}

// invoke checks the thread (for context-bound calls), resolves and calls p,
// returning the raw result register.
//
// Address arguments must be written as uintptr(unsafe.Pointer(&x)) in the
// argument list of the invoke call itself: go:uintptrescapes then moves x to
// the heap (which does not move) and keeps it alive until invoke returns.
//
//go:uintptrescapes
func (p *proc) invoke(args ...uintptr) (uintptr, error) {
	if !p.free {
		if f := threadCheck.Load(); f != nil {
			if err := (*f)(p.name); err != nil {
				return 0, err
			}
		}
	}
	addr, err := p.resolve()
	if err != nil {
		return 0, err
	}
	r, _, _ := purego.SyscallN(addr, args...)
	return r, nil
}

// status is invoke for the libraries whose functions return an int32
// status, 0 on success: it returns that status, or 0 and the error that
// kept p from being called.
//
//go:uintptrescapes
func (p *proc) status(args ...uintptr) (int32, error) {
	r, err := p.invoke(args...)
	return int32(r), err
}

// cString copies the NUL-terminated C string at p.
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(ptr, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(ptr), n))
}

// cStr returns a NUL-terminated copy of s for passing to C.
func cStr(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
