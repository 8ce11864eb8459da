//go:build !linux

package directio

import (
	"errors"
	"fmt"
	"os"
	"unsafe"
)

func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return nil, &os.PathError{Op: "open", Path: name, Err: ErrUnsupported}
}

func refused(err error) bool { return errors.Is(err, ErrUnsupported) }

// alloc over-allocates Go memory by Align and returns the aligned part.
func alloc(n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("directio: allocate %d bytes", n)
	}
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, n+Align)
	skip := (Align - int(uintptr(unsafe.Pointer(&b[0]))%Align)) % Align
	return b[skip : skip+n : skip+n], nil
}

func free([]byte) error { return nil }
