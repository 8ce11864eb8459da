package tensorcuda

import (
	"fmt"
	"unsafe"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
)

// Buf is the CUDA backend's tensor.Storage: n elements of dtype bf16 or
// f32 at a device address, owned by a Backend. It is a view: Slice is
// pointer arithmetic and copies nothing.
//
// A Buf allocated between two Resets of its backend (every activation,
// statistic and temporary of a step) lives in the step arena and must not
// be used after the next ResetStep; the backend's ops panic when given one.
// Parameter memory (AllocParams) and the storage Like makes from it is
// persistent: it lives until the backend's Close.
type Buf struct {
	be    *Backend
	ptr   cuda.DevicePtr
	n     int
	dt    dtype.DType
	step  uint64 // the step the storage belongs to; persistent (0) for parameters
	whole bool   // a whole allocation, not a Slice of one (FreeStep takes only those)
	// An FP8 matrix (dt F8E4M3: a frozen weight, AllocParamsFP8, or an
	// activation in step memory, AllocOperand) has rows of cols codes and
	// a float32 scale per row at scales. An activation's scales follow its
	// codes in its one allocation (fp8ActBytes).
	scales cuda.DevicePtr
	cols   int
}

// bytes returns the size of the allocation of whole step storage s: its
// elements', and an FP8 activation's scales after its codes.
func (s Buf) bytes() int64 {
	if s.cols > 0 && s.step != 0 {
		return fp8ActBytes(s.n, s.cols)
	}
	return int64(s.n) * int64(s.dt.Size())
}

// fp8ActBytes returns the allocation of an FP8 activation of n codes in rows
// of cols: the codes, padded to 16 bytes, then a float32 scale per row.
func fp8ActBytes(n, cols int) int64 { return fp8ActScalesAt(n) + 4*int64(n/cols) }

// fp8ActScalesAt returns the byte offset of an FP8 activation's scales in
// its allocation: after its n codes, padded to 16 bytes.
func fp8ActScalesAt(n int) int64 { return (int64(n) + 15) / 16 * 16 }

// Len returns the number of elements.
func (s Buf) Len() int { return s.n }

func (s Buf) owner() (*Backend, uint64) { return s.be, s.step }

// DType returns dtype.BF16 or dtype.F32.
func (s Buf) DType() dtype.DType { return s.dt }

// Slice returns the view of elements [lo, hi).
func (s Buf) Slice(lo, hi int) tensor.Storage[float32] {
	checkRange("Buf.Slice", lo, hi, s.n)
	if s.cols > 0 {
		if lo%s.cols != 0 || hi%s.cols != 0 {
			panic(fmt.Sprintf("tensorcuda: Buf.Slice(%d, %d) of an FP8 matrix of rows of %d: not whole rows", lo, hi, s.cols))
		}
		s.scales += cuda.DevicePtr(4 * (lo / s.cols))
	}
	s.ptr += cuda.DevicePtr(lo * s.dt.Size())
	s.n = hi - lo
	s.whole = false
	return s
}

// Like returns n zero elements of the same dtype: persistent for
// persistent storage (a parameter's gradient), in the step arena otherwise.
func (s Buf) Like(n int) tensor.Storage[float32] {
	s.noGrad("Like")
	return s.be.newBuf(n, s.dt, s.step == 0, true)
}

// LikeOut is Like without the memset: the contents are undefined, for a gradient its backward step writes whole.
func (s Buf) LikeOut(n int) tensor.Storage[float32] {
	s.noGrad("LikeOut")
	return s.be.newBuf(n, s.dt, s.step == 0, false)
}

// noGrad panics for an FP8 matrix: a frozen weight has no gradient.
func (s Buf) noGrad(op string) {
	if s.cols > 0 {
		panic(fmt.Sprintf("tensorcuda: Buf.%s of %v: an FP8 matrix is a frozen weight, without gradient", op, s))
	}
}

// Buffer returns the device memory of s (for NCCL and kernels outside the
// backend).
func (s Buf) Buffer() gpu.Buffer {
	if s.n == 0 {
		return gpu.Buffer{Ptr: s.ptr}
	}
	return gpu.Buffer{Ptr: s.ptr, Size: int64(s.n) * int64(s.dt.Size())}
}

// String names the dtype, length and address.
func (s Buf) String() string { return fmt.Sprintf("%s[%d]@%#x", s.dt, s.n, uint64(s.ptr)) }

// IntBuf is the CUDA backend's tensor.Ints: n int32 values on the device,
// under Buf's lifetime rule.
type IntBuf struct {
	be   *Backend
	ptr  cuda.DevicePtr
	n    int
	step uint64
}

// Len returns the number of elements.
func (s IntBuf) Len() int { return s.n }

func (s IntBuf) owner() (*Backend, uint64) { return s.be, s.step }

// Slice returns the view of elements [lo, hi).
func (s IntBuf) Slice(lo, hi int) tensor.Ints {
	checkRange("IntBuf.Slice", lo, hi, s.n)
	s.ptr += cuda.DevicePtr(4 * lo)
	s.n = hi - lo
	return s
}

// Buffer returns the device memory of s.
func (s IntBuf) Buffer() gpu.Buffer { return gpu.Buffer{Ptr: s.ptr, Size: 4 * int64(s.n)} }

// write copies x into dst (len(x) = dst.n), rounded to dst's dtype; a
// panic names op. Float32 on a little-endian host is its own encoding and
// is staged from x's memory; another dtype is encoded in pieces of at most
// writeChunk bytes through the backend's one encode buffer, so that a
// model's parameters reach the device without a host copy of each.
func (b *Backend) write(op string, dst Buf, x []float32) {
	checkLen(op, len(x), dst.n)
	if dst.n == 0 {
		return
	}
	if dst.dt == dtype.F32 && dtype.HostLittleEndian {
		must(op, b.mem.upload(dst.Buffer(), f32Bytes(x)))
		return
	}
	size := dst.dt.Size()
	per := max(1, writeChunk/size)
	if n := min(len(x), per) * size; len(b.enc) < n {
		b.enc = make([]byte, n)
	}
	for lo := 0; lo < len(x); lo += per {
		hi := min(len(x), lo+per)
		raw := b.enc[:(hi-lo)*size]
		dtype.EncodeFloat32(dst.dt, raw, x[lo:hi])
		must(op, b.mem.upload(gpu.Buffer{Ptr: dst.ptr + cuda.DevicePtr(lo*size), Size: int64(len(raw))}, raw))
	}
}

// f32Bytes returns the memory of x (not empty) as bytes: its encoding on a
// little-endian host.
func f32Bytes(x []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x)) }

// writeChunk is the most bytes write encodes at once (a variable for the
// tests, which cut it to a few elements).
var writeChunk = 64 << 20

// Memory returns the device memory of s for code outside the backend that
// hands it to the device itself (an NCCL all-reduce of a gradient range).
// It returns an error for storage that is not this backend's, and panics
// for step storage used after its ResetStep, as the ops do.
func (b *Backend) Memory(s tensor.Storage[float32]) (gpu.Buffer, error) {
	x, ok := s.(Buf)
	if !ok {
		return gpu.Buffer{}, fmt.Errorf("tensorcuda: %T is not CUDA backend storage (Buf)", s)
	}
	if x.be != b {
		return gpu.Buffer{}, fmt.Errorf("tensorcuda: %v belongs to another CUDA backend", x)
	}
	b.live("storage", x.step)
	return x.Buffer(), nil
}

func checkRange(op string, lo, hi, n int) {
	if lo < 0 || hi < lo || hi > n {
		panic(fmt.Sprintf("tensorcuda: %s(%d, %d) of %d elements", op, lo, hi, n))
	}
}
