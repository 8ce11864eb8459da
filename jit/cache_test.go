package jit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"dflash/internal/testlog"
	"dflash/internal/testseed"
)

func newCache(t *testing.T, comp Compiler, dir string) (*Cache, *testlog.Buffer) {
	t.Helper()
	lb := &testlog.Buffer{}
	c, err := New(Config{Compiler: comp, Dir: dir, Logger: lb.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	return c, lb
}

// getAll asks for s from n goroutines released at the same moment.
func getAll(t *testing.T, c *Cache, s Source, n int) ([]*Image, []error) {
	t.Helper()
	imgs, errs := make([]*Image, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			imgs[i], errs[i] = c.Get(context.Background(), s)
		}()
	}
	close(start)
	wg.Wait()
	return imgs, errs
}

func TestGet64GoroutinesOneKeyCompilesOnce(t *testing.T) {
	for _, disk := range []bool{false, true} {
		t.Run(fmt.Sprintf("disk=%v", disk), func(t *testing.T) {
			dir := ""
			if disk {
				dir = t.TempDir()
			}
			fc := newFake(20 * time.Millisecond)
			c, _ := newCache(t, fc, dir)
			s := src("fam", 7)
			imgs, errs := getAll(t, c, s, 64)
			for i := range imgs {
				if errs[i] != nil {
					t.Fatalf("goroutine %d: %v", i, errs[i])
				}
				if imgs[i] != imgs[0] {
					t.Fatalf("goroutine %d got a different *Image", i)
				}
			}
			if !bytes.Equal(imgs[0].Data, fakeImage(s, fc.size)) {
				t.Fatal("image differs from the compiler's output")
			}
			st := c.Stats()
			if fc.calls.Load() != 1 || st.Compiles != 1 || st.MemoryHits != 63 {
				t.Errorf("compiler calls %d, stats %+v; want 1 compile and 63 memory hits", fc.calls.Load(), st)
			}
			if disk && st.DiskWrites != 1 {
				t.Errorf("DiskWrites = %d, want 1", st.DiskWrites)
			}
		})
	}
}

func TestGetManyKeysAtOnce(t *testing.T) {
	rng := testseed.New(t)
	const keys, perKey = 40, 8
	fc := newFake(2 * time.Millisecond)
	c, _ := newCache(t, fc, t.TempDir())
	order := make([]int, 0, keys*perKey)
	for k := 0; k < keys; k++ {
		for j := 0; j < perKey; j++ {
			order = append(order, k)
		}
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var wg sync.WaitGroup
	errc := make(chan error, len(order))
	for _, k := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := src("many", k)
			img, err := c.Get(context.Background(), s)
			if err == nil && !bytes.Equal(img.Data, fakeImage(s, fc.size)) {
				err = fmt.Errorf("key %d: wrong image", k)
			}
			if err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	st := c.Stats()
	if st.Compiles != keys || st.MemoryHits != keys*(perKey-1) || st.Kernels != keys || st.Families["many"] != keys {
		t.Errorf("stats %+v, want %d compiles, %d memory hits", st, keys, keys*(perKey-1))
	}
	for code, n := range fc.perCode {
		if n != 1 {
			t.Errorf("compiled %q %d times", code, n)
		}
	}
}

func TestCompileErrorIsCachedWithLogAndExcerpt(t *testing.T) {
	fc := newFake(10 * time.Millisecond)
	c, _ := newCache(t, fc, t.TempDir())
	s := Source{Family: "broken", Arch: "sm_90", Code: strings.Join([]string{
		"// line 1", "// line 2", "// line 3", "// line 4", "extern \"C\" __global__ void k() {",
		"#error leaked size 4096", "}", "// line 8", "// line 9", "// line 10"}, "\n")}
	imgs, errs := getAll(t, c, s, 64)
	var first *CompileError
	for i, err := range errs {
		if imgs[i] != nil {
			t.Fatal("broken source produced an image")
		}
		var ce *CompileError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCompile) {
			t.Fatalf("err = %v, want *CompileError", err)
		}
		if first == nil {
			first = ce
		} else if ce != first {
			t.Fatal("goroutines got different error values")
		}
	}
	if fc.calls.Load() != 1 {
		t.Fatalf("compiler ran %d times for one broken key", fc.calls.Load())
	}
	msg := first.Error()
	for _, want := range []string{"broken.cu(6): error", "NVRTC_ERROR_COMPILATION", "source around line 6 of broken.cu",
		"  3 | // line 3", "> 6 | #error leaked size 4096", "  9 | // line 9"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "line 2\n") || strings.Contains(msg, "10 |") {
		t.Errorf("excerpt wider than 3 lines around the error:\n%s", msg)
	}
	if _, err := c.Get(context.Background(), s); err != first {
		t.Errorf("later Get: %v", err)
	}
	st := c.Stats()
	if st.Compiles != 1 || st.CompileErrors != 1 || st.ErrorHits != 64 || st.DiskWrites != 0 {
		t.Errorf("stats %+v", st)
	}
	if ents, _ := List(c.Dir()); len(ents) != 0 {
		t.Errorf("a failed compile left %d files on disk", len(ents))
	}
}

func TestWaiterContextEndsWaitNotCompile(t *testing.T) {
	fc := newFake(300 * time.Millisecond)
	c, _ := newCache(t, fc, "")
	s := src("slow", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, s); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with a short deadline: %v", err)
	}
	img, err := c.Get(context.Background(), s)
	if err != nil || !bytes.Equal(img.Data, fakeImage(s, fc.size)) {
		t.Fatalf("Get after the deadline: %v", err)
	}
	if fc.calls.Load() != 1 {
		t.Errorf("compiled %d times", fc.calls.Load())
	}
}

func TestArchRequired(t *testing.T) {
	c, _ := newCache(t, newFake(0), "")
	if _, err := c.Get(context.Background(), Source{Family: "f", Code: "x"}); err == nil || !strings.Contains(err.Error(), "Arch") {
		t.Errorf("Get without Arch: %v", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without a compiler succeeded")
	}
}

func TestKeyParts(t *testing.T) {
	base := Source{Family: "f", Name: "a.cu", Code: "code", Options: []string{"-DA=1", "-DB=2"}, Arch: "sm_90",
		Params: map[string]string{"d": "128"}}
	k0 := KeyOf(base, "nvrtc 13.0")
	// Pinned (computed independently with Python's hashlib over the documented
	// encoding): a change of the encoding must come with a FormatVersion bump.
	if got, want := k0.String(), goldenKey; got != want {
		t.Errorf("KeyOf(base) = %s, want %s (bump FormatVersion if the encoding changed on purpose)", got, want)
	}
	change := map[string]func(s *Source) string{
		"code":          func(s *Source) string { s.Code += " "; return "" },
		"option value":  func(s *Source) string { s.Options = []string{"-DA=1", "-DB=3"}; return "" },
		"option order":  func(s *Source) string { s.Options = []string{"-DB=2", "-DA=1"}; return "" },
		"option split":  func(s *Source) string { s.Options = []string{"-DA=1-DB=2"}; return "" },
		"arch":          func(s *Source) string { s.Arch = "sm_90a"; return "" },
		"compiler":      func(s *Source) string { return "nvrtc 13.1" },
		"code/arch mix": func(s *Source) string { s.Code, s.Arch = "codes", "m_90"; return "" },
	}
	for name, f := range change {
		s := base
		v := "nvrtc 13.0"
		if nv := f(&s); nv != "" {
			v = nv
		}
		if KeyOf(s, v) == k0 {
			t.Errorf("changing %s kept the key", name)
		}
	}
	same := base
	same.Family, same.Name, same.Params = "g", "b.cu", map[string]string{"d": "64"}
	if KeyOf(same, "nvrtc 13.0") != k0 {
		t.Error("Family, Name or Params changed the key")
	}
}

const goldenKey = "5f48b258816703d8f31d9456157d4582d9339b4cbbdcaa0ab39c6670b55592cd"

func TestBudgetWarnsOnceNamingDifferingParts(t *testing.T) {
	var warnings []BudgetWarning
	var mu sync.Mutex
	lb := &testlog.Buffer{}
	c, err := New(Config{Compiler: newFake(0), Budget: 3, Logger: lb.Logger(), OnBudget: func(w BudgetWarning) {
		mu.Lock()
		warnings = append(warnings, w)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, seq := range []int{1024, 2048, 3072, 4096, 5120, 6144} {
		s := Source{Family: "flex_fwd", Arch: "sm_90", Code: fmt.Sprintf("const int S = %d;", seq),
			Options: []string{"-std=c++17", fmt.Sprintf("-DSEQ=%d", seq)},
			Params:  map[string]string{"head_dim": "128", "seq_len": fmt.Sprint(seq)}}
		if _, err := c.Get(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, s); err != nil { // a hit adds no key
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if _, err := c.Get(ctx, src("small", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(warnings) != 1 {
		t.Fatalf("%d warnings, want 1: %+v", len(warnings), warnings)
	}
	w := warnings[0]
	if w.Family != "flex_fwd" || w.Kernels != 4 || w.Budget != 3 {
		t.Errorf("warning %+v", w)
	}
	got := strings.Join(w.Differ, "\n")
	for _, want := range []string{"params.seq_len: 1024, 2048, 3072, 4096", "options (not in every kernel): -DSEQ=1024, -DSEQ=2048",
		"code: 4 different sources"} {
		if !strings.Contains(got, want) {
			t.Errorf("differing parts lack %q:\n%s", want, got)
		}
	}
	for _, notWant := range []string{"head_dim", "-std=c++17", "arch"} {
		if strings.Contains(got, notWant) {
			t.Errorf("differing parts name %q, which is the same everywhere:\n%s", notWant, got)
		}
	}
	if n := strings.Count(lb.String(), "over its specialisation budget"); n != 1 {
		t.Errorf("logged %d budget warnings, want 1:\n%s", n, lb.String())
	}
	if st := c.Stats(); st.Families["flex_fwd"] != 6 || st.Families["small"] != 3 {
		t.Errorf("families %v", st.Families)
	}
}

func TestFunctionLoadsOncePerLoader(t *testing.T) {
	c, _ := newCache(t, newFake(0), "")
	img, err := c.Get(context.Background(), src("fn", 1))
	if err != nil {
		t.Fatal(err)
	}
	loaders := []*fakeLoader{{id: "cuda:0#1"}, {id: "cuda:1#1"}, {id: "cuda:2#1"}}
	type res struct {
		loader int
		name   string
		f      uintptr
	}
	out := make(chan res, 300)
	var wg sync.WaitGroup
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			li, name := i%3, []string{"a", "bb"}[i%2]
			f, err := img.Function(loaders[li], name)
			if err != nil {
				t.Error(err)
				return
			}
			out <- res{li, name, uintptr(f)}
		}()
	}
	wg.Wait()
	close(out)
	seen := map[[2]string]uintptr{}
	for r := range out {
		k := [2]string{loaders[r.loader].id, r.name}
		if prev, ok := seen[k]; ok && prev != r.f {
			t.Errorf("%v: handles %d and %d", k, prev, r.f)
		}
		seen[k] = r.f
	}
	if len(seen) != 6 {
		t.Errorf("%d distinct (loader, name) pairs, want 6", len(seen))
	}
	for _, l := range loaders {
		if l.loads.Load() != 1 || l.lookups.Load() != 2 {
			t.Errorf("%s: %d loads, %d lookups; want 1 and 2", l.id, l.loads.Load(), l.lookups.Load())
		}
	}
	st := c.Stats()
	if st.ModuleLoads != 3 || st.FunctionHits != 300-6 {
		t.Errorf("stats %+v", st)
	}
	if err := img.Unload(loaders[0]); err != nil || loaders[0].unloads.Load() != 1 {
		t.Fatalf("Unload: %v, %d unloads", err, loaders[0].unloads.Load())
	}
	if _, err := img.Function(loaders[0], "a"); err != nil || loaders[0].loads.Load() != 2 {
		t.Errorf("after Unload: %v, %d loads", err, loaders[0].loads.Load())
	}
	c.Forget(loaders[1].id)
	if _, err := img.Function(loaders[1], "a"); err != nil || loaders[1].loads.Load() != 2 {
		t.Errorf("after Forget: %v, %d loads", err, loaders[1].loads.Load())
	}
	bad := &fakeLoader{id: "bad", failLoads: true}
	for i := 0; i < 3; i++ {
		if _, err := img.Function(bad, "a"); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_IMAGE") {
			t.Errorf("failing load: %v", err)
		}
	}
	if bad.loads.Load() != 1 {
		t.Errorf("a failed load was retried %d times", bad.loads.Load())
	}
}

func TestKernelHandle(t *testing.T) {
	fc := newFake(10 * time.Millisecond)
	c, _ := newCache(t, fc, t.TempDir())
	k := c.Kernel(src("handle", 1))
	l := &fakeLoader{id: "cuda:0#1"}
	var wg sync.WaitGroup
	fns := make([]uintptr, 64)
	for i := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := k.Function(context.Background(), l, "k1")
			if err != nil {
				t.Error(err)
			}
			fns[i] = uintptr(f)
		}()
	}
	wg.Wait()
	for i := range fns {
		if fns[i] != fns[0] || fns[0] == 0 {
			t.Fatalf("handle %d = %d, want %d", i, fns[i], fns[0])
		}
	}
	if fc.calls.Load() != 1 || l.loads.Load() != 1 || l.lookups.Load() != 1 {
		t.Errorf("%d compiles, %d loads, %d lookups; want 1 each", fc.calls.Load(), l.loads.Load(), l.lookups.Load())
	}
	// the handle and Get share one entry
	img, err := c.Get(context.Background(), k.Source())
	if err != nil {
		t.Fatal(err)
	}
	if viaHandle, _ := k.Image(context.Background()); viaHandle != img {
		t.Error("handle and Get returned different images")
	}
	if st := c.Stats(); st.MemoryHits != 65 || st.Compiles != 1 { // 63 waiters, then Get and Image
		t.Errorf("stats %+v", st)
	}
	bad := c.Kernel(Source{Family: "bad", Arch: "sm_90", Code: "#error x"})
	for i := 0; i < 3; i++ {
		if _, err := bad.Function(context.Background(), l, "k"); !errors.Is(err, ErrCompile) {
			t.Errorf("bad handle: %v", err)
		}
	}
	if fc.calls.Load() != 2 {
		t.Errorf("broken handle compiled %d times", fc.calls.Load()-1)
	}
}
