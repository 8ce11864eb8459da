// Package atomicfile replaces files so that a crash leaves either the old
// content or the new one at the path, never a partial file. The new content
// goes into a temporary file in the same directory, named
// TempPrefix(base)+random, which is given mode 0644, synced, renamed over the
// path; then the directory is synced so that the rename itself is durable.
// A crash can leave such a temporary file behind; its owner may remove files
// with that prefix.
//
// Write and WriteFile suit small files; WriteBlocks writes large ones in
// large blocks around the page cache, at the disk's own speed.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// TempPrefix returns the prefix of the temporary files Write creates while
// replacing a file named name (a base name, no directory).
func TempPrefix(name string) string { return "." + name + ".tmp-" }

// Options change how a file is replaced; the zero value is what Write and
// WriteFile do.
type Options struct {
	// TempPattern is the os.CreateTemp pattern of the temporary file, in the
	// path's directory; "" means TempPrefix(base)+"*".
	TempPattern string
	// BestEffortDirSync ignores a failed sync of the directory after the
	// rename, for files that may be lost in a crash (a cache entry that is
	// rebuilt) on file systems that cannot sync directories.
	BestEffortDirSync bool
	// BlockSize is WriteBlocks' block size in bytes, a multiple of
	// directio.Align; 0 means DefaultBlockSize.
	BlockSize int
}

// Write replaces path with what fill writes to the temporary file. Errors,
// fill's included, are returned prefixed with path.
func Write(path string, fill func(w io.Writer) error) error { return Options{}.Write(path, fill) }

// WriteFile replaces path with data (see Write).
func WriteFile(path string, data []byte) error { return Options{}.WriteFile(path, data) }

// Write replaces path with what fill writes, under o (see the package doc).
func (o Options) Write(path string, fill func(w io.Writer) error) error {
	return o.replace(path, func(f *os.File) error { return fill(f) })
}

// replace is the atomic replacement of every write: fill writes the
// temporary file f (without closing it), which is then given its mode,
// synced, closed and renamed over path, and the directory synced; any
// failure removes f and leaves path as it was.
func (o Options) replace(path string, fill func(f *os.File) error) error {
	dir := filepath.Dir(path)
	pattern := o.TempPattern
	if pattern == "" {
		pattern = TempPrefix(filepath.Base(path)) + "*"
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	err = fill(f)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil && !o.BestEffortDirSync {
		return err
	}
	return nil
}

// WriteFile replaces path with data, under o.
func (o Options) WriteFile(path string, data []byte) error {
	return o.Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// SyncDir fsyncs a directory so that renames and creations inside it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
