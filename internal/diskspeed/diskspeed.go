// Package diskspeed measures a disk's own write speed, the way
// `dd if=/dev/zero of=FILE bs=16M count=N oflag=direct conv=fsync` does:
// one buffer written again and again around the page cache (directio), an
// fsync at the end, the file removed afterwards. It is the ceiling that a
// file writer's speed is compared with.
package diskspeed

import (
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"dflash/internal/directio"
)

// Result is one measurement.
type Result struct {
	Bytes      int64   `json:"bytes"`
	BlockBytes int     `json:"block_bytes"`
	Seconds    float64 `json:"seconds"` // from the open to the end of the fsync
	GBPerS     float64 `json:"gb_per_s"`
	// Direct is false where the file system refuses direct writes: then
	// the blocks went through the page cache, and the fsync wrote them.
	Direct bool `json:"direct"`
}

// Write writes n bytes (rounded up to a multiple of directio.Align) to a
// new file in dir, in writes of block bytes (a positive multiple of
// directio.Align) from one buffer of random bytes, fsyncs and closes it,
// removes it, and returns the rate.
func Write(dir string, n int64, block int) (Result, error) {
	if block <= 0 || block%directio.Align != 0 {
		return Result{}, fmt.Errorf("diskspeed: block of %d bytes: want a positive multiple of %d", block, directio.Align)
	}
	n = (n + directio.Align - 1) / directio.Align * directio.Align
	buf, err := directio.Alloc(block)
	if err != nil {
		return Result{}, err
	}
	defer directio.Free(buf)
	r := rand.New(rand.NewPCG(uint64(n), uint64(block)))
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	f, err := os.CreateTemp(dir, ".dflash-diskspeed-*")
	if err != nil {
		return Result{}, err
	}
	name := f.Name()
	defer os.Remove(name)
	f.Close()
	res := Result{Bytes: n, BlockBytes: block, Direct: true}
	t0 := time.Now()
	f, err = directio.OpenFile(name, os.O_TRUNC, 0)
	if directio.Refused(err) {
		res.Direct = false
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	}
	if err != nil {
		return Result{}, err
	}
	for off := int64(0); off < n && err == nil; off += int64(block) {
		_, err = f.Write(buf[:min(int64(block), n-off)])
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Result{}, fmt.Errorf("diskspeed: %s: %w", name, err)
	}
	d := time.Since(t0)
	res.Seconds = d.Seconds()
	res.GBPerS = float64(n) / 1e9 / max(res.Seconds, 1e-9)
	return res, nil
}
