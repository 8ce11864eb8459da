package ncclcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"dflash/cuda"
	"dflash/jit"
)

// slowCompiler counts its compiles and takes long enough that requests
// released together overlap.
type slowCompiler struct{ n atomic.Int64 }

func (c *slowCompiler) Version() string { return "fake 1" }
func (c *slowCompiler) Compile(ctx context.Context, src jit.Source) ([]byte, string, error) {
	c.n.Add(1)
	time.Sleep(50 * time.Millisecond)
	return []byte("image for " + src.Arch), "", nil
}

// fakeLoader is a device context; each target has its own.
type fakeLoader struct {
	id    string
	loads atomic.Int64
	fail  bool
}

func (l *fakeLoader) LoaderID() string { return l.id }
func (l *fakeLoader) LoadModule(image []byte) (cuda.Module, error) {
	l.loads.Add(1)
	if l.fail {
		return 0, errors.New("fake load failure")
	}
	return cuda.Module(len(image)), nil
}
func (l *fakeLoader) ModuleFunction(m cuda.Module, name string) (cuda.Function, error) {
	return cuda.Function(uintptr(m) + uintptr(len(name))), nil
}
func (l *fakeLoader) UnloadModule(cuda.Module) error { return nil }

// fakeTarget runs each request on a goroutine of its own, like a worker.
type fakeTarget struct {
	name, arch string
	l          *fakeLoader
	used       atomic.Int64
}

func (t *fakeTarget) Name() string { return t.name }
func (t *fakeTarget) Arch() string { return t.arch }
func (t *fakeTarget) Run(fn func(jit.Loader) error) error {
	var err error
	var wg sync.WaitGroup
	wg.Go(func() { err = fn(t.l) })
	wg.Wait()
	return err
}

func TestKernelCache(t *testing.T) {
	cases := []struct {
		name     string
		archs    []string
		fail     int // target whose module load fails, -1 none
		compiles int64
	}{
		{"one GPU", []string{"sm_90"}, -1, 1},
		{"two GPUs", []string{"sm_90", "sm_90"}, -1, 1},
		{"eight GPUs", []string{"sm_90", "sm_90", "sm_90", "sm_90", "sm_90", "sm_90", "sm_90", "sm_90"}, -1, 1},
		{"two archs", []string{"sm_90", "sm_80", "sm_90"}, -1, 2},
		{"a load fails", []string{"sm_90", "sm_90"}, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			comp := &slowCompiler{}
			cache, err := jit.New(jit.Config{Compiler: comp})
			if err != nil {
				t.Fatal(err)
			}
			var targets []CacheTarget
			var fakes []*fakeTarget
			for i, a := range c.archs {
				ft := &fakeTarget{name: fmt.Sprintf("fake %d", i), arch: a, l: &fakeLoader{id: fmt.Sprintf("fake:%d", i), fail: i == c.fail}}
				fakes = append(fakes, ft)
				targets = append(targets, ft)
			}
			res, err := KernelCache(context.Background(), cache, jit.Source{Family: "t", Code: "k"}, "k", targets,
				func(l jit.Loader, f cuda.Function) error {
					for _, ft := range fakes {
						if ft.l == l {
							ft.used.Add(1)
						}
					}
					if f == 0 {
						return errors.New("no function")
					}
					return nil
				})
			if got := comp.n.Load(); got != c.compiles || res.Compiles != c.compiles {
				t.Errorf("compiler ran %d times, result says %d; want %d", got, res.Compiles, c.compiles)
			}
			if c.fail >= 0 {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("fake %d: ", c.fail)) || res.Pass {
					t.Fatalf("err = %v, pass %v; want an error naming fake %d", err, res.Pass, c.fail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !res.Pass || !res.Launched || res.ModuleLoads != int64(len(c.archs)) || res.Archs != len(uniq(c.archs)) {
				t.Errorf("result %+v", res)
			}
			for _, ft := range fakes {
				if ft.l.loads.Load() != 1 || ft.used.Load() != 1 {
					t.Errorf("%s: %d module loads, used %d times; want 1 and 1", ft.name, ft.l.loads.Load(), ft.used.Load())
				}
			}
		})
	}
}

func uniq(s []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return m
}
