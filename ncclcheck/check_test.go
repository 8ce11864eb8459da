package ncclcheck

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"dflash/dtype"
	"dflash/internal/testerr"
	"dflash/internal/testseed"
)

// smallBlocks makes verification blocks 4 periods long for the test, so
// small buffers span many blocks.
func smallBlocks(t *testing.T) {
	old := blockRepeats
	blockRepeats = 4
	t.Cleanup(func() { blockRepeats = old })
}

// refDigest is the SHA-256 of the exact result computed by brute force:
// each element summed over ranks in float64 from the formula in doc.go,
// encoded by hand.
func refDigest(t dtype.DType, bytes int64, nranks int) string {
	p := min(31, 256/nranks)
	e := int64(t.Size())
	out := make([]byte, bytes)
	for i := int64(0); i < bytes/e; i++ {
		s := 0.0
		for r := range nranks {
			s += float64(1 + (i+7*int64(r))%int64(p))
		}
		f := math.Float32bits(float32(s))
		if t == dtype.BF16 {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(f>>16))
		} else {
			binary.LittleEndian.PutUint32(out[4*i:], f)
		}
	}
	h := sha256.Sum256(out)
	return hex.EncodeToString(h[:])
}

func TestInputsSumExactly(t *testing.T) {
	for n := 1; n <= 256; n++ {
		p := Period(n)
		if p < 1 || p > 31 || n*p > 256 {
			t.Fatalf("%d ranks: period %d breaks n*p <= 256", n, p)
		}
		for i := int64(0); i < int64(p); i++ {
			partial := 0
			for r := range n {
				v := Value(i, r, n)
				if v < 1 || v > p {
					t.Fatalf("%d ranks: Value(%d, %d) = %d, want 1..%d", n, i, r, v, p)
				}
				partial += v
				if f := math.Float32bits(float32(partial)); f&0xffff != 0 {
					t.Fatalf("%d ranks: partial sum %d is not exact in bf16", n, partial)
				}
			}
			if partial != Sum(i, n) {
				t.Fatalf("Sum(%d, %d) = %d, want %d", i, n, Sum(i, n), partial)
			}
		}
	}
	for _, bad := range []int{0, 257} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Period(%d) did not panic", bad)
				}
			}()
			Period(bad)
		}()
	}
}

func TestExpectedDigest(t *testing.T) {
	smallBlocks(t)
	for _, c := range []struct {
		t      dtype.DType
		bytes  int64
		nranks int
	}{{dtype.BF16, 4096, 2}, {dtype.F32, 4100, 3}, {dtype.BF16, 2 * 31 * 4 * 2, 8}, {dtype.F32, 12, 1}} {
		if got, want := ExpectedDigest(c.t, c.bytes, c.nranks), refDigest(c.t, c.bytes, c.nranks); got != want {
			t.Errorf("%v %d bytes %d ranks: digest %s, want %s", c.t, c.bytes, c.nranks, got[:12], want[:12])
		}
	}
}

// runFake runs plan on every rank of comm at once.
func runFake(t *testing.T, comm *fakeComm, plan Plan) ([]*RankResult, []*fakeRank, []error) {
	t.Helper()
	ranks := make([]*fakeRank, comm.n)
	res := make([]*RankResult, comm.n)
	errs := make([]error, comm.n)
	var wg sync.WaitGroup
	for r := range comm.n {
		ranks[r] = &fakeRank{c: comm, rank: r, fakeTimeNS: 1000}
		wg.Go(func() { res[r], errs[r] = RunRank(context.Background(), ranks[r], plan) })
	}
	wg.Wait()
	return res, ranks, errs
}

func TestRunRankExact(t *testing.T) {
	smallBlocks(t) // blocks of 124 elements (8 ranks: 124; 1 rank: 124)
	sizes := []int64{4096, 4100, 12 * 1024}
	for _, n := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprintf("nranks=%d", n), func(t *testing.T) {
			plan := Plan{Sizes: sizes, DTypes: []dtype.DType{dtype.BF16, dtype.F32}, Iters: 3, Warmup: 2}
			res, ranks, errs := runFake(t, newFakeComm(n), plan)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			rows := Merge(res)
			if len(rows) != 6 {
				t.Fatalf("%d rows, want 6", len(rows))
			}
			var want []Row
			for i, row := range rows {
				dt := plan.DTypes[i/len(sizes)]
				if row.DType != dt.String() || row.Bytes != sizes[i%len(sizes)] || row.Count != row.Bytes/int64(dt.Size()) {
					t.Fatalf("row %d is %s %d bytes %d elements", i, row.DType, row.Bytes, row.Count)
				}
				if !row.Exact || row.Mismatches != 0 || !row.Agree || row.Reported != n {
					t.Errorf("row %s %d: exact %v, %d mismatches, agree %v, %d reports", row.DType, row.Bytes, row.Exact, row.Mismatches, row.Agree, row.Reported)
				}
				ref := refDigest(dt, row.Bytes, n)
				if row.SHA256 != ref {
					t.Errorf("row %s %d: digest %s, reference %s", row.DType, row.Bytes, row.SHA256[:12], ref[:12])
				}
				want = append(want, Row{DType: row.DType, Bytes: row.Bytes, SHA256: ref})
				// 1 µs per call by the fake clock.
				wantBus := float64(row.Bytes) / 1e-6 / 1e9 * 2 * float64(n-1) / float64(n)
				if row.TimeUS != 1 || math.Abs(row.BusBW-wantBus) > 1e-9*wantBus || row.Iters != 3 {
					t.Errorf("row %s %d: %.3f us, busbw %.4f (want %.4f), %d iters", row.DType, row.Bytes, row.TimeUS, row.BusBW, wantBus, row.Iters)
				}
			}
			if got, ref := Checksum(n, rows), Checksum(n, want); got != ref {
				t.Errorf("checksum %s, reference %s", got[:12], ref[:12])
			}
			if f := Failures(rows); len(f) != 0 {
				t.Errorf("failures on an exact run: %v", f)
			}
			for _, fr := range ranks {
				// One verified call, 2 warm-ups and 3 timed calls per row.
				if fr.calls != 6*len(rows) || fr.uploads != 2 || fr.maxUpload > 124*4 || fr.liveMem != 0 {
					t.Errorf("rank %d: %d calls, %d uploads (largest %d bytes), %d buffers leaked",
						fr.rank, fr.calls, fr.uploads, fr.maxUpload, fr.liveMem)
				}
			}
		})
	}
}

// TestChecksumAcrossRuns: the same shape run twice (as the single-process
// and the one-rank-per-process runs are) gives the same checksum, and a
// different rank count does not.
func TestChecksumAcrossRuns(t *testing.T) {
	smallBlocks(t)
	plan := Plan{Sizes: []int64{4096, 8192}, DTypes: []dtype.DType{dtype.BF16}, Iters: 1}
	sum := func(n int) string {
		res, _, errs := runFake(t, newFakeComm(n), plan)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		// Each rank alone, as a process would report it.
		for _, r := range res {
			if c := Checksum(n, r.Rows); c != Checksum(n, Merge(res)) {
				t.Fatalf("rank %d's checksum differs from the merged one", r.Rank)
			}
		}
		return Checksum(n, Merge(res))
	}
	a, b, c := sum(2), sum(2), sum(3)
	if a != b {
		t.Errorf("two runs of 2 ranks: %s vs %s", a[:12], b[:12])
	}
	if a == c {
		t.Errorf("2 and 3 ranks share checksum %s", a[:12])
	}
}

func TestRunRankDetectsFaults(t *testing.T) {
	smallBlocks(t)
	rng := testseed.New(t)
	bad := int64(rng.IntN(2048)) // an element of the 4 KiB bf16 row
	plan := Plan{Sizes: []int64{4096, 8192}, DTypes: []dtype.DType{dtype.BF16}, Iters: 1, Warmup: -1}
	cases := []struct {
		name      string
		setup     func(c *fakeComm)
		wantBad   []int64 // mismatches per row, summed over ranks
		wantFirst string
		agree     bool
	}{
		{"one element on one rank", func(c *fakeComm) {
			c.corrupt = func(rank, call int, out []byte) {
				if rank == 1 && call == 0 { // the verified call of the first row
					binary.LittleEndian.PutUint16(out[2*bad:], 0x4000) // 2.0
				}
			}
		}, []int64{1, 0}, fmt.Sprintf("rank 1 element %d: got 2, want %d", bad, Sum(bad, 2)), false},
		{"a rank's input left out", func(c *fakeComm) { c.skipRank = 0 }, []int64{2 * 2048, 2 * 4096}, "element 0: got 8, want 9", true},
		{"nothing written", func(c *fakeComm) { c.noWrite = true }, []int64{2 * 2048, 2 * 4096}, "element 0: got NaN, want 9", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			comm := newFakeComm(2)
			c.setup(comm)
			res, _, errs := runFake(t, comm, plan)
			for _, err := range errs {
				if err != nil {
					t.Fatalf("a wrong result must be reported in the rows, not as an error: %v", err)
				}
			}
			rows := Merge(res)
			for i, row := range rows {
				if row.Mismatches != c.wantBad[i] || row.Exact != (c.wantBad[i] == 0) {
					t.Errorf("row %d: %d mismatches (exact %v), want %d", i, row.Mismatches, row.Exact, c.wantBad[i])
				}
			}
			if !strings.Contains(rows[0].FirstBad, c.wantFirst) {
				t.Errorf("first bad %q, want it to contain %q", rows[0].FirstBad, c.wantFirst)
			}
			if rows[0].Agree != c.agree {
				t.Errorf("agree = %v, want %v", rows[0].Agree, c.agree)
			}
			f := Failures(rows)
			if len(f) == 0 || !strings.HasPrefix(f[0], "bf16 4K: ") {
				t.Errorf("failures %q", f)
			}
		})
	}
}

func TestRunRankErrors(t *testing.T) {
	comm := newFakeComm(1)
	comm.failAlloc = 1 << 20
	_, err := RunRank(context.Background(), &fakeRank{c: comm}, Plan{Sizes: []int64{4096, 1 << 20}, DTypes: []dtype.DType{dtype.F32}})
	if err == nil || !strings.Contains(err.Error(), "rank 0: send buffer of 1M") {
		t.Errorf("alloc failure: %v", err)
	}
	_, err = RunRank(context.Background(), &fakeRank{c: newFakeComm(1)}, Plan{Sizes: []int64{4096, 4098}, DTypes: []dtype.DType{dtype.BF16, dtype.F32}})
	if err == nil || !strings.Contains(err.Error(), "size 4098 bytes is not a whole number of f32 elements") {
		t.Errorf("odd size: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunRank(ctx, &fakeRank{c: newFakeComm(1)}, Plan{Sizes: []int64{4096}, DTypes: []dtype.DType{dtype.F32}}); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
}

func TestParseSizes(t *testing.T) {
	cases := []struct {
		in   string
		want []int64
		err  string
	}{
		{"4K..1G", nil, ""},
		{"256M", []int64{256 << 20}, ""},
		{"4K,1M, 4096", []int64{4096, 1 << 20}, ""},
		{"4KiB..64KB:4", []int64{4096, 16384, 65536}, ""},
		{"1K..1K", []int64{1024}, ""},
		{"12", []int64{12}, ""},
		{"1M..4K", nil, "1M is larger than 4K"},
		{"4K..1G:1", nil, "factor"},
		{"abc", nil, `size "abc"`},
		{"0", nil, `size "0"`},
		{"-4K", nil, `size "-4K"`},
		{"", nil, "no size"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseSizes(c.in)
			if testerr.Want(t, err, c.err) {
				return
			}
			if c.in == "4K..1G" {
				if len(got) != 19 || got[0] != 4096 || got[18] != 1<<30 || got[10] != 4096<<10 {
					t.Fatalf("4K..1G = %v", got)
				}
				return
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestParseDTypes(t *testing.T) {
	got, err := ParseDTypes("bf16, fp32,bf16")
	if err != nil || len(got) != 2 || got[0] != dtype.BF16 || got[1] != dtype.F32 {
		t.Errorf("bf16,fp32,bf16 = %v, %v", got, err)
	}
	if _, err := ParseDTypes("fp16"); err == nil || !strings.Contains(err.Error(), `dtype "fp16": want bf16 or f32`) {
		t.Errorf("fp16: %v", err)
	}
}

func TestBandwidthAndFormat(t *testing.T) {
	// 256 MiB in 1 ms: algBw 268.435456 GB/s; 2 ranks: busBw equal; 8: x1.75; 1: 0.
	const b = 256 << 20
	if a := AlgBW(b, time.Millisecond); math.Abs(a-268.435456) > 1e-9 {
		t.Errorf("AlgBW = %v", a)
	}
	for _, c := range []struct {
		n    int
		want float64
	}{{1, 0}, {2, 268.435456}, {8, 268.435456 * 1.75}} {
		if got := BusBW(b, time.Millisecond, c.n); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("BusBW n=%d = %v, want %v", c.n, got, c.want)
		}
	}
	for n, want := range map[int64]string{4096: "4K", 1 << 30: "1G", 256 << 20: "256M", 4100: "4100", 3 << 30: "3G"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if AutoIters(4096) != 500 || AutoIters(1<<30) != 20 || AutoIters(16<<20) != 64 {
		t.Errorf("AutoIters: %d %d %d", AutoIters(4096), AutoIters(1<<30), AutoIters(16<<20))
	}
}
