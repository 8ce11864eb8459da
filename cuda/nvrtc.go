package cuda

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// nvrtc calls an NVRTC function and converts its nvrtcResult.
//
//go:uintptrescapes
func nvrtc(p *proc, args ...uintptr) error {
	code, err := p.status(args...)
	if code == 0 {
		return err
	}
	name := fmt.Sprintf("nvrtcResult %d", code)
	if s, err := pNvrtcGetErrorString.invoke(uintptr(code)); err == nil && s != 0 {
		name = cString(s)
	}
	return &Error{Call: p.name, Lib: "nvrtc", Code: int(code), Name: name}
}

// NVRTCVersion returns NVRTC's major and minor version.
func NVRTCVersion() (major, minor int, err error) {
	var ma, mi int32
	err = nvrtc(pNvrtcVersion, uintptr(unsafe.Pointer(&ma)), uintptr(unsafe.Pointer(&mi)))
	return int(ma), int(mi), err
}

// CompileOutput is the result of one NVRTC compilation.
type CompileOutput struct {
	Image []byte // CUBIN for a real architecture (sm_XX), else PTX (NUL-terminated)
	CUBIN bool   // whether Image is CUBIN
	Log   string // the compiler's log (warnings; errors when compilation failed)
}

// Compile compiles CUDA C++ src with NVRTC. name is the program's file name
// in diagnostics (e.g. "flex_fwd.cu"). options are NVRTC options, e.g.
// "--gpu-architecture=sm_90", "-std=c++17". When compilation fails the log is
// returned in out.Log with an error matching ErrNVRTCCompile.
func Compile(src, name string, options []string) (out CompileOutput, err error) {
	var prog uintptr
	csrc, cname := cStr(src), cStr(name)
	if err := nvrtc(pNvrtcCreateProgram, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); err != nil {
		return out, err
	}
	defer func() {
		if derr := nvrtc(pNvrtcDestroyProgram, uintptr(unsafe.Pointer(&prog))); derr != nil && err == nil {
			err = derr
		}
	}()

	var pin runtime.Pinner
	defer pin.Unpin()
	opts := make([]*byte, len(options)+1) // +1 keeps &opts[0] valid with no options
	for i, o := range options {
		b := cStr(o)
		pin.Pin(&b[0])
		opts[i] = &b[0]
	}
	cerr := nvrtc(pNvrtcCompileProgram, prog, uintptr(len(options)), uintptr(unsafe.Pointer(&opts[0])))

	var logSize uint64
	if err := nvrtc(pNvrtcGetProgramLogSz, prog, uintptr(unsafe.Pointer(&logSize))); err != nil {
		return out, err
	}
	if logSize > 1 {
		buf := make([]byte, logSize)
		if err := nvrtc(pNvrtcGetProgramLog, prog, uintptr(unsafe.Pointer(&buf[0]))); err != nil {
			return out, err
		}
		out.Log = strings.TrimRight(string(buf[:logSize-1]), "\x00\n")
	}
	if cerr != nil {
		return out, cerr
	}

	realArch := false
	for _, o := range options {
		if v, ok := archOption(o); ok && strings.HasPrefix(v, "sm_") {
			realArch = true
		}
	}
	sizeP, getP := pNvrtcGetPTXSize, pNvrtcGetPTX
	if realArch {
		sizeP, getP = pNvrtcGetCUBINSize, pNvrtcGetCUBIN
		out.CUBIN = true
	}
	var n uint64
	if err := nvrtc(sizeP, prog, uintptr(unsafe.Pointer(&n))); err != nil {
		return out, err
	}
	if n == 0 {
		return out, fmt.Errorf("%s: empty image", getP.name)
	}
	out.Image = make([]byte, n)
	if err := nvrtc(getP, prog, uintptr(unsafe.Pointer(&out.Image[0]))); err != nil {
		return out, err
	}
	return out, nil
}

// archOption returns the value of an -arch / --gpu-architecture option.
func archOption(o string) (string, bool) {
	for _, p := range []string{"--gpu-architecture=", "-arch=", "--gpu-architecture ", "-arch "} {
		if strings.HasPrefix(o, p) {
			return strings.TrimSpace(o[len(p):]), true
		}
	}
	return "", false
}
