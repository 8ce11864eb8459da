//go:build unix

package shard

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps path read-only; unmap releases it.
func mapFile(path string) (data []byte, unmap func() error, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size < headerSize {
		return nil, nil, fmt.Errorf("%s: %d bytes, shorter than a shard header", path, size)
	}
	data, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
