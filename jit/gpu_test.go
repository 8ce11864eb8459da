package jit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/internal/checkreport"
)

// GPU tests of the cache: they skip without a GPU or NVRTC.

func attnSource(arch string) Source {
	return Source{Family: "attn_ref", Code: attnFwdF32, Arch: arch,
		Params: map[string]string{"dtype": "f32", "block_m": "64", "tile_n": "32"}}
}

// attnCheck runs attn_fwd_f32_d64 on random data (causal and not) and
// compares with a float64 CPU attention; it returns the largest error.
func attnCheck(d *gpu.Device, img *Image, seed uint64) (float64, error) {
	const bh, s, dim = 3, 150, 64
	fn, err := img.Function(d, "attn_fwd_f32_d64")
	if err != nil {
		return 0, err
	}
	rng := rand.New(rand.NewPCG(seed, 17))
	q, k, v := make([]float32, bh*s*dim), make([]float32, bh*s*dim), make([]float32, bh*s*dim)
	for i := range q {
		q[i], k[i], v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	bufs := make([]gpu.Buffer, 4)
	for i := range bufs {
		if bufs[i], err = d.Alloc(4 * bh * s * dim); err != nil {
			return 0, err
		}
		defer d.Free(bufs[i])
	}
	for i, x := range [][]float32{q, k, v} {
		if err := gpu.Upload(d, bufs[i], x); err != nil {
			return 0, err
		}
	}
	scale := 1 / math.Sqrt(dim)
	worst := 0.0
	for _, causal := range []int32{0, 1} {
		args := cuda.NewArgs().Ptr(bufs[0].Ptr).Ptr(bufs[1].Ptr).Ptr(bufs[2].Ptr).Ptr(bufs[3].Ptr).I32(s).I32(s).F32(float32(scale)).I32(causal)
		if err := d.Launch(fn, cuda.Dim((s+63)/64, bh, 1), cuda.Dim(64, 1, 1), 0, nil, args); err != nil {
			return 0, err
		}
		got := make([]float32, bh*s*dim)
		if err := gpu.Download(d, got, bufs[3]); err != nil {
			return 0, err
		}
		for b := 0; b < bh; b++ {
			for i := 0; i < s; i++ {
				n := s
				if causal == 1 {
					n = i + 1
				}
				p := make([]float64, n)
				m := math.Inf(-1)
				for j := 0; j < n; j++ {
					for c := 0; c < dim; c++ {
						p[j] += float64(q[(b*s+i)*dim+c]) * float64(k[(b*s+j)*dim+c])
					}
					p[j] *= scale
					m = math.Max(m, p[j])
				}
				sum := 0.0
				for j := range p {
					p[j] = math.Exp(p[j] - m)
					sum += p[j]
				}
				for c := 0; c < dim; c++ {
					o := 0.0
					for j := range p {
						o += p[j] / sum * float64(v[(b*s+j)*dim+c])
					}
					worst = math.Max(worst, math.Abs(float64(got[(b*s+i)*dim+c])-o))
				}
			}
		}
	}
	return worst, nil
}

// gpuChildResult is what the second process reports.
type gpuChildResult struct {
	Stats  Stats
	GetMS  float64 // Get from disk: read, verify, keep in memory
	FuncMS float64 // first Function: module load
	MaxErr float64
	Error  string
}

// runGPUChild is the second process of TestGPUCacheAcrossProcesses.
func runGPUChild() int {
	var r gpuChildResult
	defer func() { json.NewEncoder(os.Stdout).Encode(r) }()
	w, err := gpu.Open(0)
	if err != nil {
		r.Error = err.Error()
		return 0
	}
	n, err := NewNVRTC()
	if err != nil {
		r.Error = err.Error()
		return 0
	}
	c, err := New(Config{Compiler: n, Dir: os.Getenv("DFLASH_JIT_DIR")})
	if err != nil {
		r.Error = err.Error()
		return 0
	}
	t0 := time.Now()
	img, err := c.Get(context.Background(), attnSource(w.Info().Arch()))
	r.GetMS = ms(time.Since(t0))
	if err != nil {
		r.Error = err.Error()
		return 0
	}
	err = w.Run(func(d *gpu.Device) error {
		t0 := time.Now()
		if _, err := img.Function(d, "attn_fwd_f32_d64"); err != nil {
			return err
		}
		r.FuncMS = ms(time.Since(t0))
		r.MaxErr, err = attnCheck(d, img, 5)
		return err
	})
	if err != nil {
		r.Error = err.Error()
	}
	r.Stats = c.Stats()
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// TestGPUCacheAcrossProcesses: a cold compile of the representative kernel
// (NVRTC), a launch checked against float64, then a second process on the
// same directory that compiles nothing and loads from disk; and the cost of
// a cache hit (Get + Function) on the worker.
func TestGPUCacheAcrossProcesses(t *testing.T) {
	w, err := gpu.Open(0)
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	defer w.Close()
	n, err := NewNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	dir := t.TempDir()
	c, _ := newCache(t, n, dir)
	src := attnSource(w.Info().Arch())
	t0 := time.Now()
	img, err := c.Get(context.Background(), src)
	coldMS := ms(time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	var worst, hitNS, handleNS, launchNS float64
	err = w.Run(func(d *gpu.Device) error {
		var err error
		if worst, err = attnCheck(d, img, 3); err != nil {
			return err
		}
		// cache-hit overhead: what a launch site pays to find its kernel
		ctx := context.Background()
		const iters = 200_000
		t0 := time.Now()
		for i := 0; i < iters; i++ {
			im, err := c.Get(ctx, src)
			if err != nil {
				return err
			}
			if _, err := im.Function(d, "attn_fwd_f32_d64"); err != nil {
				return err
			}
		}
		hitNS = float64(time.Since(t0).Nanoseconds()) / iters
		k := c.Kernel(src)
		t0 = time.Now()
		for i := 0; i < iters; i++ {
			if _, err := k.Function(ctx, d, "attn_fwd_f32_d64"); err != nil {
				return err
			}
		}
		handleNS = float64(time.Since(t0).Nanoseconds()) / iters
		// for scale: one launch of a kernel with no work left to do
		fn, err := img.Function(d, "attn_fwd_f32_d64")
		if err != nil {
			return err
		}
		args := cuda.NewArgs().Ptr(0).Ptr(0).Ptr(0).Ptr(0).I32(0).I32(0).F32(1).I32(0)
		const launches = 20_000
		t0 = time.Now()
		for i := 0; i < launches; i++ {
			if err := d.Launch(fn, cuda.Dim(1, 1, 1), cuda.Dim(64, 1, 1), 0, nil, args); err != nil {
				return err
			}
		}
		launchNS = float64(time.Since(t0).Nanoseconds()) / launches
		return d.Synchronize()
	})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	moduleMS := ms(st.ModuleLoadTime)
	if worst > 2e-4 {
		t.Errorf("attention max error %.2e", worst)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DFLASH_JIT_GPU_CHILD=1", "DFLASH_JIT_DIR="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("second process: %v", err)
	}
	var child gpuChildResult
	if err := json.Unmarshal(out.Bytes(), &child); err != nil {
		t.Fatalf("second process output %q: %v", out.String(), err)
	}
	childOK := child.Error == "" && child.Stats.Compiles == 0 && child.Stats.DiskHits == 1 && child.MaxErr <= 2e-4
	if !childOK {
		t.Errorf("second process: %+v", child)
	}
	report(t, "NVRTC cold compile + launch of attn_fwd_f32 vs float64", worst <= 2e-4 && st.Compiles == 1,
		fmt.Sprintf("%d-byte CUBIN, max abs error %.1e", len(img.Data), worst),
		map[string]float64{"cold_compile_ms": coldMS, "nvrtc_ms": ms(img.CompileTime), "module_load_ms": moduleMS, "max_err": worst})
	report(t, "second process finds the kernel on disk -> 0 compiles", childOK,
		fmt.Sprintf("compiles %d, disk hits %d, max abs error %.1e %s", child.Stats.Compiles, child.Stats.DiskHits, child.MaxErr, child.Error),
		map[string]float64{"warm_disk_get_ms": child.GetMS, "warm_module_load_ms": child.FuncMS,
			"warm_total_ms": child.GetMS + child.FuncMS, "compiles": float64(child.Stats.Compiles)})
	report(t, "cache-hit overhead per launch (memory tier + per-device function)", hitNS > 0 && handleNS < 1000,
		fmt.Sprintf("%.0f ns per Kernel-handle Function, %.0f ns per Get(source)+Function (hashes the %d-byte source); a launch of an empty kernel costs %.0f ns",
			handleNS, hitNS, len(src.Code), launchNS),
		map[string]float64{"handle_hit_ns": handleNS, "get_hit_ns": hitNS, "launch_ns": launchNS})
}

// report records one check result (see package checkreport).
func report(t *testing.T, check string, pass bool, detail string, metrics map[string]float64) {
	t.Helper()
	checkreport.Write(t, "jit", check, pass, detail, metrics)
}
