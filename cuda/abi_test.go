package cuda

import (
	"testing"
	"unsafe"
)

func uintptrOf[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }

// TestABISizes pins the sizes of structs shared with C to the headers.
func TestABISizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"cublasLtMatmulAlgo_t", unsafe.Sizeof(MatmulAlgo{}), 64},
		{"cublasLtMatmulHeuristicResult_t", unsafe.Sizeof(HeuristicResult{}), 96},
		{"ncclUniqueId", unsafe.Sizeof(UniqueID{}), 128},
		{"HeuristicResult.WorkspaceSize offset", unsafe.Offsetof(HeuristicResult{}.WorkspaceSize), 64},
		{"HeuristicResult.State offset", unsafe.Offsetof(HeuristicResult{}.State), 72},
		{"HeuristicResult.WavesCount offset", unsafe.Offsetof(HeuristicResult{}.WavesCount), 76},
		{"CUmemLocation", unsafe.Sizeof(memLocation{}), 8},
		{"CUmemAllocationProp", unsafe.Sizeof(MemAllocationProp{}), 32},
		{"CUmemAllocationProp.location offset", unsafe.Offsetof(MemAllocationProp{}.Location), 8},
		{"CUmemAllocationProp.win32HandleMetaData offset", unsafe.Offsetof(MemAllocationProp{}.Win32HandleMetaData), 16},
		{"CUmemAllocationProp.allocFlags offset", unsafe.Offsetof(MemAllocationProp{}.AllocFlags), 24},
		{"CUmemAccessDesc", unsafe.Sizeof(MemAccessDesc{}), 12},
		{"CUmemAccessDesc.flags offset", unsafe.Offsetof(MemAccessDesc{}.Flags), 8},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestArgsCloneOwnsItsValues: a clone appends the same bytes as its source,
// tensor maps included, and keeps them when the source is reused.
func TestArgsCloneOwnsItsValues(t *testing.T) {
	m := NewTensorMap()
	for i := range m.buf {
		m.buf[i] = uint64(i) * 0x0101010101010101
	}
	a := NewArgs().Ptr(0x1000).I32(-3).TensorMap(m).F32(1.5)
	want := a.AppendBytes(nil)
	if len(want) != 3*8+128 {
		t.Fatalf("AppendBytes gave %d bytes for three values and a tensor map, want %d", len(want), 3*8+128)
	}
	c := a.Clone()
	a.Reset().I32(7)
	clear(m.buf[:])
	if got := c.AppendBytes(nil); string(got) != string(want) {
		t.Fatalf("clone's bytes changed with its source:\n got %x\nwant %x", got, want)
	}
	for i := range c.n {
		if c.ptrs[i] == nil {
			t.Fatalf("clone's argument %d has no pointer", i)
		}
	}
}
