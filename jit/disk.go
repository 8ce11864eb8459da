package jit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"dflash/internal/atomicfile"
	"dflash/internal/switches"
)

// Disk file layout (little-endian):
//
//	offset  size  field
//	0       8     magic "DFLKRNL\x00"
//	8       4     format version
//	12      4     metadata length m
//	16      8     image length n
//	24      32    key
//	56      32    SHA-256 of bytes [0,56) ++ metadata ++ image
//	88      m     metadata (Meta, laid out as meta.go says)
//	88+m    n     image
//
// Format version 1 held the metadata as JSON; this build discards its files
// (their keys differ too, so Get never looks them up; cache ls lists them
// as invalid and cache clear removes them).
const (
	fileMagic  = "DFLKRNL\x00"
	headerSize = 88
	fileExt    = ".kimg"
	tmpExt     = ".tmp"
)

// The longest metadata and image a cache file may hold. A reader refuses a
// file whose header gives more, from the header alone, so a huge or
// growing file at a key's path costs no more than these to read; the
// writer refuses them too. A kernel's metadata is a few kilobytes (most of
// it the compiler's log) and a CUBIN a few megabytes.
const (
	maxMetaBytes  = 16 << 20 // well below the header's uint32 limit
	maxImageBytes = 256 << 20
)

// corruptError says why a cache file was not trusted.
type corruptError struct {
	path, reason string
}

func (e *corruptError) Error() string {
	return fmt.Sprintf("kernel cache file %s: %s", e.path, e.reason)
}

// filePath returns the file of key in dir.
func filePath(dir string, key Key) string { return filepath.Join(dir, key.String()+fileExt) }

// encodeFile lays out a cache file. Metadata longer than maxMetaBytes or an
// image longer than maxImageBytes is an error: no reader would accept it.
func encodeFile(key Key, meta Meta, image []byte) ([]byte, error) {
	m := metaSize(meta)
	if m > maxMetaBytes {
		return nil, fmt.Errorf("jit: kernel cache file of key %s: metadata of %d bytes (a compiler log of %d), more than the largest a cache file holds (%d)",
			key.Short(), m, len(meta.Log), maxMetaBytes)
	}
	if len(image) > maxImageBytes {
		return nil, fmt.Errorf("jit: kernel cache file of key %s: image of %d bytes, more than the largest a cache file holds (%d)",
			key.Short(), len(image), maxImageBytes)
	}
	buf := make([]byte, headerSize, headerSize+m+uint64(len(image)))
	copy(buf[0:8], fileMagic)
	binary.LittleEndian.PutUint32(buf[8:12], FormatVersion)
	binary.LittleEndian.PutUint32(buf[12:16], uint32(m))
	binary.LittleEndian.PutUint64(buf[16:24], uint64(len(image)))
	copy(buf[24:56], key[:])
	buf = appendMeta(buf, meta)
	buf = append(buf, image...)
	h := sha256.New()
	h.Write(buf[:56])
	h.Write(buf[headerSize:])
	h.Sum(buf[56:56])
	return buf, nil
}

// checkHeader checks the header of a cache file of size bytes at path (hdr
// holds its first headerSize bytes, or all of a shorter file) and returns
// the lengths of its metadata and image: they must add up to the file's
// size and stay within maxMetaBytes and maxImageBytes.
func checkHeader(path string, hdr []byte, size uint64) (m, n uint64, err error) {
	bad := func(format string, a ...any) (uint64, uint64, error) {
		return 0, 0, &corruptError{path: path, reason: fmt.Sprintf(format, a...)}
	}
	if len(hdr) < headerSize || size < headerSize {
		return bad("truncated: %d bytes, header needs %d", min(uint64(len(hdr)), size), headerSize)
	}
	if string(hdr[0:8]) != fileMagic {
		return bad("foreign file: magic %q", hdr[0:8])
	}
	if v := binary.LittleEndian.Uint32(hdr[8:12]); v != FormatVersion {
		return bad("format version %d, this build reads %d", v, FormatVersion)
	}
	// The lengths are checked against what the file holds without adding
	// them: a sum could wrap around, and the checksum does not vouch for
	// a file that someone resealed.
	m = uint64(binary.LittleEndian.Uint32(hdr[12:16]))
	n = binary.LittleEndian.Uint64(hdr[16:24])
	body := size - headerSize
	switch {
	case m > body:
		return bad("truncated: metadata of %d bytes, %d bytes after the header", m, body)
	case n > body-m:
		return bad("truncated: image of %d bytes, %d bytes after the metadata", n, body-m)
	case n < body-m:
		return bad("%d trailing bytes after the image", body-m-n)
	case m > maxMetaBytes:
		return bad("metadata of %d bytes, more than the largest this build reads (%d)", m, maxMetaBytes)
	case n > maxImageBytes:
		return bad("image of %d bytes, more than the largest this build reads (%d)", n, maxImageBytes)
	}
	return m, n, nil
}

// decodeFile checks a cache file read from path and returns its parts. want
// is the key the file must hold; the zero key accepts any (for listing).
func decodeFile(path string, data []byte, want Key) (Key, Meta, []byte, error) {
	bad := func(format string, a ...any) (Key, Meta, []byte, error) {
		return Key{}, Meta{}, nil, &corruptError{path: path, reason: fmt.Sprintf(format, a...)}
	}
	m, _, err := checkHeader(path, data[:min(len(data), headerSize)], uint64(len(data)))
	if err != nil {
		return Key{}, Meta{}, nil, err
	}
	var key Key
	copy(key[:], data[24:56])
	if want != (Key{}) && key != want {
		return bad("holds key %s, expected %s", key.Short(), want.Short())
	}
	h := sha256.New()
	h.Write(data[:56])
	h.Write(data[headerSize:])
	if !bytes.Equal(h.Sum(nil), data[56:88]) {
		return bad("checksum mismatch")
	}
	meta, err := decodeMeta(data[headerSize : headerSize+m])
	if err != nil {
		return bad("metadata: %v", err)
	}
	return key, meta, data[headerSize+m:], nil
}

// readFile loads and checks the file of key; fs.ErrNotExist when absent, a
// *corruptError when present but not trusted (not a regular file included).
func readFile(dir string, key Key) (Meta, []byte, error) {
	path := filePath(dir, key)
	data, err := readRegular(path)
	if err != nil {
		return Meta{}, nil, err
	}
	_, meta, image, err := decodeFile(path, data, key)
	return meta, image, err
}

// readRegular reads path when it is a regular file, no further than its
// header allows (readContent). Anything else (a FIFO, whose open would
// block until a writer comes, a directory, a device, a symbolic link) is a
// *corruptError, found by Lstat before opening.
func readRegular(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	f, fi, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readContent(path, f, fi.Size())
}

// openRegular opens path for reading and checks that what it opened is a
// regular file, in case something else was swapped in since an Lstat: a
// symbolic link is refused by the open itself (O_NOFOLLOW), whatever it
// points to, and the open does not block on a FIFO (O_NONBLOCK).
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, notRegular(path, fs.ModeSymlink)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(path, fi.Mode())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// readContent reads the cache file path from r, whose size was size when it
// was opened, no further than its header allows: the header is checked
// against size first, so a huge file is refused unread, and a file that
// grows while it is read is read one byte past its header's length, not
// until it stops. A file that shrank comes back short, for decodeFile to
// name.
func readContent(path string, r io.Reader, size int64) ([]byte, error) {
	hdr := make([]byte, headerSize)
	k, err := io.ReadFull(r, hdr)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if k < headerSize {
		size = int64(k)
	}
	m, n, err := checkHeader(path, hdr[:k], uint64(max(size, 0)))
	if err != nil {
		return nil, err
	}
	data := make([]byte, headerSize+m+n)
	copy(data, hdr)
	k, err = io.ReadFull(r, data[headerSize:])
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return data[:headerSize+k], nil
	}
	if err != nil {
		return nil, err
	}
	if k, _ := r.Read(make([]byte, 1)); k > 0 {
		return nil, &corruptError{path: path, reason: fmt.Sprintf("grew past the %d bytes its header gives while it was read", len(data))}
	}
	return data, nil
}

func notRegular(path string, mode fs.FileMode) error {
	return &corruptError{path: path, reason: fmt.Sprintf("not a regular file (%s)", fileKind(mode))}
}

// fileKind names the type of a file mode for messages.
func fileKind(mode fs.FileMode) string {
	switch t := mode.Type(); {
	case t&fs.ModeDir != 0:
		return "directory"
	case t&fs.ModeSymlink != 0:
		return "symbolic link"
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	case t == 0:
		return "regular file"
	default:
		return "mode " + t.String()
	}
}

// writeFile stores an image atomically: temp file in dir, fsync, rename,
// then fsync of the directory so the rename is durable.
func writeFile(dir string, key Key, meta Meta, image []byte) error {
	data, err := encodeFile(key, meta, image)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The directory sync is best effort: not every file system syncs
	// directories, and an entry lost in a crash is rebuilt.
	o := atomicfile.Options{TempPattern: "." + key.Short() + "-*" + tmpExt, BestEffortDirSync: true}
	return o.WriteFile(filePath(dir, key), data)
}

// DefaultDir returns the kernel cache directory chosen by the environment
// ("" when $DFLASH_KERNEL_CACHE is "off") and which rule chose it.
func DefaultDir() (dir, why string, err error) {
	if d := switches.KernelCache.Value(); d != "" {
		if d == "off" {
			return "", "$DFLASH_KERNEL_CACHE=off (memory only)", nil
		}
		return d, "$DFLASH_KERNEL_CACHE", nil
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "dflash", "kernels"), "$XDG_CACHE_HOME", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", "", fmt.Errorf("jit: no kernel cache directory: set DFLASH_KERNEL_CACHE: %w", err)
	}
	return filepath.Join(home, ".cache", "dflash", "kernels"), "~/.cache", nil
}

// DiskEntry is one file of a cache directory.
type DiskEntry struct {
	Path    string
	Key     Key // zero when the file is not a valid entry
	Size    int64
	ModTime time.Time
	Meta    Meta
	Temp    bool  // an unfinished write (or one left by a crashed process)
	Err     error // why the file is not a valid entry
}

// List reads every cache file in dir, checking each. Anything under a
// cache file's name that is not a regular file is listed as invalid and
// never opened. A missing dir lists nothing.
func List(dir string) ([]DiskEntry, error) {
	ents, err := cacheFiles(dir)
	if err != nil {
		return nil, err
	}
	var out []DiskEntry
	for _, de := range ents {
		out = append(out, listEntry(dir, de, isTempName(de.Name())))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Meta.Family != out[j].Meta.Family {
			return out[i].Meta.Family < out[j].Meta.Family
		}
		return out[i].Path < out[j].Path
	})
	return out, nil
}

// cacheFiles returns the entries of dir named as cache files or as
// writeFile's temporary files, whatever they are; a missing dir has none.
func cacheFiles(dir string) ([]fs.DirEntry, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ents, func(de fs.DirEntry) bool {
		return !strings.HasSuffix(de.Name(), fileExt) && !isTempName(de.Name())
	}), nil
}

// listEntry checks one cache file of a directory listing. Only regular
// files are opened: anything else under a cache file's name is listed as
// invalid without opening it (a FIFO would block).
func listEntry(dir string, de fs.DirEntry, isTmp bool) DiskEntry {
	name := de.Name()
	e := DiskEntry{Path: filepath.Join(dir, name), Temp: isTmp}
	if fi, err := de.Info(); err == nil {
		e.Size, e.ModTime = fi.Size(), fi.ModTime()
	}
	switch {
	case !de.Type().IsRegular():
		e.Err = notRegular(e.Path, de.Type())
	case isTmp:
	default:
		want, err := hexKey(strings.TrimSuffix(name, fileExt))
		if err != nil {
			e.Err = &corruptError{path: e.Path, reason: "file name is not a key"}
			break
		}
		var data []byte
		if data, e.Err = readRegular(e.Path); e.Err == nil {
			e.Key, e.Meta, _, e.Err = decodeFile(e.Path, data, want)
		}
	}
	return e
}

// isTempName reports whether a file name is one of writeFile's temporary
// files.
func isTempName(name string) bool {
	return strings.HasPrefix(name, ".") && strings.HasSuffix(name, tmpExt)
}

// staleTempAge is the age past which a temporary file is taken for one left
// by a writer that was killed before its rename: a live writer renames its
// file within seconds of creating it. Age rather than the writer's process
// id decides, because processes on other hosts or in other PID namespaces
// may share the directory.
const staleTempAge = 10 * time.Minute

// removeStaleTemps removes the temporary files of dir last modified before
// now-staleTempAge and returns their paths; a missing dir has none.
func removeStaleTemps(dir string, now time.Time) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, de := range ents {
		if !isTempName(de.Name()) {
			continue
		}
		fi, err := de.Info()
		if err != nil || !fi.ModTime().Before(now.Add(-staleTempAge)) {
			continue // gone meanwhile, or possibly a live writer's
		}
		path := filepath.Join(dir, de.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}

func hexKey(s string) (Key, error) {
	var k Key
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(k) {
		return k, fmt.Errorf("not a key")
	}
	copy(k[:], b)
	return k, nil
}

// Clear removes the cache files (and unfinished temporary files) of dir,
// nothing else, and reports how many files and bytes it removed. It goes by
// their names and never opens them: a huge or hostile file goes as easily
// as a good one.
func Clear(dir string) (files int, bytes int64, err error) {
	ents, err := cacheFiles(dir)
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, de := range ents {
		var size int64
		if fi, err := de.Info(); err == nil {
			size = fi.Size()
		}
		if err := os.Remove(filepath.Join(dir, de.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		files++
		bytes += size
	}
	return files, bytes, errors.Join(errs...)
}

// DirStats summarises a cache directory.
type DirStats struct {
	Dir       string
	Entries   int            // valid cache files
	Bytes     int64          // bytes of valid files
	Invalid   int            // files that would be discarded
	Temp      int            // unfinished temporary files
	Families  map[string]int // valid files per family
	CompileMS float64        // compile time recorded in the valid files
}

// StatDir summarises dir.
func StatDir(dir string) (DirStats, error) {
	st := DirStats{Dir: dir, Families: map[string]int{}}
	ents, err := List(dir)
	if err != nil {
		return st, err
	}
	for _, e := range ents {
		switch {
		case e.Temp:
			st.Temp++
		case e.Err != nil:
			st.Invalid++
		default:
			st.Entries++
			st.Bytes += e.Size
			st.Families[e.Meta.Family]++
			st.CompileMS += e.Meta.CompileMS
		}
	}
	return st, nil
}
