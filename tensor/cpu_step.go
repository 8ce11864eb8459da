package tensor

import (
	"encoding/binary"
	"math"

	"dflash/dtype"
)

// The CPU's part of the step-memory, output-allocation, kept-table,
// chunking, replay and parameter-placement contract of Backend: the
// garbage collector owns host memory, so the step methods do nothing and
// the rest are the plain allocations.

// ResetStep does nothing: host memory is the garbage collector's.
func (c *CPU[T]) ResetStep() {}

// MarkStep returns the zero StepMark.
func (c *CPU[T]) MarkStep() StepMark { return StepMark{} }

// ReleaseStep does nothing.
func (c *CPU[T]) ReleaseStep(StepMark) {}

// FreeStep does nothing.
func (c *CPU[T]) FreeStep(Storage[T]) {}

// FreesStep returns false: FreeStep gives nothing back.
func (c *CPU[T]) FreesStep() bool { return false }

// AllocOut returns n zero elements of host memory (Alloc).
func (c *CPU[T]) AllocOut(n int) Storage[T] { return c.Alloc(n) }

// AllocStatOut returns n zero elements of host memory (AllocStat).
func (c *CPU[T]) AllocStatOut(n int) Storage[T] { return c.AllocStat(n) }

// KeepStat returns a copy of x in host memory (Upload).
func (c *CPU[T]) KeepStat(x []T) Storage[T] { return c.Upload(x, true) }

// XentChunk returns DefaultXentChunk.
func (c *CPU[T]) XentChunk() int { return DefaultXentChunk }

// Replay runs fn and returns "".
func (c *CPU[T]) Replay(key any, fn func()) string {
	fn()
	return ""
}

// AllocParams returns n zero elements of host memory as both the master
// and the compute copy, master or not.
func (c *CPU[T]) AllocParams(n int, master bool) (values, compute Storage[T]) {
	h := make(Host[T], n)
	return h, h
}

// WriteParams copies host into dst.
func (c *CPU[T]) WriteParams(dst Storage[T], host []T) {
	d := HostData(dst, "WriteParams destination")
	checkLen("WriteParams", len(host), len(d))
	copy(d, host)
}

// WriteParamBytes decodes raw (elements of dt) into dst.
func (c *CPU[T]) WriteParamBytes(dst Storage[T], dt dtype.DType, raw []byte) {
	d := HostData(dst, "WriteParamBytes destination")
	checkLen("WriteParamBytes", len(raw), len(d)*dt.Size())
	decodeInto(d, dt, raw)
}

// decodeInto sets dst to the values of raw, elements of dt, by value:
// through dtype.DecodeFloat32 but for F64 into float64, taken exactly.
func decodeInto[T Float](dst []T, dt dtype.DType, raw []byte) {
	switch d := any(dst).(type) {
	case []float32:
		dtype.DecodeFloat32(dt, d, raw)
	case []float64:
		if dt == dtype.F64 {
			for i := range d {
				d[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
			}
			return
		}
		f := make([]float32, len(d))
		dtype.DecodeFloat32(dt, f, raw)
		for i, v := range f {
			d[i] = float64(v)
		}
	}
}

// HostParams returns true.
func (c *CPU[T]) HostParams() bool { return true }
