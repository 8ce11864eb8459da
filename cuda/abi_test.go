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
