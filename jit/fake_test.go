package jit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"dflash/cuda"
)

// fakeCompiler "compiles" by hashing the source into a deterministic image.
// Code containing "#error" fails with an NVRTC-style log pointing at the
// line of the first "#error".
type fakeCompiler struct {
	version string
	delay   time.Duration
	size    int    // image size in bytes
	log     string // the log of a successful compile
	calls   atomic.Int64
	mu      sync.Mutex
	perCode map[string]int
}

func newFake(delay time.Duration) *fakeCompiler {
	return &fakeCompiler{version: "fake 1.0", delay: delay, size: 4096, log: "fake: ok", perCode: map[string]int{}}
}

func (f *fakeCompiler) Version() string { return f.version }

func (f *fakeCompiler) Compile(ctx context.Context, src Source) ([]byte, string, error) {
	f.calls.Add(1)
	f.mu.Lock()
	f.perCode[src.Code+"|"+strings.Join(src.Options, " ")+"|"+src.Arch]++
	f.mu.Unlock()
	time.Sleep(f.delay)
	for i, line := range strings.Split(src.Code, "\n") {
		if strings.Contains(line, "#error") {
			log := fmt.Sprintf("%s(%d): error: #error directive: %q\n\n1 error detected in the compilation of \"%s\".",
				src.ProgramName(), i+1, strings.TrimSpace(line), src.ProgramName())
			return nil, log, &cuda.Error{Call: "nvrtcCompileProgram", Lib: "nvrtc", Code: 6, Name: "NVRTC_ERROR_COMPILATION"}
		}
	}
	return fakeImage(src, f.size), f.log, nil
}

// fakeImage is the image the fake compiler makes for src: the expected
// value every test compares against.
func fakeImage(src Source, size int) []byte {
	// %q of each part keeps different option lists apart whatever bytes they hold.
	seed := sha256.Sum256(fmt.Appendf(nil, "%q %q %q", src.Code, src.Options, src.Arch))
	out := make([]byte, 0, size)
	out = append(out, "FAKECUBIN"...)
	for len(out) < size {
		seed = sha256.Sum256(seed[:])
		out = append(out, seed[:]...)
	}
	return out[:size]
}

// src returns a distinct, valid source for index i of a family.
func src(family string, i int) Source {
	return Source{Family: family, Arch: "sm_90", Options: []string{fmt.Sprintf("-DVARIANT=%d", i)},
		Code:   fmt.Sprintf("extern \"C\" __global__ void k%d(float* x) { x[0] = %d; }\n", i, i),
		Params: map[string]string{"variant": fmt.Sprint(i)}}
}

// fakeLoader is a device context that counts loads.
type fakeLoader struct {
	id        string
	loads     atomic.Int64
	lookups   atomic.Int64
	unloads   atomic.Int64
	failLoads bool
}

func (l *fakeLoader) LoaderID() string { return l.id }

func (l *fakeLoader) LoadModule(image []byte) (cuda.Module, error) {
	n := l.loads.Add(1)
	if l.failLoads {
		return 0, errors.New("cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE")
	}
	if !bytes.HasPrefix(image, []byte("FAKECUBIN")) {
		return 0, fmt.Errorf("not a fake image")
	}
	return cuda.Module(1000*len(l.id) + int(n)), nil
}

func (l *fakeLoader) ModuleFunction(m cuda.Module, name string) (cuda.Function, error) {
	l.lookups.Add(1)
	return cuda.Function(uintptr(m)*1000 + uintptr(len(name))), nil
}

func (l *fakeLoader) UnloadModule(m cuda.Module) error {
	l.unloads.Add(1)
	return nil
}
