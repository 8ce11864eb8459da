package tensorcuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/switches"
	"dflash/jit"
	"dflash/kernels"
)

// Ops launches the op kernels of one storage dtype on one device.
type Ops struct {
	dt   dtype.DType
	sms  int // multiprocessors: grids of grid-stride kernels are sized from it
	run  runner
	call call // reused by every launch (Ops is single-threaded)
	// fp8Fast: LinearFP8's products accumulate fast (DFLASH_FP8_FAST_ACCUM, on by default).
	fp8Fast bool
}

// runner queues one kernel or one cuBLASLt product; the device's runner
// compiles and loads on first use, the CPU tests' fake records the launch.
type runner interface {
	launch(k *kernel, grid, block cuda.Dim3, args *cuda.Args) error
	gemm(spec gpu.GemmSpec, alpha float32, a, b gpu.Buffer, beta float32, c, d gpu.Buffer) error
	gemmFP8(spec gpu.GemmSpec, alpha float32, a, sa, b, sb gpu.Buffer, beta float32, c, d gpu.Buffer) error
}

// New returns the ops of storage dtype dt (dtype.BF16 or dtype.F32) on d,
// compiling through cache on first use of each kernel file (Warm compiles
// all of them at once).
func New(cache *jit.Cache, d *gpu.Device, dt dtype.DType) (*Ops, error) {
	if dt != dtype.BF16 && dt != dtype.F32 {
		return nil, fmt.Errorf("tensorcuda: storage dtype %v is not supported (bf16 or f32)", dt)
	}
	fast, err := switches.FP8FastAccum.Value()
	if err != nil {
		return nil, fmt.Errorf("tensorcuda: %w", err)
	}
	r := &devRunner{cache: cache, d: d, arch: d.Arch(), dt: dt, mods: map[string]*jit.Kernel{}, fns: map[*kernel]cuda.Function{}}
	return &Ops{dt: dt, sms: d.Info().SMs, run: r, fp8Fast: fast}, nil
}

// Warm compiles (or fetches from the cache) and loads every kernel; after
// compile (Backend.Compile) it only loads.
func (o *Ops) Warm(ctx context.Context) error {
	r, ok := o.run.(*devRunner)
	if !ok {
		return nil
	}
	for _, k := range allKernels {
		if _, err := r.function(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// Source returns the CUDA source of kernel file (e.g. "op_xent.cu") as it is
// compiled: kernels/op_common.cuh spliced in place of its #include line.
// The storage dtype comes from the -DOP_BF16 option (compileOptions).
func Source(file string) string {
	src := kernels.Source(file)
	const inc = `#include "op_common.cuh"`
	if !strings.Contains(src, inc) {
		panic(fmt.Sprintf("tensorcuda: kernels/%s does not include op_common.cuh", file))
	}
	return strings.Replace(src, inc, kernels.Source("op_common.cuh"), 1)
}

// compileOptions are the NVRTC options of the kernels of storage dtype dt:
// the storage (OP_BF16) and the block shapes that the launchers choose and
// the kernels size arrays by (blockShapes), as -D defines. The kernels
// #error without them rather than keep a second copy of a value.
func compileOptions(dt dtype.DType) []string {
	opts := []string{"-std=c++17", fmt.Sprintf("-DOP_BF16=%d", b2i(dt == dtype.BF16))}
	for _, d := range blockShapes {
		opts = append(opts, fmt.Sprintf("-D%s=%d", d.name, d.value))
	}
	return opts
}

// blockShapes are the op kernels' compile-time block shapes, each the Go
// constant its launcher uses.
var blockShapes = []struct {
	name  string
	value int
}{
	{"OP_DW_THREADS", threads},          // op_rmsnorm_bwd_dw, op_norm_rope_bwd_dw: the most threads of their vector paths
	{"OP_NORM_VECS", normVecs},          // op_rmsnorm_bwd: 16-byte vectors of a row per thread
	{"OP_ROW_VECS", rowVecs},            // the one-pass E4M3 producers: 16-byte vectors of a row per thread
	{"OP_COLSUM_COLS", colSumCols},      // op_colsum: columns per block
	{"OP_COLSUM_LANES", colSumLanes},    // op_colsum: lanes per column
	{"OP_DEC_ROWS", decRows},            // op_decode_attn: query rows per block
	{"OP_DEC_WARPS", decWarps},          // op_decode_attn: warps per block
	{"OP_DEC_MAX_D", decMaxD},           // op_decode_attn: the largest head dimension
	{"OP_DEC_MAX_SPLITS", decMaxSplits}, // op_decode_combine: the most splits
	{"OP_SK_MAX_WARPS", skMaxWarps},     // op_skinny_gemm: the most warps of a block
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// devRunner compiles each kernel file once per device architecture through
// the kernel cache and launches on the device's default stream.
type devRunner struct {
	cache *jit.Cache
	d     *gpu.Device
	arch  string // d's
	dt    dtype.DType
	mods  map[string]*jit.Kernel // by file
	fns   map[*kernel]cuda.Function
}

// source is the kernel cache's source of kernel file (e.g. "op_xent.cu")
// for the runner's dtype and architecture.
func (r *devRunner) source(file string) jit.Source {
	return jit.Source{Family: strings.TrimSuffix(file, ".cu"), Code: Source(file), Options: compileOptions(r.dt),
		Arch: r.arch, Params: map[string]string{"dtype": r.dt.String()}}
}

// compile compiles every kernel file through the cache, or finds it there,
// a goroutine each, loading nothing: it touches no state of the runner, so
// that it may run on any goroutine while the worker launches. Errors name
// the file and the dtype.
func (r *devRunner) compile(ctx context.Context) error {
	files := kernelFiles()
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() {
			if _, err := r.cache.Get(ctx, r.source(f)); err != nil {
				errs[i] = fmt.Errorf("tensorcuda: %s (%s): %w", f, r.dt, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *devRunner) function(ctx context.Context, k *kernel) (cuda.Function, error) {
	if f, ok := r.fns[k]; ok {
		return f, nil
	}
	m := r.mods[k.file]
	if m == nil {
		m = r.cache.Kernel(r.source(k.file))
		r.mods[k.file] = m
	}
	f, err := m.Function(ctx, r.d, k.name)
	if err != nil {
		return 0, fmt.Errorf("tensorcuda: %s (%s): %w", k.name, r.dt, err)
	}
	r.fns[k] = f
	return f, nil
}

func (r *devRunner) launch(k *kernel, grid, block cuda.Dim3, args *cuda.Args) error {
	f, err := r.function(context.Background(), k)
	if err != nil {
		return err
	}
	if err := r.d.Launch(f, grid, block, 0, nil, args); err != nil {
		return fmt.Errorf("tensorcuda: launch %s (%s): %w", k.name, r.dt, err)
	}
	return nil
}

func (r *devRunner) gemm(spec gpu.GemmSpec, alpha float32, a, b gpu.Buffer, beta float32, c, d gpu.Buffer) error {
	if err := r.d.GemmTo(nil, spec, alpha, a.Ptr, b.Ptr, beta, c.Ptr, d.Ptr); err != nil {
		return fmt.Errorf("tensorcuda: gemm %dx%dx%d (%s): %w", spec.M, spec.N, spec.K, r.dt, err)
	}
	return nil
}

func (r *devRunner) gemmFP8(spec gpu.GemmSpec, alpha float32, a, sa, b, sb gpu.Buffer, beta float32, c, d gpu.Buffer) error {
	if err := r.d.GemmFP8(nil, spec, alpha, a.Ptr, sa.Ptr, b.Ptr, sb.Ptr, beta, c.Ptr, d.Ptr); err != nil {
		return fmt.Errorf("tensorcuda: FP8 gemm %dx%dx%d (%s): %w", spec.M, spec.N, spec.K, r.dt, err)
	}
	return nil
}

// call builds one launch's arguments, checking each against the kernel's
// declared parameter list: a launcher that passes them in another order,
// of another kind or in another number panics.
type call struct {
	k    *kernel
	n    int
	args cuda.Args
}

func (o *Ops) begin(k *kernel) *call {
	o.call.k, o.call.n = k, 0
	o.call.args.Reset()
	return &o.call
}

func (c *call) next(name string, kd kind) {
	if c.n >= len(c.k.params) {
		panic(fmt.Sprintf("tensorcuda: %s: argument %q beyond its %d parameters", c.k.name, name, len(c.k.params)))
	}
	if p := c.k.params[c.n]; p.name != name || p.kind != kd {
		panic(fmt.Sprintf("tensorcuda: %s: argument %d is %s %s, the kernel declares %s %s", c.k.name, c.n, name, kd, p.name, p.kind))
	}
	c.n++
}

func (c *call) ptr(name string, b gpu.Buffer) *call { c.next(name, kPtr); c.args.Ptr(b.Ptr); return c }

func (c *call) i32(name string, v int) *call {
	c.next(name, kI32)
	if v < math.MinInt32 || v > math.MaxInt32 {
		panic(fmt.Sprintf("tensorcuda: %s: %s = %d does not fit an int", c.k.name, name, v))
	}
	c.args.I32(int32(v))
	return c
}

func (c *call) flag(name string, b bool) *call {
	if b {
		return c.i32(name, 1)
	}
	return c.i32(name, 0)
}

func (c *call) i64(name string, v int64) *call   { c.next(name, kI64); c.args.I64(v); return c }
func (c *call) f32(name string, v float32) *call { c.next(name, kF32); c.args.F32(v); return c }
func (c *call) f64(name string, v float64) *call { c.next(name, kF64); c.args.F64(v); return c }

// launch queues the call with the given grid and threads per block.
func (o *Ops) launch(c *call, grid cuda.Dim3, threads int) error {
	if c.n != len(c.k.params) {
		panic(fmt.Sprintf("tensorcuda: %s: %d arguments, the kernel declares %d", c.k.name, c.n, len(c.k.params)))
	}
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 || grid.Y > 65535 || grid.Z > 65535 {
		panic(fmt.Sprintf("tensorcuda: %s: grid %v out of range", c.k.name, grid))
	}
	return o.run.launch(c.k, grid, cuda.Dim(uint32(threads), 1, 1), &c.args)
}

// Threads per block. Block reductions need a multiple of 32, at most 1024.
const (
	threads     = 256
	xentThreads = 512
	// argmaxThreads is op_argmax_rows' block, which reads a whole row (a
	// vocabulary of logits) alone.
	argmaxThreads = 512
	// wavesPerSM bounds the grid of grid-stride kernels: enough blocks to
	// fill the device a few times over, no more.
	wavesPerSM = 8
)

// strided returns the grid of a grid-stride kernel over n items.
func (o *Ops) strided(n int64) cuda.Dim3 {
	b := (n + threads - 1) / threads
	b = min(b, int64(max(o.sms, 1)*wavesPerSM))
	return cuda.Dim(uint32(max(b, 1)), 1, 1)
}

// vecStrided returns the grid of a grid-stride kernel over n items that
// takes 16 bytes of storage elements per access where aligned (the kernels'
// vectorised loops; their scalar fallback loops over the same grid).
func (o *Ops) vecStrided(n int64) cuda.Dim3 {
	v := 16 / o.es()
	return o.strided((n + v - 1) / v)
}

// Column sums (SumRows, RMSNorm's and NormRoPE's dw) run in two stages:
// blocks of rows_per_chunk rows write one partial row each, then op_colsum
// adds the partial rows in order. The first stage runs a thread per column
// and chunk, so narrow sums take more chunks: at least maxChunks, and
// enough for chunkThreads threads (a head dimension of 128 over a million
// head rows takes 2048 chunks of 512 rows, not 128 of 8192, whose long
// serial loops left the GPU mostly idle).
const (
	minChunkRows = 16
	maxChunks    = 128
	chunkThreads = 1 << 18
)

// chunks returns the rows per chunk and the number of chunks for a column
// sum over rows rows of cols columns.
func chunks(rows, cols int) (perChunk, n int) {
	return chunksOf(rows, max(maxChunks, chunkThreads/max(cols, 1)))
}

// The fused RMSNorm backward (op_rmsnorm_bwd) runs a block per chunk that
// holds one row of x and dy at a time, so its chunks are its blocks: enough
// that together they hold about normChunkElems row elements (4 MiB each of
// x and dy in bf16, the loads an H200 needs in flight; at dim 4096, 512
// blocks of 256 threads, about 4 per SM).
const normChunkElems = 1 << 21

// normChunks returns the rows per chunk and the number of chunks of the
// fused RMSNorm backward over rows rows of dim columns.
func normChunks(rows, dim int) (perChunk, n int) {
	return chunksOf(rows, max(maxChunks, normChunkElems/max(dim, 1)))
}

// chunksOf splits rows into at most most chunks of at least minChunkRows
// rows (but one chunk).
func chunksOf(rows, most int) (perChunk, n int) {
	perChunk = max(minChunkRows, (rows+most-1)/most)
	return perChunk, max(1, (rows+perChunk-1)/perChunk)
}

// ColumnScratch returns the bytes of fp32 scratch that SumRows,
// RMSNormBackward and NormRoPEBackward (with dw) need for rows × cols: a
// partial row per chunk of chunks or of normChunks, whichever is more (the
// latter only below 2¹⁴ columns, and then at most 8 MiB).
func ColumnScratch(rows, cols int) int64 {
	_, n := chunks(rows, cols)
	_, nf := normChunks(rows, cols)
	return int64(max(n, nf)) * int64(cols) * 4
}

// need panics unless b holds elems elements of size bytes.
func need(op, arg string, b gpu.Buffer, elems, size int64) {
	if b.Ptr == 0 && elems > 0 {
		panic(fmt.Sprintf("tensorcuda: %s: %s is a null buffer", op, arg))
	}
	if elems*size > b.Size {
		panic(fmt.Sprintf("tensorcuda: %s: %s holds %d bytes, needs %d (%d elements of %d bytes)", op, arg, b.Size, elems*size, elems, size))
	}
}

// optional is need for a buffer that may be null (Ptr 0: not computed).
func optional(op, arg string, b gpu.Buffer, elems, size int64) {
	if b.Ptr != 0 {
		need(op, arg, b, elems, size)
	}
}

// es returns the storage element size.
func (o *Ops) es() int64 { return int64(o.dt.Size()) }
