package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/ebitengine/purego"

	"dflash/internal/switches"
)

// ErrLibraryNotFound is matched (errors.Is) by every error that reports a
// shared library which could not be found or opened.
var ErrLibraryNotFound = errors.New("shared library not found")

// LibraryError reports a library that could not be loaded and every place
// searched for it.
type LibraryError struct {
	Library  string   // short name: cuda, nvrtc, cublasLt, nccl
	Searched []string // one line per place tried, with the outcome
}

func (e *LibraryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s library not found; searched:", e.Library)
	for _, s := range e.Searched {
		b.WriteString("\n  ")
		b.WriteString(s)
	}
	return b.String()
}

// Unwrap lets errors.Is match ErrLibraryNotFound.
func (e *LibraryError) Unwrap() error { return ErrLibraryNotFound }

// library describes one shared library and, once loaded, its handle.
type library struct {
	name     string           // short name
	override *switches.String // the variable naming the file; nil for none
	sonames  []string         // preferred file names, best first
	glob     string           // file-name pattern for any other version, e.g. libnvrtc.so.*
	pyGlob   []string         // folders under site-packages/nvidia holding it

	once   sync.Once
	handle uintptr
	path   string // file opened
	how    string // which search step found it
	err    error
}

var (
	libCUDA = &library{name: "cuda", override: switches.LibCUDA,
		sonames: []string{"libcuda.so.1", "libcuda.so"}, glob: "libcuda.so*"}
	libNVRTC = &library{name: "nvrtc", override: switches.LibNVRTC,
		sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}, glob: "libnvrtc.so.*",
		pyGlob: []string{"cu13", "cuda_nvrtc", "*"}}
	libCublasLt = &library{name: "cublasLt", override: switches.LibCublasLt,
		sonames: []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}, glob: "libcublasLt.so.*",
		pyGlob: []string{"cu13", "cublas", "*"}}
	libNCCL = &library{name: "nccl", override: switches.LibNCCL,
		sonames: []string{"libnccl.so.2", "libnccl.so"}, glob: "libnccl.so*",
		pyGlob: []string{"cu13", "nccl", "*"}}
	// libC is the C library, for its environment (CEnv); no override.
	libC = &library{name: "c", sonames: []string{"libc.so.6"}, glob: "libc.so.6"}
)

// opener opens a shared library by path or bare name; replaced in tests.
type opener func(path string) (uintptr, error)

func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// load opens the library once per process.
// NCCL is opened only after GuardMulticast has turned NVLink multicast
// off in this process's environment (NCCL reads it at initialisation).
func (l *library) load() (uintptr, error) {
	l.once.Do(func() {
		if l == libNCCL {
			if _, err := GuardMulticast(); err != nil {
				l.err = fmt.Errorf("load nccl: %w", err)
				return
			}
		}
		l.handle, l.path, l.how, l.err = l.find(dlopen, l.overridePath(), os.Getenv, globDirs)
	})
	return l.handle, l.err
}

// overridePath returns the file the library's override switch names ("" when
// unset or when the library has none).
func (l *library) overridePath() string {
	if l.override == nil {
		return ""
	}
	return l.override.Value()
}

// find runs the search described in the package documentation: the file
// override names (the value of l.override) when not empty, else the other
// places, with getenv for CUDA_HOME, HOME and the like.
func (l *library) find(open opener, override string, getenv func(string) string, glob func(string) []string) (h uintptr, path, how string, err error) {
	var searched []string
	if l.override != nil {
		env := l.override.Name
		if override != "" {
			h, err := open(override)
			if err == nil {
				return h, override, "env " + env, nil
			}
			return 0, "", "", &LibraryError{Library: l.name,
				Searched: []string{fmt.Sprintf("$%s=%s: %v (the variable is set, so no other place is tried)", env, override, err)}}
		}
		searched = append(searched, fmt.Sprintf("$%s: not set", env))
	}
	for _, so := range l.sonames {
		h, err := open(so)
		if err == nil {
			return h, resolveLoaded(so), "loader path", nil
		}
		searched = append(searched, fmt.Sprintf("loader path (LD_LIBRARY_PATH, ld.so.cache) %s: %v", so, err))
	}
	tryDir := func(dir, how string) (uintptr, string, bool) {
		for _, f := range l.candidates(dir, glob) {
			h, err := open(f)
			if err == nil {
				return h, f, true
			}
			searched = append(searched, fmt.Sprintf("%s %s: %v", how, f, err))
		}
		return 0, "", false
	}
	var missing []string
	for _, dir := range knownDirs(getenv, glob) {
		before := len(searched)
		if h, f, ok := tryDir(dir, "folder"); ok {
			return h, f, "folder " + dir, nil
		}
		if len(searched) == before {
			missing = append(missing, dir)
		}
	}
	if len(missing) > 0 {
		searched = append(searched, fmt.Sprintf("folders with no %s: %s", l.glob, strings.Join(missing, ", ")))
	}
	missing = missing[:0]
	prefixes := pythonPrefixes(getenv, glob)
	for _, sp := range prefixes {
		for _, pat := range l.pyGlob {
			for _, dir := range glob(filepath.Join(sp, "nvidia", pat, "lib")) {
				before := len(searched)
				if h, f, ok := tryDir(dir, "python wheel"); ok {
					return h, f, "python " + dir, nil
				}
				if len(searched) == before {
					missing = append(missing, dir)
				}
			}
		}
	}
	if len(prefixes) == 0 {
		searched = append(searched, "python site-packages: none found")
	} else {
		searched = append(searched, fmt.Sprintf("python site-packages searched for nvidia/*/lib: %s", strings.Join(prefixes, ", ")))
	}
	return 0, "", "", &LibraryError{Library: l.name, Searched: searched}
}

// resolveLoaded maps a bare library name to the file loaded for it
// (replaced in tests).
var resolveLoaded = loadedPath

// loadedPath returns the file the dynamic loader mapped for the bare name
// so (read from /proc/self/maps), or so itself when it cannot tell.
func loadedPath(so string) string {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return so
	}
	stem := strings.TrimRight(strings.SplitN(so, ".so", 2)[0], ".") + ".so"
	for _, line := range strings.Split(string(maps), "\n") {
		i := strings.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		p := line[i:]
		if strings.HasPrefix(filepath.Base(p), stem) {
			return p
		}
	}
	return so
}

// candidates lists the files in dir that may be this library, preferred
// names first, then other versions found by glob (highest version first).
func (l *library) candidates(dir string, glob func(string) []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, so := range l.sonames {
		p := filepath.Join(dir, so)
		if len(glob(p)) > 0 && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	more := glob(filepath.Join(dir, l.glob))
	sort.Sort(sort.Reverse(sort.StringSlice(more)))
	for _, p := range more {
		if !seen[p] && !strings.Contains(filepath.Base(p), "stub") {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// globDirs is filepath.Glob without the error (patterns are constant).
func globDirs(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

// knownDirs lists the CUDA folders searched after the loader path.
func knownDirs(getenv func(string) string, glob func(string) []string) []string {
	var dirs []string
	add := func(d ...string) {
		for _, x := range d {
			if x != "" && !contains(dirs, x) {
				dirs = append(dirs, x)
			}
		}
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"} {
		if root := getenv(v); root != "" {
			add(filepath.Join(root, "lib64"), filepath.Join(root, "lib"))
		}
	}
	add("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
	versioned := glob("/usr/local/cuda-*/lib64")
	sort.Sort(sort.Reverse(sort.StringSlice(versioned)))
	add(versioned...)
	add("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
		"/usr/lib/wsl/lib", "/opt/cuda/lib64")
	return dirs
}

// pythonPrefixes lists existing site-packages folders.
func pythonPrefixes(getenv func(string) string, glob func(string) []string) []string {
	roots := []string{"/usr/lib", "/usr/local/lib", "/opt/conda/lib", "/opt/*/.venv/lib", "/opt/*/lib"}
	if h := getenv("HOME"); h != "" {
		roots = append(roots, filepath.Join(h, ".local/lib"))
	}
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := getenv(v); p != "" {
			roots = append([]string{filepath.Join(p, "lib")}, roots...)
		}
	}
	var out []string
	for _, r := range roots {
		for _, kind := range []string{"site-packages", "dist-packages"} {
			for _, d := range glob(filepath.Join(r, "python3*", kind)) {
				if !contains(out, d) {
					out = append(out, d)
				}
			}
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// LibraryStatus reports where one library was found, or why not.
type LibraryStatus struct {
	Name    string // cuda, nvrtc, cublasLt, nccl
	Env     string // override variable
	Path    string // file opened; empty when not found
	How     string // search step that found it
	Version string // library version when found and queryable
	Err     error  // why it was not found or its version failed
}

// Libraries loads (if not yet loaded) all four libraries and reports each.
func Libraries() []LibraryStatus {
	var out []LibraryStatus
	for _, l := range []*library{libCUDA, libNVRTC, libCublasLt, libNCCL} {
		_, err := l.load()
		s := LibraryStatus{Name: l.name, Env: l.override.Name, Path: l.path, How: l.how, Err: err}
		if err == nil {
			s.Version, s.Err = libVersion(l)
		}
		out = append(out, s)
	}
	return out
}

func libVersion(l *library) (string, error) {
	switch l {
	case libCUDA:
		v, err := DriverVersion()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d.%d", v/1000, v%1000/10), nil
	case libNVRTC:
		ma, mi, err := NVRTCVersion()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d.%d", ma, mi), nil
	case libCublasLt:
		v, err := CublasLtVersion()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100), nil
	case libNCCL:
		v, err := NCCLVersion()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100), nil
	}
	return "", nil
}

// LibraryDir returns the folder the named library ("cuda", "nvrtc",
// "cublasLt", "nccl") was loaded from, loading it if needed.
func LibraryDir(name string) (string, error) {
	for _, l := range []*library{libCUDA, libNVRTC, libCublasLt, libNCCL} {
		if l.name == name {
			if _, err := l.load(); err != nil {
				return "", err
			}
			if !strings.Contains(l.path, "/") {
				return "", nil // found by the loader under its bare name
			}
			return filepath.Dir(l.path), nil
		}
	}
	return "", fmt.Errorf("cuda: unknown library %q", name)
}
