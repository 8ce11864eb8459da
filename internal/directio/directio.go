// Package directio writes files around the page cache: Open opens a file
// for direct writes (O_DIRECT on Linux), Alloc returns memory aligned as
// they need. A direct write's buffer address, file offset and length are
// multiples of Align. File systems that refuse direct writes (tmpfs before
// Linux 6.6, some network file systems) and other platforms answer with an
// error for which Refused is true; callers then write through the page
// cache instead.
package directio

import (
	"errors"
	"os"
)

// Align is the alignment of a direct write's buffer, file offset and
// length: 4096 covers the logical block sizes of the disks in use (512 and
// 4096 bytes).
const Align = 4096

// ErrUnsupported is Open's error on platforms without direct writes.
var ErrUnsupported = errors.New("direct writes are not supported on this platform")

// OpenFile opens name for direct writes (write only, with os.OpenFile's
// flag and perm besides).
func OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return openFile(name, flag, perm)
}

// Refused reports whether err, from OpenFile or a write to the file it
// opened, says that direct writes are refused there (the file system's
// EINVAL, or ErrUnsupported): the same write through the page cache is
// then the way to go.
func Refused(err error) bool { return refused(err) }

// Alloc returns n bytes of zeroed memory, starting at a multiple of Align
// and outside the Go heap where the platform allows; Free gives it back.
func Alloc(n int) ([]byte, error) { return alloc(n) }

// Free gives back memory from Alloc; b must not be used afterwards.
func Free(b []byte) error { return free(b) }
