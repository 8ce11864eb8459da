package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"dflash/internal/switches"
)

// fakeFS answers globs and opens over a fixed set of files.
type fakeFS struct {
	files  map[string]bool // path -> opens successfully
	opened []string
}

func (f *fakeFS) open(p string) (uintptr, error) {
	f.opened = append(f.opened, p)
	if ok, exists := f.files[p]; exists && ok {
		return 42, nil
	}
	if _, exists := f.files[p]; exists {
		return 0, fmt.Errorf("%s: wrong ELF class", p)
	}
	return 0, fmt.Errorf("%s: cannot open shared object file", p)
}

func (f *fakeFS) glob(pat string) []string {
	var out []string
	for p := range f.files {
		if ok, _ := filepath.Match(pat, p); ok {
			out = append(out, p)
		}
	}
	// directory patterns: report folders that hold any file
	for p := range f.files {
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			if ok, _ := filepath.Match(pat, d); ok && !contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestFindOrder(t *testing.T) {
	defer func(f func(string) string) { resolveLoaded = f }(resolveLoaded)
	resolveLoaded = func(so string) string { return so }
	nvrtc := &library{name: "nvrtc", override: switches.LibNVRTC,
		sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12"}, glob: "libnvrtc.so.*", pyGlob: []string{"*"}}
	cases := []struct {
		name     string
		files    map[string]bool
		env      map[string]string
		wantPath string
		wantHow  string
	}{
		{"env override wins", map[string]bool{"/x/libnvrtc.so.13": true, "/usr/local/cuda/lib64/libnvrtc.so.13": true},
			map[string]string{"DFLASH_LIBNVRTC": "/x/libnvrtc.so.13"}, "/x/libnvrtc.so.13", "env DFLASH_LIBNVRTC"},
		{"loader path by soname", map[string]bool{"libnvrtc.so.12": true, "/usr/local/cuda/lib64/libnvrtc.so.13": true},
			nil, "libnvrtc.so.12", "loader path"},
		{"CUDA_HOME before /usr/local/cuda", map[string]bool{"/opt/ct/lib64/libnvrtc.so.13": true, "/usr/local/cuda/lib64/libnvrtc.so.13": true},
			map[string]string{"CUDA_HOME": "/opt/ct"}, "/opt/ct/lib64/libnvrtc.so.13", "folder /opt/ct/lib64"},
		{"preferred soname before other versions", map[string]bool{"/usr/local/cuda/lib64/libnvrtc.so.13": true, "/usr/local/cuda/lib64/libnvrtc.so.13.0.48": true},
			nil, "/usr/local/cuda/lib64/libnvrtc.so.13", "folder /usr/local/cuda/lib64"},
		{"broken file skipped", map[string]bool{"/usr/local/cuda/lib64/libnvrtc.so.13": false, "/usr/local/cuda-12.8/lib64/libnvrtc.so.12": true},
			nil, "/usr/local/cuda-12.8/lib64/libnvrtc.so.12", "folder /usr/local/cuda-12.8/lib64"},
		{"python wheel", map[string]bool{"/usr/local/lib/python3.12/dist-packages/nvidia/cu13/lib/libnvrtc.so.13": true},
			nil, "/usr/local/lib/python3.12/dist-packages/nvidia/cu13/lib/libnvrtc.so.13", "python /usr/local/lib/python3.12/dist-packages/nvidia/cu13/lib"},
		{"virtualenv wheel", map[string]bool{"/venv/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12": true},
			map[string]string{"VIRTUAL_ENV": "/venv"}, "/venv/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12", "python /venv/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := &fakeFS{files: c.files}
			h, path, how, err := nvrtc.find(fs.open, c.env["DFLASH_LIBNVRTC"], env(c.env), fs.glob)
			if err != nil {
				t.Fatalf("find: %v (opened %v)", err, fs.opened)
			}
			if h != 42 || path != c.wantPath || how != c.wantHow {
				t.Errorf("find = (%d, %q, %q), want (42, %q, %q)", h, path, how, c.wantPath, c.wantHow)
			}
		})
	}
}

func TestFindEnvOverrideDoesNotFallBack(t *testing.T) {
	fs := &fakeFS{files: map[string]bool{"libcuda.so.1": true}}
	_, _, _, err := libCUDA.find(fs.open, "/nope/libcuda.so.1", env(nil), fs.glob)
	if !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("err = %v, want ErrLibraryNotFound", err)
	}
	if !strings.Contains(err.Error(), "$DFLASH_LIBCUDA=/nope/libcuda.so.1") {
		t.Errorf("error does not name the override: %v", err)
	}
	if len(fs.opened) != 1 {
		t.Errorf("tried %v after a failing override, want only the override", fs.opened)
	}
}

func TestFindNothingListsEveryPlace(t *testing.T) {
	fs := &fakeFS{files: map[string]bool{"/usr/lib/python3.12/site-packages/nvidia/nccl/lib/README": true}}
	_, _, _, err := libNCCL.find(fs.open, "", env(map[string]string{"CUDA_HOME": "/ct"}), fs.glob)
	var le *LibraryError
	if !errors.As(err, &le) || !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("err = %v, want *LibraryError", err)
	}
	msg := err.Error()
	for _, want := range []string{"$DFLASH_LIBNCCL: not set", "loader path", "libnccl.so.2", "/ct/lib64",
		"/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu", "python site-packages", "/usr/lib/python3.12/site-packages"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

func TestErrorFormatAndIs(t *testing.T) {
	e := &Error{Call: "cuMemAlloc_v2", Lib: "cuda", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"}
	if got, want := e.Error(), "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("alloc 1 GiB: %w", e)
	if !errors.Is(wrapped, ErrOutOfMemory) {
		t.Error("errors.Is(wrapped, ErrOutOfMemory) = false")
	}
	if errors.Is(wrapped, ErrInvalidContext) {
		t.Error("errors.Is(OOM, ErrInvalidContext) = true")
	}
	n := &Error{Call: "nvrtcCompileProgram", Lib: "nvrtc", Code: 6, Name: "NVRTC_ERROR_COMPILATION"}
	if !errors.Is(n, ErrNVRTCCompile) || errors.Is(n, ErrOutOfMemory) {
		t.Error("nvrtc error matched the wrong sentinel")
	}
	if got := n.Error(); got != "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION" {
		t.Errorf("Error() = %q", got)
	}
}

func TestMissingLibraryErrorNamesCall(t *testing.T) {
	l := &library{name: "none", sonames: []string{"libdflash-none.so.9"}, glob: "libdflash-none.so*"}
	p := newProc(l, "noneCall")
	_, err := p.invoke()
	if !errors.Is(err, ErrLibraryNotFound) || !strings.HasPrefix(err.Error(), "noneCall: none library not found") {
		t.Fatalf("err = %v", err)
	}
}

func TestArgs(t *testing.T) {
	a := NewArgs().Ptr(0x1000).I32(-3).F32(1.5).U32(7).I64(-1 << 40).F64(2.25)
	if a.Len() != 6 {
		t.Fatalf("Len = %d", a.Len())
	}
	want := []uint64{0x1000, 0xfffffffd, 0x3fc00000, 7, uint64(0xffffff0000000000), 0x4002000000000000}
	for i, w := range want {
		if a.vals[i] != w {
			t.Errorf("arg %d = %#x, want %#x", i, a.vals[i], w)
		}
		if uintptr(a.ptrs[i]) != uintptrOf(&a.vals[i]) {
			t.Errorf("ptr %d does not address its slot", i)
		}
	}
	if a.Reset().Len() != 0 {
		t.Error("Reset did not empty")
	}
}

func TestArchOption(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"--gpu-architecture=sm_90", "sm_90"}, {"-arch=compute_90", "compute_90"}, {"-arch sm_90a", "sm_90a"},
	} {
		if got, ok := archOption(c.in); !ok || got != c.want {
			t.Errorf("archOption(%q) = %q, %v", c.in, got, ok)
		}
	}
	if _, ok := archOption("-std=c++17"); ok {
		t.Error("archOption matched -std")
	}
}

// TestTensorMapArgs: a tensor map is 128 bytes at a 64-byte aligned address
// (the driver's requirement), passed by address among 8-byte slots; a
// re-used Args addresses its own slots again after Reset.
func TestTensorMapArgs(t *testing.T) {
	for range 20 { // allocations land at different offsets
		m := NewTensorMap()
		if p := uintptr(m.ptr()); p%64 != 0 || p+128 > uintptrOf(&m.buf[0])+uintptr(len(m.buf))*8 {
			t.Fatalf("tensor map at %#x is not 64-byte aligned inside its buffer", p)
		}
	}
	m := NewTensorMap()
	a := NewArgs().Ptr(1).TensorMap(m).I32(2)
	if a.Len() != 3 || a.ptrs[1] != m.ptr() || uintptr(a.ptrs[2]) != uintptrOf(&a.vals[2]) {
		t.Fatalf("args %d, ptrs %v: want the map's address in slot 1", a.Len(), a.ptrs[:3])
	}
	a.Reset().Ptr(1).I64(3)
	if uintptr(a.ptrs[1]) != uintptrOf(&a.vals[1]) {
		t.Error("slot 1 still addresses the tensor map after Reset")
	}
}

// TestEncodeTiledRefusesBadShapes: shapes the copy engine cannot describe
// are refused, naming what is wrong, before the driver is called.
func TestEncodeTiledRefusesBadShapes(t *testing.T) {
	m := NewTensorMap()
	for _, c := range []struct {
		name          string
		addr          DevicePtr
		dims, strides []uint64
		box           []uint32
		want          string
	}{
		{"strides", 0x1000, []uint64{128, 10, 4}, []uint64{256}, []uint32{64, 128, 1}, "rank 3 with 1 strides"},
		{"box", 0x1000, []uint64{128, 10}, []uint64{256}, []uint32{64}, "1 box sizes"},
		{"rank", 0x1000, nil, nil, nil, "rank 0"},
		{"address", 0x1008, []uint64{128, 10}, []uint64{256}, []uint32{64, 128}, "not 16-byte aligned"},
		{"stride", 0x1000, []uint64{100, 10}, []uint64{200}, []uint32{64, 128}, "stride 200 of dimension 1"},
	} {
		err := EncodeTiled(m, TensorMapBFloat16, c.addr, c.dims, c.strides, c.box, Swizzle128B)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}
