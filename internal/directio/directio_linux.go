package directio

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag|os.O_WRONLY|syscall.O_DIRECT, perm)
}

func refused(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, ErrUnsupported)
}

// alloc maps anonymous memory: page-aligned, outside the Go heap (the GC
// neither scans nor counts it), given back at once by free.
func alloc(n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("directio: map %d bytes: %w", n, err)
	}
	return b, nil
}

func free(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := syscall.Munmap(b); err != nil {
		return fmt.Errorf("directio: unmap %d bytes: %w", len(b), err)
	}
	return nil
}
