package tensorcuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"dflash/dtype"
	"dflash/flex/flexcuda"
	"dflash/gpu"
	"dflash/internal/switches"
	"dflash/jit"
	"dflash/tensor"
)

// Backend is the CUDA tensor backend: tensor.Backend[float32] on one
// gpu.Device, with a bf16 and an fp32
// Ops for the op kernels, cuBLASLt for the GEMMs and flexcuda for
// attention. It belongs to the device's worker thread: every method must
// be called there.
//
// # Storage classes
//
// Activations and their gradients (Alloc, Upload without stat) are bf16;
// statistics (AllocStat, Upload with stat: RMSNorm's rstd, RoPE tables,
// losses, loss scales) are fp32. AllocParams keeps an fp32 master copy and
// a bf16 compute copy of a model's parameter arena; the arena's gradient,
// made by Like from the master copy, is fp32. Every op dispatches on the
// dtypes of its arguments (dispatch.go lists the combinations); one that is
// not supported panics naming the op and the dtypes.
//
// # Memory
//
// Everything allocated between two Resets (storage, int data, masks,
// temporaries of the ops) comes from a step arena (one range of addresses
// grown in place where the device supports virtual memory management and
// DFLASH_STEP_VMM is not off, else chunks) and is released at once
// by the next ResetStep: storage must not be used after the ResetStep that follows
// its allocation (the ops panic when it is). FreeStep gives one allocation
// back earlier (a gradient once the backward pass has consumed it: see
// tensor.TapeOf.ReleaseGrads); the next allocation of its size takes it. A
// step that repeats the allocations and frees of the last one gets the same
// addresses. Parameter memory is persistent until Close.
//
// # Synchronisation
//
// Ops queue kernels on the device's default stream and never copy between
// host and device or wait. Upload, UploadInts and NewMask copy to the
// device through staging memory (gpu.Stage: queued in order with the ops,
// the host does not wait for the device); Download,
// DownloadInts and Sync wait for the queued work. A launch error, or an
// allocation that fails, panics with the error (the interface returns
// none).
type Backend struct {
	d       *gpu.Device // nil with the CPU tests' fake memory
	arch    string      // d's architecture ("sm_90"), that the kernels compile for
	cache   *jit.Cache
	bf, f32 *Ops
	mem     memory
	enc     []byte // write's encode buffer (write runs on the worker alone)
	arena   stepArena
	gen     uint64 // the current step; storage of another step is stale

	persistent []gpu.Buffer
	hostsMu    sync.Mutex          // AllocHost and FreeHost may be called from any goroutine
	hosts      map[*float32][]byte // AllocHost's page-locked memory not yet freed, by its first element
	partial    gpu.Buffer          // SumSquares' per-block sums, allocated at its first call
	release    []func()            // what ResetStep frees besides the arena (masks)
	attns      map[attnKey]*flexcuda.Attention
	builders   map[string]*flexcuda.Builder // by mask program hash
	det        bool                         // SetDeterministic
	prof       *profiler                    // StartProfile
	noGraphs   bool                         // DFLASH_CUDA_GRAPHS off: Replay runs regions plainly
	warned     map[replayWarning]bool       // what Replay has logged
	replays    [gpu.ReplayUngraphed + 1]int // Replay's outcomes by kind (Replays)
	profiling  bool
	noFP8Prod  bool // QuantizeInProducers(false)
}

// SetDeterministic makes the backend's results reproducible bit for bit
// from run to run (a resumed run then continues exactly): attention uses
// flexcuda's deterministic backward, GEMMs no atomic split-K reduction.
// The other ops already are (their reductions run in a fixed order;
// scatter-adds only ever see distinct rows in training). It costs speed
// and must come before the first op.
func (b *Backend) SetDeterministic() error {
	if len(b.attns) > 0 {
		return fmt.Errorf("tensorcuda: SetDeterministic after the first attention")
	}
	if b.d != nil {
		if err := b.d.SetDeterministicGemm(); err != nil {
			return err
		}
	}
	b.det = true
	return nil
}

var _ tensor.Backend[float32] = (*Backend)(nil)

// NewBackend returns the backend on d, compiling kernels through cache on
// first use, or all at once in Prepare. Call it on d's worker thread, before d's first GEMM:
// DFLASH_GEMM_WORKSPACE_MIB sets the cuBLASLt workspace, DFLASH_GEMM_TUNE
// off turns off tuning (gemmSettings), whose choices are saved in cache's
// directory, and DFLASH_CUDA_GRAPHS off runs Replay's regions plainly.
func NewBackend(cache *jit.Cache, d *gpu.Device) (*Backend, error) {
	graphs, err := switches.CUDAGraphs.Value()
	if err != nil {
		return nil, fmt.Errorf("tensorcuda: %w", err)
	}
	if err := applyGemmSettings(d, cache.Dir()); err != nil {
		return nil, err
	}
	bf, err := New(cache, d, dtype.BF16)
	if err != nil {
		return nil, err
	}
	f32, err := New(cache, d, dtype.F32)
	if err != nil {
		return nil, err
	}
	pool := d.NewPool() // the step arena's: the device's in-use peak counts what it hands out
	vm, err := stepMemory(d, pool)
	if err != nil {
		return nil, err
	}
	b := newBackend(d, cache, bf, f32, devMemory{d}, vm)
	b.arena.mem, b.arena.use = poolMemory{devMemory{d}, pool}, pool
	b.noGraphs = !graphs
	return b, nil
}

// newBackend returns the backend over mem, with its step arena over vm
// when it is not nil.
func newBackend(d *gpu.Device, cache *jit.Cache, bf, f32 *Ops, mem memory, vm growable) *Backend {
	var arch string
	if d != nil {
		arch = d.Arch()
	}
	return &Backend{d: d, arch: arch, cache: cache, bf: bf, f32: f32, mem: mem, arena: stepArena{mem: mem, vm: vm, chunk: defaultChunk}, gen: 1,
		attns: map[attnKey]*flexcuda.Attention{}, builders: map[string]*flexcuda.Builder{}}
}

// Name returns "cuda-bf16".
func (b *Backend) Name() string { return "cuda-bf16" }

// XentChunk returns 2^29 logits (1 GiB of bf16) a chunk, so
// that the chunk's three products have thousands of rows (3,533 at the
// Qwen3 vocabulary) and read the LM head once per chunk.
func (b *Backend) XentChunk() int { return 1 << 29 }

// Device returns the device the backend runs on.
func (b *Backend) Device() *gpu.Device { return b.d }

// ResetStep ends a step: everything allocated since the last ResetStep is
// released at once (the step arena's memory is kept for the next step)
// and must not be used again.
func (b *Backend) ResetStep() {
	b.gen++
	b.arena.reset()
	// Last made, first freed: the allocator hands out a size's free blocks
	// last freed first, so the next step's masks get this step's addresses
	// in the same order (a replayed region's work then matches its graph).
	for i := len(b.release) - 1; i >= 0; i-- {
		b.release[i]()
	}
	b.release = nil
}

// FreeStep gives s back to the step arena before the step ends: the next
// allocation of its size takes its address, and s must not be used
// afterwards. s must be a whole allocation of this step (Alloc, AllocStat, Upload or Like of step storage); a Slice of one,
// parameter memory or storage of an earlier step panics.
func (b *Backend) FreeStep(s tensor.Storage[float32]) {
	x := b.buf(s, "FreeStep storage")
	switch {
	case x.step == 0:
		panic(fmt.Sprintf("tensorcuda: FreeStep of %v, which is parameter memory, not step memory", x))
	case !x.whole:
		panic(fmt.Sprintf("tensorcuda: FreeStep of %v, a Slice view, not a whole allocation", x))
	case x.n == 0:
		return
	}
	b.freeTemp(x)
}

// freeTemp gives a whole step allocation back to the arena as soon as the
// ops that use it are queued: the stream runs them before any op queued
// later, so a later allocation that reuses the memory cannot overtake them.
func (b *Backend) freeTemp(x Buf) {
	if x.n > 0 {
		b.arena.release(x.ptr, x.bytes())
	}
}

// FreesStep returns true: FreeStep gives memory back to the step arena.
func (b *Backend) FreesStep() bool { return true }

// MarkStep returns the step arena's position.
func (b *Backend) MarkStep() tensor.StepMark { return b.arena.mark() }

// ReleaseStep frees the step storage allocated since m: it must not be used
// afterwards (unlike ResetStep, the backend cannot tell such storage apart:
// the caller scopes it). Masks built since m live until ResetStep.
func (b *Backend) ReleaseStep(m tensor.StepMark) { b.arena.rewind(m) }

// StepStats is what the step arena holds and uses, in bytes.
type StepStats struct {
	Reserved     int64 // held from the device now, in Chunks chunks
	MostReserved int64 // the most ever held at once
	Peak         int64 // the most in use at once (allocated and not freed) in one step
	Chunks       int
	InPlace      bool // one range of addresses grown in place (VMM), not chunks
}

// StepBytes returns the step arena's bytes: reserved and in use.
func (b *Backend) StepBytes() StepStats {
	return StepStats{Reserved: b.arena.reserved(), MostReserved: b.arena.most, Peak: b.arena.peak, Chunks: len(b.arena.chunks),
		InPlace: b.arena.vm != nil}
}

// Close resets the backend and frees all of its memory, parameters and
// AllocHost's host memory included, and the attention kernels' workspaces.
func (b *Backend) Close() {
	b.ResetStep()
	b.arena.releaseAll()
	for _, p := range b.persistent {
		b.mem.free(p)
	}
	b.persistent = nil
	for p, raw := range b.hosts {
		if err := b.mem.freeHost(raw); err != nil {
			slog.Warn("tensorcuda: free page-locked host memory at Close", "err", err)
		}
		delete(b.hosts, p)
	}
	for _, a := range b.attns {
		a.Release(b.d)
	}
	for _, bl := range b.builders {
		bl.Release(b.d)
	}
}

// Sync waits for the work queued on the device.
func (b *Backend) Sync() error { return b.mem.sync() }

// ops returns the kernels of storage dtype dt.
func (b *Backend) ops(dt dtype.DType) *Ops {
	if dt == dtype.BF16 {
		return b.bf
	}
	return b.f32
}

// alloc returns n bytes of persistent or step memory, zeroed with zero.
func (b *Backend) alloc(n int64, persistent, zero bool) gpu.Buffer {
	if n == 0 {
		return gpu.Buffer{}
	}
	var buf gpu.Buffer
	if persistent {
		var err error
		if buf, err = b.mem.alloc(n); err != nil {
			panic(fmt.Errorf("tensorcuda: parameter memory of %d bytes: %w", n, err))
		}
		b.persistent = append(b.persistent, buf)
	} else {
		p, err := b.arena.alloc(n)
		if err != nil {
			panic(err)
		}
		buf = gpu.Buffer{Ptr: p, Size: n}
	}
	if zero {
		end := b.span("memset (zeroed allocation)", 0)
		must("zero", b.mem.zero(buf))
		end()
	}
	return buf
}

// newBuf returns n elements of dtype dt.
func (b *Backend) newBuf(n int, dt dtype.DType, persistent, zero bool) Buf {
	s := Buf{be: b, ptr: b.alloc(int64(n)*int64(dt.Size()), persistent, zero).Ptr, n: n, dt: dt, whole: true}
	if !persistent {
		s.step = b.gen
	}
	return s
}

// Alloc returns n zero bf16 elements.
func (b *Backend) Alloc(n int) tensor.Storage[float32] { return b.newBuf(n, dtype.BF16, false, true) }

// AllocOut returns n bf16 elements with undefined contents: no memset,
// for outputs written whole.
func (b *Backend) AllocOut(n int) tensor.Storage[float32] {
	return b.newBuf(n, dtype.BF16, false, false)
}

// AllocStatOut returns n fp32 elements with undefined contents.
func (b *Backend) AllocStatOut(n int) tensor.Storage[float32] {
	return b.newBuf(n, dtype.F32, false, false)
}

// AllocStat returns n zero fp32 elements.
func (b *Backend) AllocStat(n int) tensor.Storage[float32] {
	return b.newBuf(n, dtype.F32, false, true)
}

// Upload returns x as new bf16 storage, or fp32 with stat, rounded on the
// host and copied once.
func (b *Backend) Upload(x []float32, stat bool) tensor.Storage[float32] {
	dt := dtype.BF16
	if stat {
		dt = dtype.F32
	}
	return b.upload(x, dt, false)
}

// KeepStat uploads x as fp32 storage outside the step's memory, kept for
// the backend's life (the rotary tables).
func (b *Backend) KeepStat(x []float32) tensor.Storage[float32] {
	return b.upload(x, dtype.F32, true)
}

func (b *Backend) upload(x []float32, dt dtype.DType, persistent bool) Buf {
	s := b.newBuf(len(x), dt, persistent, false)
	b.write("Upload", s, x)
	return s
}

// Download waits for the queued work and copies s into dst as float32.
func (b *Backend) Download(s tensor.Storage[float32], dst []float32) {
	x := b.buf(s, "Download source")
	checkLen("Download", len(dst), x.n)
	if x.n == 0 {
		return
	}
	if x.cols > 0 {
		panic(fmt.Sprintf("tensorcuda: Download of %v: an FP8 matrix holds codes and row scales, not values", x))
	}
	if x.dt == dtype.F32 {
		// One copy straight into dst: at the link's full speed when dst
		// is AllocHost's page-locked memory.
		must("Download", b.mem.download(f32Bytes(dst), x.Buffer()))
		return
	}
	raw := make([]byte, x.n*x.dt.Size())
	must("Download", b.mem.download(raw, x.Buffer()))
	dtype.DecodeFloat32(x.dt, dst, raw)
}

// AllocHost returns n float32 elements of page-locked host memory, into
// which Download copies fp32 storage (the master values, the gradient,
// AdamW's moments) in one transfer at the link's full speed. It may be
// called from any goroutine (gpu.Device.AllocHost), beside the worker's
// work. What FreeHost has not given back by Close, Close frees.
func (b *Backend) AllocHost(n int) ([]float32, error) {
	if n == 0 {
		return nil, nil
	}
	raw, err := b.mem.allocHost(4 * int64(n))
	if err != nil {
		return nil, fmt.Errorf("tensorcuda: AllocHost: %w", err)
	}
	h := unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), n)
	b.hostsMu.Lock()
	defer b.hostsMu.Unlock()
	if b.hosts == nil {
		b.hosts = map[*float32][]byte{}
	}
	b.hosts[&h[0]] = raw
	return h, nil
}

// FreeHost gives back memory from AllocHost; other memory is a programmer
// error and panics.
func (b *Backend) FreeHost(h []float32) error {
	if len(h) == 0 {
		return nil
	}
	b.hostsMu.Lock()
	raw, ok := b.hosts[&h[0]]
	delete(b.hosts, &h[0])
	b.hostsMu.Unlock()
	if !ok {
		panic("tensorcuda: FreeHost of memory that AllocHost did not return (or freed already)")
	}
	if err := b.mem.freeHost(raw); err != nil {
		return fmt.Errorf("tensorcuda: FreeHost: %w", err)
	}
	return nil
}

// AllocInts returns n zero int32 values.
func (b *Backend) AllocInts(n int) tensor.Ints {
	return IntBuf{be: b, ptr: b.alloc(4*int64(n), false, true).Ptr, n: n, step: b.gen}
}

// UploadInts returns x as new int32 storage.
func (b *Backend) UploadInts(x []int32) tensor.Ints {
	s := IntBuf{be: b, ptr: b.alloc(4*int64(len(x)), false, false).Ptr, n: len(x), step: b.gen}
	if len(x) > 0 {
		raw := make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
		}
		must("UploadInts", b.mem.upload(s.Buffer(), raw))
	}
	return s
}

// DownloadInts waits for the queued work and copies s into dst.
func (b *Backend) DownloadInts(s tensor.Ints, dst []int32) {
	x := b.ints(s, "DownloadInts source")
	checkLen("DownloadInts", len(dst), x.n)
	if x.n == 0 {
		return
	}
	raw := make([]byte, 4*x.n)
	must("DownloadInts", b.mem.download(raw, x.Buffer()))
	for i := range dst {
		dst[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
}

// AllocParams returns a model's parameter storage, both persistent: the
// fp32 master copy (only with master) and the bf16 compute copy.
func (b *Backend) AllocParams(n int, master bool) (values, compute tensor.Storage[float32]) {
	compute = b.newBuf(n, dtype.BF16, true, false)
	if master {
		values = b.newBuf(n, dtype.F32, true, false)
	}
	return values, compute
}

// WriteParams copies host into dst (parameter storage of this backend),
// rounded to its dtype.
func (b *Backend) WriteParams(dst tensor.Storage[float32], host []float32) {
	x := b.buf(dst, "WriteParams")
	if x.cols > 0 {
		b.quantizeInto("WriteParams", x, func(stage Buf) { b.write("WriteParams", stage, host) })
		return
	}
	b.write("WriteParams", x, host)
}

// WriteParamBytes copies raw, elements of dt, into dst (parameter storage
// of this backend): as they are when dst stores dt (a bf16 weight into
// the bf16 compute copy: one staged copy, nothing converted on the host),
// else decoded to float32 and rounded to dst's dtype as WriteParams does.
func (b *Backend) WriteParamBytes(dst tensor.Storage[float32], dt dtype.DType, raw []byte) {
	x := b.buf(dst, "WriteParamBytes")
	checkLen("WriteParamBytes", len(raw), x.n*dt.Size())
	if x.n == 0 {
		return
	}
	if x.cols > 0 {
		b.quantizeInto("WriteParamBytes", x, func(stage Buf) { b.WriteParamBytes(stage, dt, raw) })
		return
	}
	if dt == x.dt {
		must("WriteParamBytes", b.mem.upload(x.Buffer(), raw))
		return
	}
	host := make([]float32, x.n)
	dtype.DecodeFloat32(dt, host, raw)
	b.write("WriteParamBytes", x, host)
}

// HostParams returns false: parameters live in device memory.
func (b *Backend) HostParams() bool { return false }

// buf returns s as this backend's live storage; it panics, naming what,
// for storage of another backend or of a step that has been ResetStep.
func (b *Backend) buf(s tensor.Storage[float32], what string) Buf {
	return own[Buf](b, s, what, "storage")
}

// opt is buf for storage that may be nil (an output not computed).
func (b *Backend) opt(s tensor.Storage[float32], what string) Buf {
	if s == nil {
		return Buf{}
	}
	return b.buf(s, what)
}

// ints is buf for int data.
func (b *Backend) ints(s tensor.Ints, what string) IntBuf {
	return own[IntBuf](b, s, what, "int data")
}

// owned is the storage a backend hands out: Buf and IntBuf.
type owned interface {
	Buf | IntBuf
	owner() (be *Backend, step uint64)
}

// own returns s as b's live storage of type S (kind names it); it panics,
// naming what, for anything else, for storage of another backend, or of a
// step that has been ResetStep.
func own[S owned](b *Backend, s any, what, kind string) S {
	x, ok := s.(S)
	if !ok {
		panic(fmt.Sprintf("tensorcuda: %s is %T, not CUDA backend %s", what, s, kind))
	}
	be, step := x.owner()
	if be != b {
		panic(fmt.Sprintf("tensorcuda: %s belongs to another CUDA backend", what))
	}
	b.live(what, step)
	return x
}

// live panics when step is a step that has been ResetStep.
func (b *Backend) live(what string, step uint64) {
	if step != 0 && step != b.gen {
		panic(fmt.Sprintf("tensorcuda: %s was allocated in step %d and used after ResetStep (now step %d): step storage lives until the next ResetStep",
			what, step, b.gen))
	}
}

// must panics with err, naming the op.
func must(op string, err error) {
	if err != nil {
		panic(fmt.Errorf("tensorcuda: %s: %w", op, err))
	}
}

func checkLen(what string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("tensorcuda: %s: length %d, want %d", what, got, want))
	}
}

// memory is the device memory the backend uses: the device's, or a fake in
// the CPU tests.
type memory interface {
	alloc(n int64) (gpu.Buffer, error)
	free(b gpu.Buffer)
	zero(b gpu.Buffer) error // queued on the default stream
	upload(b gpu.Buffer, src []byte) error
	download(dst []byte, b gpu.Buffer) error
	allocHost(n int64) ([]byte, error) // page-locked host memory
	freeHost(b []byte) error
	sync() error
	trim() error // return cached free blocks to the device
}

type devMemory struct{ d *gpu.Device }

func (m devMemory) alloc(n int64) (gpu.Buffer, error)       { return m.d.Alloc(n) }
func (m devMemory) free(b gpu.Buffer)                       { m.d.Free(b) }
func (m devMemory) zero(b gpu.Buffer) error                 { return m.d.Memset(b, 0, nil) }
func (m devMemory) upload(b gpu.Buffer, src []byte) error   { return gpu.Stage(m.d, b, src) }
func (m devMemory) download(dst []byte, b gpu.Buffer) error { return gpu.Download(m.d, dst, b) }
func (m devMemory) allocHost(n int64) ([]byte, error)       { return m.d.AllocHost(n) }
func (m devMemory) freeHost(b []byte) error                 { return m.d.FreeHost(b) }
func (m devMemory) sync() error                             { return m.d.Synchronize() }
func (m devMemory) trim() error                             { _, err := m.d.ReleaseCached(); return err }

// poolMemory is device memory whose buffers a gpu.Pool holds (the step
// arena's chunks).
type poolMemory struct {
	devMemory
	p *gpu.Pool
}

func (m poolMemory) alloc(n int64) (gpu.Buffer, error) { return m.p.Alloc(n) }
func (m poolMemory) free(b gpu.Buffer)                 { m.p.Free(b) }

// RecoverOOM, deferred in a function that runs a model on a Backend, turns
// the panic of an op that ran out of device memory (the Backend's ops
// return no errors) into *err, naming what was being allocated and how much
// the device held; any other panic goes on.
func RecoverOOM(err *error) {
	r := recover()
	if r == nil {
		return
	}
	var oom *gpu.OutOfMemoryError
	if e, ok := r.(error); ok && errors.As(e, &oom) {
		*err = e
		return
	}
	panic(r)
}
