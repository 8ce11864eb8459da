package gpu

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"unsafe"

	"dflash/cuda"
)

// Info holds a GPU's fixed properties.
type Info struct {
	Ordinal             int
	Name                string
	Major, Minor        int   // compute capability
	SMs                 int   // multiprocessors
	ClockKHz            int   // the SMs' highest clock (CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
	MemClockKHz         int   // the memory's highest clock (CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
	MemBusBits          int   // the memory bus width (CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
	TotalMem            int64 // bytes
	SharedPerBlockOptin int   // most dynamic shared memory a kernel may opt in to
	L2Bytes             int
}

// Arch returns the NVRTC target for the GPU, e.g. "sm_90".
func (i Info) Arch() string { return fmt.Sprintf("sm_%d%d", i.Major, i.Minor) }

// QueryInfo reads the properties of GPU ordinal; it needs no context and may
// be called from any goroutine.
func QueryInfo(ordinal int) (Info, error) {
	d, err := cuda.DeviceGet(ordinal)
	if err != nil {
		return Info{}, err
	}
	info := Info{Ordinal: ordinal}
	if info.Name, err = d.Name(); err != nil {
		return info, err
	}
	if info.Major, info.Minor, err = d.ComputeCapability(); err != nil {
		return info, err
	}
	if info.TotalMem, err = d.TotalMem(); err != nil {
		return info, err
	}
	for _, a := range []struct {
		attr cuda.DeviceAttribute
		dst  *int
	}{
		{cuda.AttrMultiprocessorCount, &info.SMs},
		{cuda.AttrClockRate, &info.ClockKHz},
		{cuda.AttrMemoryClockRate, &info.MemClockKHz},
		{cuda.AttrGlobalMemoryBusWidth, &info.MemBusBits},
		{cuda.AttrMaxSharedMemoryPerBlockOptin, &info.SharedPerBlockOptin},
		{cuda.AttrL2CacheSize, &info.L2Bytes},
	} {
		if *a.dst, err = d.Attribute(a.attr); err != nil {
			return info, err
		}
	}
	return info, nil
}

// Device is a GPU as seen from its worker thread. Its methods must be called
// on that thread (inside Worker.Run or a submitted job).
type Device struct {
	w     *Worker
	info  Info
	cu    cuda.Device
	ctx   cuda.Context
	fake  bool // CPU tests: no CUDA behind this device
	id    string
	main  *Stream
	alloc *Allocator
	blas  *blasState
	// detGemm restricts GEMMs to split-K reductions in the compute type
	// (SetDeterministicGemm).
	detGemm bool
	gemmWS  int64      // SetGemmWorkspace's bytes; 0: GemmWorkspace
	tune    *gemmTuner // SetGemmTuning's choices; nil: the heuristic's first

	streams []*Stream
	events  []*Event
	graphs  map[*Graph]struct{}
	ranges  map[*Range]struct{}
	comms   []*Comm

	count  counters   // copies and synchronisations (Counters)
	pinned pinnedHost // AllocHost's memory

	stage     *stager    // Stage's staging memory, made on first use
	stageDev  *cudaStage // its copies and events
	capturing bool       // inside Capture's record
	replays   map[any]*replaySlot
	replaySeg int       // calls per graph of a replayed region; replaySegment when 0 (tests set it)
	rec       *recorder // a Replay dry run's work, while it runs
}

// openCUDADevice is the worker setup for a real GPU.
func openCUDADevice(w *Worker) (*Device, error) {
	info, err := QueryInfo(w.ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{w: w, info: info, graphs: map[*Graph]struct{}{}, ranges: map[*Range]struct{}{}, id: fmt.Sprintf("cuda:%d#%d", w.ordinal, w.gen)}
	if d.cu, err = cuda.DeviceGet(w.ordinal); err != nil {
		return nil, err
	}
	if d.ctx, err = cuda.PrimaryCtxRetain(d.cu); err != nil {
		return nil, err
	}
	if err := cuda.CtxSetCurrent(d.ctx); err != nil {
		return nil, errors.Join(err, cuda.PrimaryCtxRelease(d.cu))
	}
	h, err := cuda.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return nil, errors.Join(err, cuda.PrimaryCtxRelease(d.cu))
	}
	d.main = &Stream{d: d, h: h}
	d.alloc = newAllocator(w.ordinal, cudaMemory{})
	return d, nil
}

// close frees everything the device owns; it runs on the worker thread.
func (d *Device) close() error {
	if d.fake {
		return nil
	}
	var errs []error
	for g := range d.graphs {
		errs = append(errs, g.destroy())
	}
	for _, c := range d.comms {
		if c.c != 0 {
			errs = append(errs, c.Destroy())
		}
	}
	if d.blas != nil {
		errs = append(errs, d.blas.close(d))
	}
	for _, e := range d.events {
		if e.h != 0 {
			errs = append(errs, cuda.EventDestroy(e.h))
		}
	}
	for _, s := range d.streams {
		if s.h != 0 {
			errs = append(errs, cuda.StreamDestroy(s.h))
		}
	}
	errs = append(errs, cuda.StreamSynchronize(d.main.h), d.closeStage(), cuda.StreamDestroy(d.main.h))
	for r := range d.ranges {
		errs = append(errs, r.free())
	}
	if st := d.alloc.Stats(); st.LiveBuffers > 0 {
		slog.Warn("gpu: closing with buffers still allocated", "gpu", d.info.Ordinal,
			"buffers", st.LiveBuffers, "bytes", st.InUseBytes)
	}
	_, err := d.alloc.Release()
	errs = append(errs, err, cuda.PrimaryCtxRelease(d.cu))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gpu %d: close: %w", d.info.Ordinal, err)
	}
	return nil
}

// check returns a *ForeignThreadError in debug mode when called off the
// device's worker thread.
func (d *Device) check(call string) error {
	if !debugOn.Load() {
		return nil
	}
	if tid := gettid(); tid != 0 && tid != d.w.tid {
		return &ForeignThreadError{Call: call, Thread: tid, GPU: d.info.Ordinal, Owner: d.w.tid}
	}
	return nil
}

// Info returns the GPU's properties.
func (d *Device) Info() Info { return d.info }

// Ordinal returns the GPU's ordinal.
func (d *Device) Ordinal() int { return d.info.Ordinal }

// Arch returns the NVRTC target for the GPU, e.g. "sm_90".
func (d *Device) Arch() string { return d.info.Arch() }

// Worker returns the device's worker.
func (d *Device) Worker() *Worker { return d.w }

// Stream returns the worker's default stream (non-blocking).
func (d *Device) Stream() *Stream { return d.main }

// Synchronize waits for all work queued on the device's streams.
func (d *Device) Synchronize() error {
	if err := d.check("Synchronize"); err != nil {
		return err
	}
	if d.rec != nil {
		return ErrReplayHostWait
	}
	d.count.sync()
	return cuda.CtxSynchronize()
}

// MemInfo returns the device's free and total memory.
func (d *Device) MemInfo() (free, total int64, err error) {
	if err := d.check("MemInfo"); err != nil {
		return 0, 0, err
	}
	return cuda.MemGetInfo()
}

// Launch queues kernel f on s (the default stream when nil).
func (d *Device) Launch(f cuda.Function, grid, block cuda.Dim3, sharedMem uint32, s *Stream, args *cuda.Args) error {
	if err := d.check("Launch"); err != nil {
		return err
	}
	h := d.stream(s).h
	if d.rec != nil {
		d.rec.launch(f, grid, block, sharedMem, h, args, d.launched)
		return nil
	}
	d.launched()
	return cuda.LaunchKernel(f, grid, block, sharedMem, h, args)
}

func (d *Device) stream(s *Stream) *Stream {
	if s == nil {
		return d.main
	}
	if s.d != d {
		panic(fmt.Sprintf("gpu %d: stream of gpu %d used", d.info.Ordinal, s.d.info.Ordinal))
	}
	return s
}

// LoaderID identifies this device context for the kernel cache; a GPU
// reopened after Close gets a new id, so stale module handles are never used.
func (d *Device) LoaderID() string { return d.id }

// LoadModule loads a compiled image into the device's context.
func (d *Device) LoadModule(image []byte) (cuda.Module, error) {
	if err := d.check("LoadModule"); err != nil {
		return 0, err
	}
	return cuda.ModuleLoadData(image)
}

// ModuleFunction returns the kernel name of module m.
func (d *Device) ModuleFunction(m cuda.Module, name string) (cuda.Function, error) {
	if err := d.check("ModuleFunction"); err != nil {
		return 0, err
	}
	return cuda.ModuleGetFunction(m, name)
}

// UnloadModule unloads m.
func (d *Device) UnloadModule(m cuda.Module) error {
	if err := d.check("UnloadModule"); err != nil {
		return err
	}
	return cuda.ModuleUnload(m)
}

// Element is a type that Upload and Download copy.
type Element interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// Upload copies src into the start of b, in order with the work queued on
// the default stream, and returns when the copy is done: it counts as one
// host->device copy and one synchronisation (Counters).
func Upload[T Element](d *Device, b Buffer, src []T) error {
	return waitedCopy(d, "Upload", b, src, true)
}

// Download copies the start of b into dst, in order with the work queued on
// the default stream, and returns when the copy is done: it counts as one
// device->host copy and one synchronisation (Counters).
func Download[T Element](d *Device, dst []T, b Buffer) error {
	return waitedCopy(d, "Download", b, dst, false)
}

// hostCopy returns the bytes of a copy (call names it) between host and the
// start of b, 0 when there is nothing to copy. It panics when host does not
// fit in b, and returns the error that forbids the copy now: a call off the
// device's worker (debug mode), or a copy inside a replayed region, where
// the host cannot wait for the device (ErrReplayHostWait).
func hostCopy[T Element](d *Device, call string, b Buffer, host []T) (int64, error) {
	n := int64(len(host)) * int64(unsafe.Sizeof(*new(T)))
	if n > b.Size {
		panic(fmt.Sprintf("gpu: %s of %d bytes with a %d-byte buffer", call, n, b.Size))
	}
	if n == 0 {
		return 0, nil
	}
	if err := d.check(call); err != nil {
		return 0, err
	}
	if d.rec != nil {
		return 0, ErrReplayHostWait
	}
	return n, nil
}

// waitedCopy copies host into b (up) or b into host on the default stream
// and waits for the copy: the body of Upload and Download.
func waitedCopy[T Element](d *Device, call string, b Buffer, host []T, up bool) error {
	n, err := hostCopy(d, call, b, host)
	if n == 0 || err != nil {
		return err
	}
	p := unsafe.Pointer(&host[0])
	d.count.sync()
	if up {
		d.count.htod(n)
	} else {
		d.count.dtoh(n)
	}
	err = d.hostPieces(p, n, func(off, n int64) error {
		if up {
			return cuda.MemcpyHtoDAsync(b.Ptr+cuda.DevicePtr(off), unsafe.Add(p, off), n, d.main.h)
		}
		return cuda.MemcpyDtoHAsync(unsafe.Add(p, off), b.Ptr+cuda.DevicePtr(off), n, d.main.h)
	})
	if err == nil {
		err = cuda.StreamSynchronize(d.main.h)
	}
	runtime.KeepAlive(host) // the copy uses host until the stream is synchronised
	return err
}

// hostCall runs fn, a driver call that needs the device's context but no
// stream, on the worker's thread when called there, else on a new OS
// thread with the context current (a goroutine's own thread may be another
// device's worker, whose context must stay).
func (d *Device) hostCall(fn func() error) error {
	if gettid() == d.w.tid {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine: its context binding goes with it
		tid := gettid()
		workerThreads.Store(tid, d.w) // a thread of the device's, for the foreign-thread check
		defer workerThreads.Delete(tid)
		if err := cuda.CtxSetCurrent(d.ctx); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}

// Memset sets n bytes of b to v on s (the default stream when nil).
func (d *Device) Memset(b Buffer, v byte, s *Stream) error {
	if err := d.check("Memset"); err != nil {
		return err
	}
	h := d.stream(s).h
	if d.rec != nil {
		d.rec.other(func() error { return cuda.MemsetD8Async(b.Ptr, v, b.Size, h) }, 'm', uint64(b.Ptr), uint64(b.Size), uint64(v), uint64(h))
		return nil
	}
	return cuda.MemsetD8Async(b.Ptr, v, b.Size, h)
}

// CopyAsync queues copying n bytes from src to dst on s.
func (d *Device) CopyAsync(dst, src Buffer, n int64, s *Stream) error {
	if n > dst.Size || n > src.Size {
		panic(fmt.Sprintf("gpu: CopyAsync of %d bytes between buffers of %d and %d", n, dst.Size, src.Size))
	}
	if err := d.check("CopyAsync"); err != nil {
		return err
	}
	h := d.stream(s).h
	if d.rec != nil {
		d.rec.other(func() error { return cuda.MemcpyDtoDAsync(dst.Ptr, src.Ptr, n, h) }, 'c', uint64(dst.Ptr), uint64(src.Ptr), uint64(n), uint64(h))
		return nil
	}
	return cuda.MemcpyDtoDAsync(dst.Ptr, src.Ptr, n, h)
}
