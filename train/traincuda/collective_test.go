package traincuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/train"
)

// fakeGrad is a range of a rank's flat fp32 gradient in its fakeMem (what
// a Device's GradRange is on the GPU).
type fakeGrad struct {
	buf gpu.Buffer
	n   int
}

func (g fakeGrad) Len() int { return g.n }

// slice returns elements [lo, hi).
func (g fakeGrad) slice(lo, hi int) fakeGrad {
	return fakeGrad{gpu.Buffer{Ptr: g.buf.Ptr + cuda.DevicePtr(4*lo), Size: int64(4 * (hi - lo))}, hi - lo}
}

// fakeWorld is an NCCL group in memory for NCCLCollective's CPU tests:
// the all-reduce number s completes when every rank has queued its s-th,
// summing the ranks' buffers (float64, in rank order) into each.
type fakeWorld struct {
	mu       sync.Mutex
	mems     []*gputest.FakeMem
	calls    map[int][]*fakeCall // by collective number, per rank
	complete map[int]bool
}

type fakeCall struct {
	buf gpu.Buffer
	n   int
	t   dtype.DType
}

func newFakeWorld(mems []*gputest.FakeMem) *fakeWorld {
	return &fakeWorld{mems: mems, calls: map[int][]*fakeCall{}, complete: map[int]bool{}}
}

func (w *fakeWorld) arrive(r, seq int, c *fakeCall) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.calls[seq] == nil {
		w.calls[seq] = make([]*fakeCall, len(w.mems))
	}
	cs := w.calls[seq]
	cs[r] = c
	for _, c := range cs {
		if c == nil {
			return
		}
	}
	sum := make([]float64, c.n)
	for q, c := range cs {
		for i, v := range decodeAny(w.mems[q].Bytes(c.buf), c.t, c.n) {
			sum[i] += v
		}
	}
	for q, c := range cs {
		encodeAny(w.mems[q].Bytes(c.buf), c.t, sum)
	}
	w.complete[seq] = true
}

func decodeAny(raw []byte, t dtype.DType, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		if t == dtype.F64 {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
		} else {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		}
	}
	return out
}

func encodeAny(raw []byte, t dtype.DType, x []float64) {
	for i, v := range x {
		if t == dtype.F64 {
			binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(v))
		} else {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(v)))
		}
	}
}

// fakePort is one rank of a fakeWorld, with its memory.
type fakePort struct {
	w        *fakeWorld
	mem      *gputest.FakeMem
	r        int
	seq      int // all-reduces queued
	recorded int
	polls    int
	aborted  bool
	async    error // returned by asyncError once set
}

func (p *fakePort) rank() int { return p.r }
func (p *fakePort) size() int { return len(p.w.mems) }
func (p *fakePort) memory(x train.Buffer) (gpu.Buffer, error) {
	g, ok := x.(fakeGrad)
	if !ok {
		return gpu.Buffer{}, fmt.Errorf("want a fakeGrad, not %T", x)
	}
	return g.buf, nil
}
func (p *fakePort) alloc(n int64) (gpu.Buffer, error)       { return p.mem.Alloc(n) }
func (p *fakePort) free(b gpu.Buffer)                       { p.mem.Free(b) }
func (p *fakePort) upload(dst gpu.Buffer, src []byte) error { copy(p.mem.Bytes(dst), src); return nil }
func (p *fakePort) download(dst []byte, src gpu.Buffer) error {
	copy(dst, p.mem.Bytes(src))
	return nil
}
func (p *fakePort) allReduce(buf gpu.Buffer, n int, t dtype.DType) error {
	p.seq++
	p.w.arrive(p.r, p.seq, &fakeCall{buf, n, t})
	return nil
}
func (p *fakePort) record() error { p.recorded = p.seq; return nil }
func (p *fakePort) reached() (bool, error) {
	p.polls++
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	return p.w.complete[p.recorded], nil
}
func (p *fakePort) asyncError() error { return p.async }
func (p *fakePort) abort() error      { p.aborted = true; return nil }

// fakeClock advances by each sleep.
type fakeClock struct {
	t      time.Time
	sleeps int
}

func (c *fakeClock) now() time.Time        { return c.t }
func (c *fakeClock) sleep(d time.Duration) { c.t = c.t.Add(d); c.sleeps++ }

// fakeRanks returns n collectives over one fakeWorld, each with its own
// fake memory, with timeout on the real clock.
func fakeRanks(t *testing.T, n int, timeout time.Duration, stop *Stop) ([]*NCCLCollective, []*fakePort) {
	t.Helper()
	mems := make([]*gputest.FakeMem, n)
	for r := range n {
		mems[r] = gputest.NewFakeMem()
	}
	w := newFakeWorld(mems)
	cs := make([]*NCCLCollective, n)
	ps := make([]*fakePort, n)
	for r := range n {
		ps[r] = &fakePort{w: w, mem: mems[r], r: r}
		var err error
		if cs[r], err = newNCCLCollective(ps[r], timeout, stop, realClock{}); err != nil {
			t.Fatal(err)
		}
	}
	return cs, ps
}

// fakeGradient returns grad as a flat fp32 gradient in p's memory.
func fakeGradient(t *testing.T, p *fakePort, grad []float32) fakeGrad {
	t.Helper()
	buf, err := p.mem.Alloc(int64(4 * len(grad)))
	if err != nil {
		t.Fatal(err)
	}
	encodeAny(p.mem.Bytes(buf), dtype.F32, dtype.Convert[float64](grad))
	return fakeGrad{buf, len(grad)}
}

// TestNCCLCollectiveSums runs three ranks whose flat gradients' buckets
// (train.PlanBuckets) are summed through NCCLCollective, then a
// float64 all-reduce: every rank must hold the float64 sum of the ranks'
// random values (rounded to fp32 for the gradient), and float64 sums
// exactly.
func TestNCCLCollectiveSums(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const n = 3
	sizes := []int{7, 33, 5, 64}
	total := 7 + 33 + 5 + 64
	cs, ps := fakeRanks(t, n, 10*time.Second, nil)
	grads := make([][]float32, n)
	devs := make([]fakeGrad, n)
	f64s := make([][]float64, n)
	want := make([]float64, total)
	wantF64 := make([]float64, 5)
	for r := range n {
		grads[r] = make([]float32, total)
		for i := range grads[r] {
			grads[r][i] = float32(rng.NormFloat64())
			want[i] += float64(grads[r][i])
		}
		f64s[r] = make([]float64, 5)
		for i := range f64s[r] {
			f64s[r][i] = rng.Float64() * 100
		}
		devs[r] = fakeGradient(t, ps[r], grads[r])
	}
	for i := range wantF64 {
		for r := range n {
			wantF64[i] += f64s[r][i] // rank order, as the fake world sums
		}
	}
	buckets := train.PlanBuckets(sizes, 4, 100)
	if len(buckets) < 2 {
		t.Fatalf("want several buckets, got %v", buckets)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, bk := range buckets {
				if errs[r] = cs[r].AllReduceSum(devs[r].slice(bk.Lo, bk.Hi)); errs[r] != nil {
					return
				}
			}
			errs[r] = cs[r].AllReduceFloat64(f64s[r])
		}()
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		got := decodeAny(ps[r].mem.Bytes(devs[r].buf), dtype.F32, total)
		for i := range got {
			if float32(got[i]) != float32(want[i]) {
				t.Fatalf("rank %d: gradient[%d] = %g, want %g", r, i, got[i], float32(want[i]))
			}
		}
		for i := range wantF64 {
			if f64s[r][i] != wantF64[i] {
				t.Fatalf("rank %d: float64[%d] = %g, want %g", r, i, f64s[r][i], wantF64[i])
			}
		}
	}
}

// TestNCCLCollectiveLost checks the watchdog's three ways out of a
// collective that does not complete: the deadline (on a fake clock), an
// error NCCL met in the background, and another rank of the process that
// stopped. Each aborts the communicator and returns a *LostError that is
// train.ErrRankLost, and the group stays broken.
func TestNCCLCollectiveLost(t *testing.T) {
	why := errors.New("out of memory in step 3")
	for _, c := range []struct {
		name  string
		setup func(p *fakePort, stop *Stop)
		want  string
		cause error
	}{
		{"deadline", func(*fakePort, *Stop) {},
			"collective: rank 0 of 2: all-reduce #1 did not complete within 1m0s: a rank stopped taking part (NCCL does not say which); communicator aborted", nil},
		{"async error", func(p *fakePort, _ *Stop) { p.async = errors.New("ncclRemoteError") },
			"collective: rank 0 of 2: all-reduce #1: ncclRemoteError; communicator aborted", nil},
		{"stopped", func(_ *fakePort, s *Stop) { s.Fail(1, why) },
			"collective: rank 0 of 2: all-reduce #1: rank 1 stopped (out of memory in step 3); communicator aborted", why},
	} {
		t.Run(c.name, func(t *testing.T) {
			stop := NewStop()
			cs, ps := fakeRanks(t, 2, time.Minute, stop)
			clk := &fakeClock{t: time.Unix(0, 0)}
			cs[0].clk = clk
			c.setup(ps[0], stop)
			g := fakeGradient(t, ps[0], []float32{1, 2, 3, 4})
			err := cs[0].AllReduceSum(g) // rank 1 never joins
			if err == nil || err.Error() != c.want {
				t.Fatalf("err = %v\nwant %s", err, c.want)
			}
			var lost *LostError
			if !errors.Is(err, train.ErrRankLost) || !errors.As(err, &lost) || c.cause != nil && !errors.Is(err, c.cause) {
				t.Fatalf("err %v is not a *LostError wrapping train.ErrRankLost (and %v)", err, c.cause)
			}
			if !ps[0].aborted {
				t.Fatal("communicator not aborted")
			}
			if c.name == "deadline" && clk.t.Sub(time.Unix(0, 0)) < time.Minute {
				t.Fatalf("gave up after %s of a 1m timeout", clk.t.Sub(time.Unix(0, 0)))
			}
			if err2 := cs[0].AllReduceFloat64([]float64{1}); err2 != err {
				t.Fatalf("after the failure: %v, want the same error", err2)
			}
		})
	}
}

// TestAwaitPolls checks await's schedule on a fake clock: an immediate
// completion does not sleep, a completion at the k-th poll is seen there,
// and an expiry comes no earlier than the timeout and at most one
// poll interval later, with the intervals bounded by pollMax.
func TestAwaitPolls(t *testing.T) {
	for _, k := range []int{1, 2, 10, 200} {
		clk := &fakeClock{t: time.Unix(0, 0)}
		polls := 0
		how, err := await(func() (bool, error) { polls++; return polls == k, nil }, nil, nil, time.Hour, clk)
		if how != completed || err != nil || polls != k || clk.sleeps != k-1 {
			t.Fatalf("done at poll %d: outcome %v err %v after %d polls and %d sleeps", k, how, err, polls, clk.sleeps)
		}
	}
	clk := &fakeClock{t: time.Unix(0, 0)}
	timeout := 50 * time.Millisecond
	how, _ := await(func() (bool, error) { return false, nil }, nil, nil, timeout, clk)
	waited := clk.t.Sub(time.Unix(0, 0))
	if how != expired || waited < timeout || waited > timeout+pollMax {
		t.Fatalf("expiry: outcome %v after %s, want expired after [%s, %s]", how, waited, timeout, timeout+pollMax)
	}
	if min := int(timeout / pollMax); clk.sleeps < min {
		t.Fatalf("%d sleeps in %s: intervals above pollMax %s", clk.sleeps, timeout, pollMax)
	}
	boom := errors.New("boom")
	if how, err := await(func() (bool, error) { return false, boom }, nil, nil, timeout, clk); how != failed || err != boom {
		t.Fatalf("poll error: outcome %v err %v", how, err)
	}
}
