package gpu

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"dflash/dtype"
	"dflash/internal/testlog"
	"dflash/internal/testseed"
)

// randomAlgos returns n distinct candidate signatures.
func randomAlgos(t *testing.T, n int) [][8]uint64 {
	rng := testseed.New(t)
	algos := make([][8]uint64, n)
	for i := range algos {
		for j := range algos[i] {
			algos[i][j] = rng.Uint64()
		}
	}
	return algos
}

func TestPickGemm(t *testing.T) {
	inf := math.Inf(1)
	rng := testseed.New(t)
	cases := [][]float64{
		{1.0, 0.99, 1.01},     // 1% faster: the heuristic's first stays
		{1.0, 0.97, 0.95},     // the fastest, not the first one 2% faster
		{inf, 2, 1.5},         // the first cannot run
		{1.0, inf, 0.5},       // a candidate that cannot run is never picked
		{1.0},                 // one candidate
		{1.0, 0.9799, 0.9801}, // just past the margin
	}
	for range 20 {
		ts := make([]float64, 1+rng.IntN(8))
		for i := range ts {
			ts[i] = 0.9 + 0.2*rng.Float64()
		}
		cases = append(cases, ts)
	}
	for _, ts := range cases {
		// reference: the minimum by a plain scan; the first unless the
		// minimum beats it by more than 2%
		want, lo := 0, math.Inf(1)
		for i, x := range ts {
			if x < lo {
				want, lo = i, x
			}
		}
		if !(lo < 0.98*ts[0]) {
			want = 0
		}
		got, ok := pickGemm(ts)
		if got != want || !ok {
			t.Errorf("pickGemm(%v) = %d, %v; want %d, true", ts, got, ok, want)
		}
	}
	if _, ok := pickGemm([]float64{inf, inf}); ok {
		t.Error("pickGemm of candidates that all failed reports ok")
	}
	if _, ok := pickGemm(nil); ok {
		t.Error("pickGemm of no candidates reports ok")
	}
}

// TestGemmTuneKey: every part of the key changes it, and specs that
// normalize alike share it.
func TestGemmTuneKey(t *testing.T) {
	tu := &gemmTuner{gpu: "NVIDIA H200", cublasLt: 120803}
	base := GemmSpec{M: 32768, N: 4096, K: 1024, In: dtype.BF16}.normalized()
	k0 := tu.key(GemmWorkspace, false, base)
	const want = "NVIDIA H200|cublasLt 120803|workspace 33554432|deterministic false|NN 32768x4096x1024 ld 1024,4096,4096 batch 1 stride 0,0,0 bf16->bf16 tf32 false"
	if k0 != want {
		t.Errorf("key\n%s\nwant\n%s", k0, want)
	}
	if k := tu.key(GemmWorkspace, false, GemmSpec{M: 32768, N: 4096, K: 1024, LDA: 1024, In: dtype.BF16, Out: dtype.BF16}.normalized()); k != k0 {
		t.Errorf("explicit defaults give another key: %s", k)
	}
	seen := map[string]string{k0: "base"}
	add := func(name, k string) {
		if prev, dup := seen[k]; dup {
			t.Errorf("%s has the key of %s: %s", name, prev, k)
		}
		seen[k] = name
	}
	for name, s := range map[string]GemmSpec{
		"M": {M: 32767, N: 4096, K: 1024}, "N": {M: 32768, N: 4095, K: 1024}, "K": {M: 32768, N: 4096, K: 1023},
		"TransA": {M: 32768, N: 4096, K: 1024, TransA: true}, "TransB": {M: 32768, N: 4096, K: 1024, TransB: true},
		"LDA": {M: 32768, N: 4096, K: 1024, LDA: 2048}, "LDB": {M: 32768, N: 4096, K: 1024, LDB: 8192},
		"LDC": {M: 32768, N: 4096, K: 1024, LDC: 8192}, "Batch": {M: 32768, N: 4096, K: 1024, Batch: 2},
		"StrideA": {M: 32768, N: 4096, K: 1024, Batch: 2, StrideA: 1 << 26}, "Out": {M: 32768, N: 4096, K: 1024, Out: dtype.F32},
	} {
		if s.In == dtype.Invalid {
			s.In = dtype.BF16
		}
		add(name, tu.key(GemmWorkspace, false, s.normalized()))
	}
	add("In", tu.key(GemmWorkspace, false, GemmSpec{M: 32768, N: 4096, K: 1024, In: dtype.F16}.normalized()))
	add("TF32", tu.key(GemmWorkspace, false, GemmSpec{M: 32768, N: 4096, K: 1024, In: dtype.F32, TF32: true}.normalized()))
	add("workspace", tu.key(128<<20, false, base))
	add("deterministic", tu.key(GemmWorkspace, true, base))
	add("gpu", (&gemmTuner{gpu: "NVIDIA H100", cublasLt: 120803}).key(GemmWorkspace, false, base))
	add("cublasLt", (&gemmTuner{gpu: "NVIDIA H200", cublasLt: 120900}).key(GemmWorkspace, false, base))
}

// timesFor returns times where candidate fast is clearly the fastest.
func timesFor(n, fast int) []float64 {
	ts := make([]float64, n)
	for i := range ts {
		ts[i] = 1e-3 * (1 + 0.01*float64(i))
	}
	ts[fast] = 0.5e-3
	return ts
}

// TestGemmTunePersists: the first tuner times and saves; a second one on
// the same directory (the next process) takes the choice without timing;
// a choice whose algorithm the heuristic no longer offers is timed again.
func TestGemmTunePersists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kernels") // made by the first save
	algos := randomAlgos(t, 6)
	key := "gpu|spec A"
	t1 := newGemmTuner(dir, "gpu", 1)
	calls := 0
	got, err := t1.choose(key, "s", algos, func() ([]float64, error) { calls++; return timesFor(6, 4), nil })
	if err != nil || got != 4 || calls != 1 {
		t.Fatalf("first choose = %d, %v after %d timings; want 4 after 1", got, err, calls)
	}
	if got, _ := t1.choose(key, "s", algos, nil); got != 4 {
		t.Errorf("second choose in the same tuner = %d", got)
	}
	if s := t1.stats; s.Timed != 1 || s.Changed != 1 || s.Loaded != 1 {
		t.Errorf("stats %+v, want 1 timed (changed) and 1 loaded", s)
	}

	data, err := os.ReadFile(filepath.Join(dir, GemmTuneFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Format  int
		Choices map[string]struct {
			Algo  [8]uint64
			Index int
			Us    []float64
		}
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("file does not parse: %v\n%s", err, data)
	}
	c, ok := doc.Choices[key]
	if doc.Format != 1 || !ok || c.Algo != algos[4] || c.Index != 4 || len(c.Us) != 6 || c.Us[4] != 500 || c.Us[0] != 1000 {
		t.Errorf("file holds %+v, want format 1 and %q: candidate 4 of 6, 500 µs, the first 1000 µs", doc, key)
	}

	t2 := newGemmTuner(dir, "gpu", 1)
	got, err = t2.choose(key, "s", algos, func() ([]float64, error) {
		t.Error("timed although the file holds the choice")
		return timesFor(6, 0), nil
	})
	if err != nil || got != 4 || t2.stats.Loaded != 1 || t2.stats.Timed != 0 {
		t.Errorf("second process: choose = %d, %v, stats %+v; want 4 from the file", got, err, t2.stats)
	}
	// the heuristic now offers the algorithms in another order: found by its words
	reordered := [][8]uint64{algos[4], algos[0], algos[1]}
	if got, _ := newGemmTuner(dir, "gpu", 1).choose(key, "s", reordered, nil); got != 0 {
		t.Errorf("reordered candidates: choose = %d, want 0", got)
	}
	warn := testlog.Capture(t)
	t3 := newGemmTuner(dir, "gpu", 1)
	calls = 0
	got, err = t3.choose(key, "s", algos[:3], func() ([]float64, error) { calls++; return timesFor(3, 2), nil })
	if err != nil || got != 2 || calls != 1 || !strings.Contains(warn.String(), "not among") {
		t.Errorf("stale choice: choose = %d, %v after %d timings, log %q; want 2 after 1, with a warning", got, err, calls, warn)
	}
}

// TestGemmTuneMerges: tuners of two devices or processes saving different
// keys leave both in the file.
func TestGemmTuneMerges(t *testing.T) {
	dir := t.TempDir()
	algos := randomAlgos(t, 3)
	a, b := newGemmTuner(dir, "gpu", 1), newGemmTuner(dir, "gpu", 1) // both read the empty dir
	if _, err := a.choose("key a", "s", algos, func() ([]float64, error) { return timesFor(3, 1), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.choose("key b", "s", algos, func() ([]float64, error) { return timesFor(3, 2), nil }); err != nil {
		t.Fatal(err)
	}
	c := newGemmTuner(dir, "gpu", 1)
	if len(c.choices) != 2 || c.choices["key a"].Index != 1 || c.choices["key b"].Index != 2 {
		t.Errorf("merged file holds %+v, want key a -> 1 and key b -> 2", c.choices)
	}
}

// TestGemmTuneCorruptFile: a file that is not a valid tuning file is
// ignored with a warning naming it, the products are timed, and the next
// save replaces it with a valid file.
func TestGemmTuneCorruptFile(t *testing.T) {
	algos := randomAlgos(t, 4)
	valid := `{"format": 1, "choices": {"k": {"algo": [1,2,3,4,5,6,7,8], "index": 1, "us": [10, 5]}}}`
	for name, content := range map[string]string{
		"not json":        "\x00\x01garbage",
		"truncated":       valid[:len(valid)/2],
		"trailing":        valid + "}",
		"other format":    strings.Replace(valid, `"format": 1`, `"format": 2`, 1),
		"index too large": strings.Replace(valid, `"index": 1`, `"index": 2`, 1),
		"negative index":  strings.Replace(valid, `"index": 1`, `"index": -1`, 1),
		"untimed choice":  strings.Replace(valid, `[10, 5]`, `[10, -1]`, 1),
		"words not 8":     strings.Replace(valid, `[1,2,3,4,5,6,7,8]`, `"x"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, GemmTuneFile)
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			warn := testlog.Capture(t)
			tu := newGemmTuner(dir, "gpu", 1)
			if !strings.Contains(warn.String(), "ignoring the GEMM tuning file") || !strings.Contains(warn.String(), path) {
				t.Errorf("no warning naming %s: %q", path, warn)
			}
			calls := 0
			got, err := tu.choose("k", "s", algos, func() ([]float64, error) { calls++; return timesFor(4, 3), nil })
			if err != nil || got != 3 || calls != 1 {
				t.Errorf("choose = %d, %v after %d timings; want 3 after 1", got, err, calls)
			}
			if choices, err := readGemmChoices(path); err != nil || choices["k"].Index != 3 {
				t.Errorf("the save left %v, %v; want a valid file with k -> 3", choices, err)
			}
		})
	}
	t.Run("valid", func(t *testing.T) { // the sample above is itself valid
		if c, err := decodeGemmChoices([]byte(valid)); err != nil || c["k"].Algo != [8]uint64{1, 2, 3, 4, 5, 6, 7, 8} {
			t.Errorf("decode = %v, %v", c, err)
		}
	})
	t.Run("fifo", func(t *testing.T) { // refused without opening (an open would block)
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, GemmTuneFile), 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		warn := testlog.Capture(t)
		tu := newGemmTuner(dir, "gpu", 1)
		got, err := tu.choose("k", "s", algos, func() ([]float64, error) { return timesFor(4, 2), nil })
		if err != nil || got != 2 || !strings.Contains(warn.String(), "not a regular file") {
			t.Errorf("choose = %d, %v, log %q", got, err, warn)
		}
	})
	t.Run("unwritable", func(t *testing.T) { // a directory in the file's place: the save fails, the choice holds
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, GemmTuneFile), 0o755); err != nil {
			t.Fatal(err)
		}
		warn := testlog.Capture(t)
		tu := newGemmTuner(dir, "gpu", 1)
		got, err := tu.choose("k", "s", algos, func() ([]float64, error) { return timesFor(4, 1), nil })
		if err != nil || got != 1 || !strings.Contains(warn.String(), "could not save") {
			t.Errorf("choose = %d, %v, log %q", got, err, warn)
		}
		if got, _ := tu.choose("k", "s", algos, nil); got != 1 {
			t.Errorf("the choice did not hold in memory: %d", got)
		}
	})
}

// TestGemmTuneMemoryOnly: with no directory nothing is written and
// choices hold for the tuner's life.
func TestGemmTuneMemoryOnly(t *testing.T) {
	t.Chdir(t.TempDir())
	tu := newGemmTuner("", "gpu", 1)
	algos := randomAlgos(t, 2)
	if got, err := tu.choose("k", "s", algos, func() ([]float64, error) { return timesFor(2, 1), nil }); err != nil || got != 1 {
		t.Fatalf("choose = %d, %v", got, err)
	}
	if got, _ := tu.choose("k", "s", algos, nil); got != 1 {
		t.Errorf("second choose = %d", got)
	}
	if ents, _ := os.ReadDir("."); len(ents) != 0 {
		t.Errorf("memory-only tuner wrote %v", ents)
	}
}

// TestGemmScratchSize: cBytes spans the last element of C, checked against
// the largest offset a brute-force walk over C's elements reaches.
func TestGemmScratchSize(t *testing.T) {
	for _, s := range []GemmSpec{
		{M: 3, N: 5, K: 2, In: dtype.BF16},
		{M: 3, N: 5, K: 2, LDC: 9, In: dtype.BF16, Out: dtype.F32},
		{M: 4, N: 2, K: 7, Batch: 3, In: dtype.F16},
		{M: 4, N: 2, K: 7, Batch: 3, StrideC: 40, LDC: 6, In: dtype.F32},
	} {
		s = s.normalized()
		last := int64(0)
		for b := range s.Batch {
			for i := range s.M {
				for j := range s.N {
					last = max(last, int64(b)*s.StrideC+int64(i*s.LDC+j))
				}
			}
		}
		if got, want := s.cBytes(), (last+1)*int64(s.Out.Size()); got != want {
			t.Errorf("%+v: cBytes %d, want %d", s, got, want)
		}
	}
	// reps: a small product repeats up to the cap, a large one runs once
	if r := (GemmSpec{M: 64, N: 64, K: 64, Batch: 1}).tuneReps(); r != 50 {
		t.Errorf("tiny product: %d reps, want 50", r)
	}
	if r := (GemmSpec{M: 3533, N: 151936, K: 4096, Batch: 1}).tuneReps(); r != 1 {
		t.Errorf("LM head product: %d reps, want 1", r)
	}
	// 12288x4096x4096 is about 0.8 ms at 500 TFLOP/s: 3 make 2 ms
	if r := (GemmSpec{M: 12288, N: 4096, K: 4096, Batch: 1}).tuneReps(); r != 3 {
		t.Errorf("12288x4096x4096: %d reps, want 3", r)
	}
}

// TestGemmTuneSizesCap: a structure's first maxTunedSizes sizes are timed;
// the next ones keep the heuristic's first without timing, while another
// structure and sizes already chosen are not affected, and the structure
// key ignores exactly the sizes.
func TestGemmTuneSizesCap(t *testing.T) {
	algos := randomAlgos(t, 4)
	dir := t.TempDir()
	tu := newGemmTuner(dir, "gpu", 1)
	calls := 0
	timed := func() ([]float64, error) { calls++; return timesFor(4, 2), nil }
	for i := range maxTunedSizes + 3 {
		got, err := tu.choose(fmt.Sprintf("size %d", i), "s", algos, timed)
		want := 2
		if i >= maxTunedSizes {
			want = 0
		}
		if err != nil || got != want {
			t.Fatalf("size %d: choose = %d, %v; want %d", i, got, err, want)
		}
	}
	if calls != maxTunedSizes || tu.stats.Timed != maxTunedSizes || tu.stats.Untuned != 3 {
		t.Errorf("%d timings, stats %+v; want %d timed, 3 untuned", calls, tu.stats, maxTunedSizes)
	}
	if got, _ := tu.choose("size 0", "s", algos, nil); got != 2 {
		t.Errorf("a size timed before the cap: choose = %d, want its choice 2", got)
	}
	if got, _ := tu.choose("other", "s2", algos, timed); got != 2 || calls != maxTunedSizes+1 {
		t.Errorf("another structure: choose = %d after %d timings, want 2, timed", got, calls)
	}
	// The next process takes the stored sizes and times none of the rest.
	next := newGemmTuner(dir, "gpu", 1)
	for i := range maxTunedSizes + 3 {
		got, err := next.choose(fmt.Sprintf("size %d", i), "s", algos, timed)
		if want := map[bool]int{true: 2, false: 0}[i < maxTunedSizes]; err != nil || got != want {
			t.Fatalf("next process, size %d: choose = %d, %v; want %d", i, got, err, want)
		}
	}
	if s := next.stats; s.Timed != 0 || s.Loaded != maxTunedSizes || s.Untuned != 3 {
		t.Errorf("next process: stats %+v, want %d loaded, 3 untuned, none timed", s, maxTunedSizes)
	}
	a := GemmSpec{M: 100, N: 64, K: 32, LDA: 32, LDB: 64, LDC: 64, Batch: 1, In: dtype.BF16, Out: dtype.F32}
	b := a
	b.M, b.N, b.K, b.LDA, b.LDB, b.LDC = 7, 9, 11, 11, 9, 9
	c := a
	c.TransA = true
	if tu.structKey(1, false, a) != tu.structKey(1, false, b) || tu.structKey(1, false, a) == tu.structKey(1, false, c) ||
		tu.structKey(1, false, a) == tu.structKey(1, true, a) {
		t.Errorf("structKey: %q %q %q", tu.structKey(1, false, a), tu.structKey(1, false, b), tu.structKey(1, false, c))
	}
}

// TestGemmEstSeconds: a dot product is under gemmTuneMin and left untimed;
// a decode step's projection (bound by its weights' bytes) and a training
// GEMM (bound by its FLOPs) are over it, estimated as the two bounds say.
func TestGemmEstSeconds(t *testing.T) {
	dot := GemmSpec{M: 1, N: 1, K: 28240, Batch: 1, In: dtype.F32, Out: dtype.F32}
	decode := GemmSpec{M: 1, N: 4096, K: 4096, Batch: 1, In: dtype.BF16, Out: dtype.BF16}
	train := GemmSpec{M: 6144, N: 4096, K: 4096, Batch: 1, In: dtype.BF16, Out: dtype.BF16}
	if e := dot.estSeconds(); e >= gemmTuneMin {
		t.Errorf("dot product: %g s, want under %g", e, gemmTuneMin)
	}
	if e, want := decode.estSeconds(), (4096.0*4096+4096+4096)*2/4e12; e < gemmTuneMin || math.Abs(e-want) > 1e-12 {
		t.Errorf("decode projection: %g s, want %g", e, want)
	}
	if e, want := train.estSeconds(), 2*6144.0*4096*4096/500e12; math.Abs(e-want) > 1e-12 {
		t.Errorf("training GEMM: %g s, want %g", e, want)
	}
}
