package jit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"dflash/cuda"
)

// NVRTC compiles with NVIDIA's runtime compiler through package cuda.
type NVRTC struct {
	version  string
	includes []string
}

// NewNVRTC loads NVRTC and returns a compiler for it. CUDA header folders
// found beside the toolkit ($CUDA_HOME/include, /usr/local/cuda/include, the
// folder next to NVRTC's lib) are added as include paths.
func NewNVRTC() (*NVRTC, error) {
	ma, mi, err := cuda.NVRTCVersion()
	if err != nil {
		return nil, fmt.Errorf("jit: %w", err)
	}
	n := &NVRTC{version: fmt.Sprintf("nvrtc %d.%d", ma, mi)}
	var dirs []string
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if r := os.Getenv(v); r != "" {
			dirs = append(dirs, filepath.Join(r, "include"))
		}
	}
	if lib, err := cuda.LibraryDir("nvrtc"); err == nil && lib != "" {
		dirs = append(dirs, filepath.Join(lib, "..", "include"))
	}
	dirs = append(dirs, "/usr/local/cuda/include")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "cuda_bf16.h")); err == nil {
			n.includes = append(n.includes, "-I"+filepath.Clean(d))
			break
		}
	}
	return n, nil
}

// Version returns "nvrtc MAJOR.MINOR".
func (n *NVRTC) Version() string { return n.version }

// Compile compiles src to CUBIN for an sm_XX arch (PTX for compute_XX).
func (n *NVRTC) Compile(ctx context.Context, src Source) ([]byte, string, error) {
	opts := make([]string, 0, 1+len(n.includes)+len(src.Options))
	opts = append(opts, "--gpu-architecture="+src.Arch)
	opts = append(opts, n.includes...)
	opts = append(opts, src.Options...)
	out, err := cuda.Compile(src.Code, src.ProgramName(), opts)
	return out.Image, out.Log, err
}

// NewNVRTCCache loads NVRTC and returns a kernel cache compiling with it,
// on disk in dir ("" keeps it in memory only).
func NewNVRTCCache(dir string) (*Cache, error) {
	nv, err := NewNVRTC()
	if err != nil {
		return nil, err
	}
	return New(Config{Compiler: nv, Dir: dir})
}
