package shard

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"dflash/internal/atomicfile"
)

// Writer builds a prepared dataset directory. Samples are buffered until a
// shard holds ShardTokens tokens, then sorted by length and written.
type Writer struct {
	out, tmp    string
	shardTokens int
	ids         []int32
	mask        []uint8
	starts      []int // per buffered sample: start in ids
	lens        []int
	meta        Meta
	done        bool
}

// DefaultShardTokens is the default shard size: 64 Mi tokens (320 MiB).
const DefaultShardTokens = 64 << 20

// Create starts a dataset that Finish will place at dir. dir must not exist
// unless force is set (then Finish replaces it).
func Create(dir string, shardTokens int, force bool) (*Writer, error) {
	if shardTokens <= 0 {
		shardTokens = DefaultShardTokens
	}
	if _, err := os.Stat(dir); err == nil && !force {
		return nil, fmt.Errorf("shard: %s exists (use force to replace it)", dir)
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	removeStale(parent, filepath.Base(dir))
	tmp, err := os.MkdirTemp(parent, fmt.Sprintf("%s%d-", partialPrefix(filepath.Base(dir)), os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it private
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("shard: %w", err)
	}
	return &Writer{out: dir, tmp: tmp, shardTokens: shardTokens,
		meta: Meta{Format: FormatName, Version: version}}, nil
}

// partialPrefix starts the name of the temporary directories of a dataset
// named base: "." + base + ".partial-" + the writer's pid + "-" + random.
func partialPrefix(base string) string { return "." + base + ".partial-" }

// removeStale removes the temporary directories that writers of base in
// parent left when they were killed (their process is gone); those of live
// writers stay.
func removeStale(parent, base string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), partialPrefix(base))
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		path := filepath.Join(parent, e.Name())
		if err := os.RemoveAll(path); err == nil {
			slog.Info("shard: removed the partial output of a killed run", "dir", path, "pid", pid)
		}
	}
}

// Add appends one sample; ids and mask must have the same length (a
// programmer error otherwise). The slices are copied.
func (w *Writer) Add(ids []int32, mask []uint8) error {
	if len(ids) != len(mask) {
		panic(fmt.Sprintf("shard: Add: %d ids but %d mask bytes", len(ids), len(mask)))
	}
	w.starts = append(w.starts, len(w.ids))
	w.lens = append(w.lens, len(ids))
	w.ids = append(w.ids, ids...)
	w.mask = append(w.mask, mask...)
	for _, m := range mask {
		w.meta.Supervised += int64(m)
	}
	if len(w.ids) >= w.shardTokens {
		return w.Flush()
	}
	return nil
}

// Shards is the number of shard files written so far.
func (w *Writer) Shards() int { return len(w.meta.Shards) }

// Flush writes the buffered samples, if any, as one shard.
func (w *Writer) Flush() error {
	n := len(w.lens)
	if n == 0 {
		return nil
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return w.lens[a] - w.lens[b] })
	t := uint64(len(w.ids))
	offsOff, idsOff, maskOff, _ := layout(uint64(n), t)
	name := fmt.Sprintf("shard-%05d.bin", len(w.meta.Shards))
	path := filepath.Join(w.tmp, name)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("shard: %w", err)
	}
	defer f.Close()
	// The header goes last, once the CRC of the body is known.
	if _, err := f.Seek(headerSize, 0); err != nil {
		return fmt.Errorf("shard: %w", err)
	}
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(f, 1<<20)
	out := func(b []byte) {
		crc.Write(b)
		bw.Write(b)
	}
	var b8 [8]byte
	off := uint64(0)
	for _, k := range append(order, -1) {
		binary.LittleEndian.PutUint64(b8[:], off)
		out(b8[:])
		if k >= 0 {
			off += uint64(w.lens[k])
		}
	}
	buf := make([]byte, 0, 1<<16)
	maxID := int32(math.MinInt32)
	for _, k := range order {
		for _, id := range w.ids[w.starts[k] : w.starts[k]+w.lens[k]] {
			maxID = max(maxID, id)
			buf = binary.LittleEndian.AppendUint32(buf, uint32(id))
			if len(buf) == cap(buf) {
				out(buf)
				buf = buf[:0]
			}
		}
	}
	out(buf)
	for _, k := range order {
		out(w.mask[w.starts[k] : w.starts[k]+w.lens[k]])
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("shard: write %s: %w", path, err)
	}
	h := header{n: uint64(n), t: t, offsOff: offsOff, idsOff: idsOff, maskOff: maskOff, crc: crc.Sum32()}
	if _, err := f.WriteAt(h.encode(), 0); err != nil {
		return fmt.Errorf("shard: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("shard: sync %s: %w", path, err)
	}
	w.meta.Shards = append(w.meta.Shards, ShardInfo{File: name, Samples: int64(n), Tokens: int64(t),
		MinLen: w.lens[order[0]], MaxLen: w.lens[order[n-1]], CRC32C: h.crc, MaxID: &maxID})
	w.meta.Samples += int64(n)
	w.meta.Tokens += int64(t)
	w.ids, w.mask, w.starts, w.lens = w.ids[:0], w.mask[:0], w.starts[:0], w.lens[:0]
	return nil
}

// Finish writes the last shard and meta.json (with info as its "info"),
// then moves the dataset into place. It returns the final Meta.
func (w *Writer) Finish(info any) (Meta, error) {
	if w.done {
		panic("shard: Finish called twice")
	}
	w.done = true
	if err := w.Flush(); err != nil {
		w.Abort()
		return Meta{}, err
	}
	w.meta.Info = info
	if w.meta.Shards == nil {
		w.meta.Shards = []ShardInfo{}
	}
	b, err := json.MarshalIndent(w.meta, "", "  ")
	if err != nil {
		w.Abort()
		return Meta{}, fmt.Errorf("shard: meta: %w", err)
	}
	// Written last, meta.json's directory sync also makes the shards' entries durable.
	if err := atomicfile.WriteFile(filepath.Join(w.tmp, MetaFile), append(b, '\n')); err != nil {
		w.Abort()
		return Meta{}, fmt.Errorf("shard: %w", err)
	}
	if _, err := os.Stat(w.out); err == nil {
		if err := os.RemoveAll(w.out); err != nil {
			w.Abort()
			return Meta{}, fmt.Errorf("shard: replace %s: %w", w.out, err)
		}
	}
	if err := os.Rename(w.tmp, w.out); err != nil {
		w.Abort()
		return Meta{}, fmt.Errorf("shard: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(filepath.Clean(w.out))); err != nil {
		return Meta{}, fmt.Errorf("shard: %w", err)
	}
	return w.meta, nil
}

// Abort removes the temporary directory; the output is left untouched.
func (w *Writer) Abort() {
	w.done = true
	os.RemoveAll(w.tmp)
}
