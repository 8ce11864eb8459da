package flexcuda

import (
	"context"
	"fmt"
	"sync"
	"time"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/jit"
)

// compileOptions are the NVRTC options of every flex kernel.
var compileOptions = []string{"-std=c++17"}

// module is one generated source, compiled through the kernel cache once per
// target architecture.
type module struct {
	cache  *jit.Cache
	family string
	code   string
	params map[string]string
	wgmma  bool // uses sm_90a instructions: compiled for sm_90a, Hopper only

	mu     sync.Mutex
	byArch map[string]*jit.Kernel
}

func newModule(cache *jit.Cache, family, code string, params map[string]string) *module {
	return &module{cache: cache, family: family, code: code, params: params, byArch: map[string]*jit.Kernel{}}
}

// target returns the architecture m compiles for on a device of arch:
// modules with wgmma need Hopper's architecture-specific target sm_90a.
func (m *module) target(arch string) (string, error) {
	if !m.wgmma || arch == "sm_90a" {
		return arch, nil
	}
	if arch != "sm_90" {
		return "", fmt.Errorf("flexcuda: %s is the Hopper kernel (warpgroup MMA, sm_90a); this device is %s: choose the portable kernels (Config.Arch, or Config.Fwd/Bwd = flexcuda.Portable, or DFLASH_FLEX_FWD/DFLASH_FLEX_BWD=portable)", m.family, arch)
	}
	return "sm_90a", nil
}

// kernel returns the cache handle of m for arch (a target of m.target).
func (m *module) kernel(arch string) *jit.Kernel {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.byArch[arch]
	if k == nil {
		k = m.cache.Kernel(jit.Source{Family: m.family, Code: m.code, Options: compileOptions, Arch: arch, Params: m.params})
		m.byArch[arch] = k
	}
	return k
}

// image compiles m for a device of arch, or fetches it from the cache.
func (m *module) image(ctx context.Context, arch string) (*jit.Image, error) {
	t, err := m.target(arch)
	if err != nil {
		return nil, err
	}
	return m.kernel(t).Image(ctx)
}

// compile is image for an error that says what m is (dir: "forward",
// "backward").
func (m *module) compile(ctx context.Context, arch, dir string) error {
	if _, err := m.image(ctx, arch); err != nil {
		return fmt.Errorf("flexcuda: %s kernels: %w", dir, err)
	}
	return nil
}

// global returns the __device__ variable name of m on d as a buffer.
func (m *module) global(ctx context.Context, d *gpu.Device, name string) (gpu.Buffer, error) {
	img, err := m.image(ctx, d.Arch())
	if err != nil {
		return gpu.Buffer{}, err
	}
	mod, err := img.Module(d)
	if err != nil {
		return gpu.Buffer{}, fmt.Errorf("flexcuda: %s: %w", m.family, err)
	}
	p, size, err := cuda.ModuleGetGlobal(mod, name)
	if err != nil {
		return gpu.Buffer{}, fmt.Errorf("flexcuda: %s: %w", m.family, err)
	}
	return gpu.Buffer{Ptr: p, Size: size}, nil
}

// KernelInfo describes one loaded kernel: what the compiler made of it and
// where its image came from.
type KernelInfo struct {
	Name       string  `json:"name"`
	Family     string  `json:"family"`
	Registers  int     `json:"registers"`   // per thread
	LocalBytes int     `json:"local_bytes"` // per-thread local memory: stack and spills
	Threads    int     `json:"threads"`     // per block, as launched
	CompileMS  float64 `json:"compile_ms"`  // 0 when the image came from disk or memory
	FromDisk   bool    `json:"from_disk"`
}

// fn is a kernel loaded on one device.
type fn struct {
	f       cuda.Function
	info    KernelInfo
	smemSet int // dynamic shared memory the function is opted in to
	optin   int // the device's limit
}

// load returns kernel name of m on d, checking that a block of threads fits
// the register file (contract 4: the limit is named before any launch).
func (m *module) load(ctx context.Context, d *gpu.Device, name string, threads int) (*fn, error) {
	img, err := m.image(ctx, d.Arch())
	if err != nil {
		return nil, err
	}
	f, err := img.Function(d, name)
	if err != nil {
		return nil, fmt.Errorf("flexcuda: load %s: %w", name, err)
	}
	info := KernelInfo{Name: name, Family: m.family, Threads: threads, FromDisk: img.FromDisk,
		CompileMS: float64(img.CompileTime) / float64(time.Millisecond)}
	if info.Registers, err = cuda.FuncGetAttribute(f, cuda.FuncNumRegs); err != nil {
		return nil, fmt.Errorf("flexcuda: %s: %w", name, err)
	}
	if info.LocalBytes, err = cuda.FuncGetAttribute(f, cuda.FuncLocalSizeBytes); err != nil {
		return nil, fmt.Errorf("flexcuda: %s: %w", name, err)
	}
	maxThreads, err := cuda.FuncGetAttribute(f, cuda.FuncMaxThreadsPerBlock)
	if err != nil {
		return nil, fmt.Errorf("flexcuda: %s: %w", name, err)
	}
	r := Resources{Kernel: name, Threads: threads, MaxRegs: info.Registers}
	if err := r.Check(); err != nil {
		return nil, err
	}
	if threads > maxThreads {
		return nil, fmt.Errorf("flexcuda: %s needs %d threads per block, the compiled kernel allows %d with %d registers per thread (register limit)",
			name, threads, maxThreads, info.Registers)
	}
	return &fn{f: f, info: info, optin: d.Info().SharedPerBlockOptin}, nil
}

// ensureSmem checks bytes of dynamic shared memory against the device's
// limit and opts the function in to it when more than 48 KiB.
func (f *fn) ensureSmem(bytes int) error {
	r := Resources{Kernel: f.info.Name, SharedMem: bytes, Threads: f.info.Threads, SmemOptIn: f.optin}
	if err := r.Check(); err != nil {
		return err
	}
	if bytes > f.smemSet && bytes > 48*1024 {
		if err := cuda.FuncSetAttribute(f.f, cuda.FuncMaxDynamicSharedSize, bytes); err != nil {
			return fmt.Errorf("flexcuda: %s: opt in to %d bytes of shared memory: %w", f.info.Name, bytes, err)
		}
		f.smemSet = bytes
	}
	return nil
}

// launch queues f with the given grid and arguments on s.
func (f *fn) launch(d *gpu.Device, s *gpu.Stream, grid cuda.Dim3, smem int, args *cuda.Args) error {
	if err := d.Launch(f.f, grid, cuda.Dim(uint32(f.info.Threads), 1, 1), uint32(smem), s, args); err != nil {
		return fmt.Errorf("flexcuda: launch %s: %w", f.info.Name, err)
	}
	return nil
}

// launchSmem queues f with smem bytes of dynamic shared memory, checked
// and opted in to by ensureSmem.
func (f *fn) launchSmem(d *gpu.Device, s *gpu.Stream, grid cuda.Dim3, smem int, args *cuda.Args) error {
	if err := f.ensureSmem(smem); err != nil {
		return err
	}
	return f.launch(d, s, grid, smem, args)
}
