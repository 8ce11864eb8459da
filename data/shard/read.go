package shard

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
	"unsafe"

	"dflash/dtype"
)

// Dataset is an opened prepared directory. Its methods are safe for
// concurrent use; slices it returns alias the mapped files and must not be
// written or used after Close.
type Dataset struct {
	dir    string
	meta   Meta
	shards []*shardFile
	first  []int64 // global index of each shard's first sample
	n      int64
	scanMu sync.Mutex // held by scan
}

type shardFile struct {
	path  string
	data  []byte // whole file (mapped or read)
	unmap func() error
	offs  []uint64
	ids   []int32
	mask  []uint8
	crc   uint32
	info  ShardInfo
	// Filled by scan: the checksum of the body and the id range.
	scanned      bool
	bodyCRC      uint32
	minID, maxID int32
}

// Open opens a prepared directory: it reads meta.json and maps every shard,
// checking each header against the file and meta.json.
func Open(dir string) (*Dataset, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	d := &Dataset{dir: dir}
	if err := json.Unmarshal(b, &d.meta); err != nil {
		return nil, fmt.Errorf("shard: %s: %w", filepath.Join(dir, MetaFile), err)
	}
	if d.meta.Format != FormatName || d.meta.Version != version {
		return nil, fmt.Errorf("shard: %s: format %q version %d, want %q version %d", dir, d.meta.Format, d.meta.Version, FormatName, version)
	}
	for _, si := range d.meta.Shards {
		s, err := openShard(filepath.Join(dir, si.File))
		if err != nil {
			d.Close()
			return nil, err
		}
		s.info = si
		d.shards = append(d.shards, s)
		if int64(len(s.offs)-1) != si.Samples || int64(len(s.ids)) != si.Tokens || s.crc != si.CRC32C {
			d.Close()
			return nil, fmt.Errorf("shard: %s does not match meta.json (samples, tokens or checksum)", s.path)
		}
		d.first = append(d.first, d.n)
		d.n += si.Samples
	}
	if d.n != d.meta.Samples {
		d.Close()
		return nil, fmt.Errorf("shard: %s: shards hold %d samples, meta.json says %d", dir, d.n, d.meta.Samples)
	}
	return d, nil
}

func openShard(path string) (*shardFile, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	s := &shardFile{path: path, data: data, unmap: unmap}
	h, err := decodeHeader(data)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("shard: %s: %w", path, err)
	}
	s.crc = h.crc
	s.offs = castSlice[uint64](data[h.offsOff:h.idsOff])
	s.ids = castSlice[int32](data[h.idsOff:h.maskOff])
	s.mask = data[h.maskOff:]
	prev := uint64(0)
	for i, o := range s.offs {
		if o < prev || o > h.t || (i == 0 && o != 0) {
			s.close()
			return nil, fmt.Errorf("shard: %s: offsets[%d] = %d is out of order or range", path, i, o)
		}
		prev = o
	}
	if s.offs[h.n] != h.t {
		s.close()
		return nil, fmt.Errorf("shard: %s: last offset %d, want %d tokens", path, s.offs[h.n], h.t)
	}
	return s, nil
}

// castSlice views b as a slice of T without copying on little-endian hosts
// (b must be aligned, which mmap and the layout guarantee); elsewhere it
// decodes a copy.
func castSlice[T uint64 | int32](b []byte) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	n := len(b) / size
	if n == 0 {
		return nil
	}
	if dtype.HostLittleEndian && uintptr(unsafe.Pointer(&b[0]))%uintptr(size) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]T, n)
	for i := range out {
		if size == 8 {
			out[i] = T(binary.LittleEndian.Uint64(b[8*i:]))
		} else {
			out[i] = T(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	}
	return out
}

func (s *shardFile) close() error {
	if s.unmap != nil {
		err := s.unmap()
		s.unmap = nil
		return err
	}
	return nil
}

// Close unmaps the shards.
func (d *Dataset) Close() error {
	var first error
	for _, s := range d.shards {
		if err := s.close(); err != nil && first == nil {
			first = err
		}
	}
	d.shards = nil
	return first
}

// Meta returns the dataset description.
func (d *Dataset) Meta() Meta { return d.meta }

// Len is the number of samples.
func (d *Dataset) Len() int { return int(d.n) }

// locate returns the shard and local index of global sample i; it panics on
// an index out of range (a programmer error).
func (d *Dataset) locate(i int) (*shardFile, int) {
	if i < 0 || int64(i) >= d.n {
		panic(fmt.Sprintf("shard: sample %d out of range [0,%d)", i, d.n))
	}
	k := sort.Search(len(d.first), func(k int) bool { return d.first[k] > int64(i) }) - 1
	return d.shards[k], i - int(d.first[k])
}

// SampleLen is the number of tokens of sample i.
func (d *Dataset) SampleLen(i int) int {
	s, j := d.locate(i)
	return int(s.offs[j+1] - s.offs[j])
}

// Sample returns the token ids and loss mask of sample i (views into the
// mapped file).
func (d *Dataset) Sample(i int) (ids []int32, lossMask []uint8) {
	s, j := d.locate(i)
	a, b := s.offs[j], s.offs[j+1]
	return s.ids[a:b:b], s.mask[a:b:b]
}

// Lengths returns the length of every sample, in index order.
func (d *Dataset) Lengths() []int {
	out := make([]int, 0, d.n)
	for _, s := range d.shards {
		for j := 0; j+1 < len(s.offs); j++ {
			out = append(out, int(s.offs[j+1]-s.offs[j]))
		}
	}
	return out
}

// Dir is the directory the dataset was opened from.
func (d *Dataset) Dir() string { return d.dir }

// scan reads every byte of every shard once (in parallel over shards):
// the CRC-32C of the body and the range of the token ids.
func (d *Dataset) scan() {
	d.scanMu.Lock()
	defer d.scanMu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, s := range d.shards {
		if s.scanned {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.bodyCRC = crc32.Checksum(s.data[headerSize:], castagnoli)
			s.minID, s.maxID = math.MaxInt32, math.MinInt32
			for _, id := range s.ids {
				s.minID, s.maxID = min(s.minID, id), max(s.maxID, id)
			}
			s.scanned = true
		}()
	}
	wg.Wait()
}

// Verify recomputes every shard's CRC-32C and compares it with the header,
// and its largest id with meta.json's; an error names the shard.
func (d *Dataset) Verify() error {
	d.scan()
	for _, s := range d.shards {
		if s.bodyCRC != s.crc {
			return fmt.Errorf("shard: %s: checksum %08x, header says %08x (the file is corrupt: re-run data prep)", s.path, s.bodyCRC, s.crc)
		}
		if m := s.info.MaxID; m != nil && len(s.ids) > 0 && *m != s.maxID {
			return fmt.Errorf("shard: %s: largest id %d, meta.json says %d (re-run data prep)", s.path, s.maxID, *m)
		}
	}
	return nil
}

// CheckIDs reports the first token id outside [0, vocab), naming the shard
// and the sample that holds it.
func (d *Dataset) CheckIDs(vocab int) error {
	d.scan()
	for k, s := range d.shards {
		if len(s.ids) == 0 || (s.minID >= 0 && int64(s.maxID) < int64(vocab)) {
			continue
		}
		at := slices.IndexFunc(s.ids, func(id int32) bool { return id < 0 || int64(id) >= int64(vocab) })
		j := sort.Search(len(s.offs)-1, func(j int) bool { return s.offs[j+1] > uint64(at) })
		return fmt.Errorf("shard: %s: sample %d (of the dataset; token %d of it) has id %d, outside the target's vocabulary [0, %d)",
			s.path, d.first[k]+int64(j), uint64(at)-s.offs[j], s.ids[at], vocab)
	}
	return nil
}
