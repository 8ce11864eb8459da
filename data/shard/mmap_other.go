//go:build !unix

package shard

import (
	"fmt"
	"os"
)

// mapFile reads path into memory where mmap is not available.
func mapFile(path string) (data []byte, unmap func() error, err error) {
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if len(data) < headerSize {
		return nil, nil, fmt.Errorf("%s: %d bytes, shorter than a shard header", path, len(data))
	}
	return data, func() error { return nil }, nil
}
