package ncclcheck

import (
	"fmt"
	"sync"
	"time"

	"dflash/dtype"
)

// fakeComm is an in-process all-reduce over host memory for CPU tests: each
// call waits for every rank, then every rank gets the element-wise sum,
// added in float32 and rounded to the dtype as a GPU would.
type fakeComm struct {
	n int

	mu      sync.Mutex
	cond    *sync.Cond
	gen     int      // completed calls
	arrived int      // ranks in the current call
	sends   [][]byte // per rank, this call
	result  []byte   // sum of the last completed call

	// faults, set before a run
	corrupt   func(rank int, call int, out []byte) // alters rank's result of a call
	skipRank  int                                  // a rank whose input is left out (-1: none)
	noWrite   bool                                 // the all-reduce writes nothing
	failAlloc int64                                // Alloc of at least this many bytes fails (0: never)
}

func newFakeComm(n int) *fakeComm {
	c := &fakeComm{n: n, sends: make([][]byte, n), skipRank: -1}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// allReduce contributes send and returns the summed result (count elements).
func (c *fakeComm) allReduce(rank int, send []byte, count int, t dtype.DType) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	gen := c.gen
	c.sends[rank] = send
	c.arrived++
	if c.arrived == c.n {
		c.result = sumBytes(c.sends, c.skipRank, count, t)
		c.arrived = 0
		c.gen++
		c.cond.Broadcast()
	}
	for c.gen == gen {
		c.cond.Wait()
	}
	return c.result
}

// sumBytes adds the ranks' inputs element-wise in float32, rounding the
// running sum to t after every addition (round to nearest even for bf16).
func sumBytes(sends [][]byte, skip, count int, t dtype.DType) []byte {
	sums := make([]float32, count)
	for i := range sums {
		var s float32
		for r, b := range sends {
			if r == skip {
				continue
			}
			s += float32(element(b, int64(i), t))
			if t == dtype.BF16 {
				s = dtype.BF16ToFloat32(dtype.Float32ToBF16(s))
			}
		}
		sums[i] = s
	}
	out := make([]byte, count*t.Size())
	dtype.EncodeFloat32(t, out, sums)
	return out
}

type fakeMem struct{ b []byte }

func (m *fakeMem) Len() int64 { return int64(len(m.b)) }

// fakeRank is one rank of a fakeComm; it counts calls for the tests.
type fakeRank struct {
	c          *fakeComm
	rank       int
	calls      int
	allocs     int
	liveMem    int
	maxUpload  int
	uploads    int
	copies     int
	fakeTimeNS int64 // per all-reduce
}

func (f *fakeRank) Rank() int   { return f.rank }
func (f *fakeRank) NRanks() int { return f.c.n }

func (f *fakeRank) Alloc(n int64) (Mem, error) {
	if f.c.failAlloc > 0 && n >= f.c.failAlloc {
		return nil, fmt.Errorf("fake out of memory: %d bytes", n)
	}
	f.allocs++
	f.liveMem++
	return &fakeMem{make([]byte, n)}, nil
}

func (f *fakeRank) Free(Mem) { f.liveMem-- }

func (f *fakeRank) Upload(dst Mem, off int64, src []byte) error {
	f.uploads++
	f.maxUpload = max(f.maxUpload, len(src))
	copy(dst.(*fakeMem).b[off:off+int64(len(src))], src)
	return nil
}

func (f *fakeRank) Download(dst []byte, src Mem, off int64) error {
	copy(dst, src.(*fakeMem).b[off:off+int64(len(dst))])
	return nil
}

func (f *fakeRank) Memset(dst Mem, v byte) error {
	b := dst.(*fakeMem).b
	for i := range b {
		b[i] = v
	}
	return nil
}

func (f *fakeRank) Copy(dst Mem, dstOff int64, src Mem, srcOff, n int64) error {
	f.copies++
	copy(dst.(*fakeMem).b[dstOff:dstOff+n], src.(*fakeMem).b[srcOff:srcOff+n])
	return nil
}

func (f *fakeRank) AllReduce(send, recv Mem, count int, t dtype.DType) error {
	n := int64(count) * int64(t.Size())
	in := send.(*fakeMem).b[:n]
	res := f.c.allReduce(f.rank, in, count, t)
	call := f.calls
	f.calls++
	if f.c.noWrite {
		return nil
	}
	out := recv.(*fakeMem).b[:n]
	copy(out, res)
	if f.c.corrupt != nil {
		f.c.corrupt(f.rank, call, out)
	}
	return nil
}

func (f *fakeRank) Time(iters int, op func() error) (time.Duration, error) {
	for range iters {
		if err := op(); err != nil {
			return 0, err
		}
	}
	return time.Duration(int64(iters) * f.fakeTimeNS), nil
}

func (f *fakeRank) Sync() error { return nil }
