package gpu

import "syscall"

// madvHugepage is MADV_HUGEPAGE: back the mapping with transparent huge
// pages where the kernel allows (fewer pages to fault and to pin).
const madvHugepage = 14

// mapHost maps n bytes of anonymous memory, outside Go's heap (the
// collector neither scans nor counts it).
func mapHost(n int64) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	_ = syscall.Madvise(b, madvHugepage) // a hint: without huge pages the memory is as good
	return b, nil
}

// unmapHost unmaps memory from mapHost.
func unmapHost(b []byte) error { return syscall.Munmap(b) }
