package cuda

// The NCCL environment guard: NVLink multicast stays off in every process
// that loads NCCL (library.load runs GuardMulticast before opening it).

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"
)

// Setting is an environment variable and the one value that keeps NVLink
// multicast off for the library that reads it.
type Setting struct {
	Name  string
	Value string
	Why   string
}

// MulticastOff lists the variables GuardMulticast enforces, in the order
// it reports them.
var MulticastOff = []Setting{
	{"NCCL_NVLS_ENABLE", "0", "NCCL's NVLink SHARP (NVLS) algorithms create multicast objects"},
	{"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", "PyTorch symmetric memory uses multicast unless disabled"},
	{"NVSHMEM_DISABLE_NVLS", "1", "NVSHMEM's NVLS collectives create multicast objects"},
}

// ErrMulticastEnabled is matched (errors.Is) by the error GuardMulticast
// returns when the environment asks for NVLink multicast.
var ErrMulticastEnabled = errors.New("NVLink multicast must stay off")

// EnvError lists the variables that ask for NVLink multicast.
type EnvError struct {
	Bad []string // one line per variable: NAME=value and what it must be
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("nccl environment: %v (it can put a shared host's GPUs out of service): %s",
		ErrMulticastEnabled, strings.Join(e.Bad, "; "))
}

// Unwrap lets errors.Is match ErrMulticastEnabled.
func (e *EnvError) Unwrap() error { return ErrMulticastEnabled }

// GuardMulticast keeps NVLink multicast off in this process and its
// children: it sets each variable of MulticastOff that is unset or empty,
// keeps those already at their safe value, and returns an *EnvError,
// setting nothing, when any is set to another value or NCCL_ALGO names the
// NVLS algorithms. It returns the names it set. Call it before any NCCL
// call (NCCL reads its variables once, at its first use).
func GuardMulticast() (set []string, err error) {
	return guard(os.LookupEnv, os.Setenv)
}

// guard is GuardMulticast with the environment passed in (tests).
func guard(lookup func(string) (string, bool), setenv func(k, v string) error) ([]string, error) {
	var bad []string
	var missing []Setting
	for _, s := range MulticastOff {
		v, _ := lookup(s.Name)
		switch v {
		case s.Value:
		case "":
			missing = append(missing, s)
		default:
			bad = append(bad, fmt.Sprintf("%s=%q must be %q or unset (%s)", s.Name, v, s.Value, s.Why))
		}
	}
	if v, _ := lookup("NCCL_ALGO"); ncclAlgoWantsNVLS(v) {
		bad = append(bad, fmt.Sprintf("NCCL_ALGO=%q names an NVLS algorithm (NVLink multicast); leave NVLS and NVLSTree out", v))
	}
	if len(bad) > 0 {
		return nil, &EnvError{Bad: bad}
	}
	var set []string
	for _, s := range missing {
		if err := setenv(s.Name, s.Value); err != nil {
			return nil, fmt.Errorf("nccl environment: set %s=%s: %w", s.Name, s.Value, err)
		}
		set = append(set, s.Name)
	}
	return set, nil
}

// ncclAlgoWantsNVLS reports whether an NCCL_ALGO value selects NVLS or
// NVLSTree. The value is a comma-separated list, or one per collective
// ("allreduce:ring,tree;broadcast:ring"); a list that starts with ^ names
// algorithms to exclude.
func ncclAlgoWantsNVLS(v string) bool {
	for _, part := range strings.Split(v, ";") {
		if i := strings.IndexByte(part, ':'); i >= 0 {
			part = part[i+1:]
		}
		part = strings.TrimSpace(part)
		if strings.HasPrefix(part, "^") {
			continue
		}
		for _, a := range strings.Split(part, ",") {
			switch strings.ToLower(strings.TrimSpace(a)) {
			case "nvls", "nvlstree":
				return true
			}
		}
	}
	return false
}

// MulticastEnv returns NAME=value for each variable of MulticastOff, for
// the environment of a child process started with an environment of its own.
func MulticastEnv() []string {
	out := make([]string, len(MulticastOff))
	for i, s := range MulticastOff {
		out[i] = s.Name + "=" + s.Value
	}
	return out
}

// CheckCEnv reads every variable of MulticastOff back from the C library's
// environment (what NCCL's getenv sees) and returns an error naming any that
// does not hold its safe value there. Call it after GuardMulticast.
func CheckCEnv() error {
	var bad []string
	for _, s := range MulticastOff {
		v, ok, err := CEnv(s.Name)
		if err != nil {
			return err
		}
		if !ok || v != s.Value {
			bad = append(bad, fmt.Sprintf("%s=%q in the C environment, want %q", s.Name, v, s.Value))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("nccl environment: the C library does not see the multicast guard: %s", strings.Join(bad, "; "))
	}
	return nil
}

var pGetenv = newFreeProc(libC, "getenv")

// CEnv returns the value of name in the C library's environment, read with
// libc's getenv: what NCCL and the CUDA libraries see, as opposed to Go's
// own copy of the environment. libc is opened by the same loader as the
// CUDA libraries.
func CEnv(name string) (value string, ok bool, err error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", false, fmt.Errorf("cuda: C environment variable name %q holds a NUL byte", name)
	}
	b := cStr(name)
	p, err := pGetenv.invoke(uintptr(unsafe.Pointer(&b[0])))
	if err != nil {
		return "", false, fmt.Errorf("cuda: read the C environment: %w", err)
	}
	if p == 0 {
		return "", false, nil
	}
	return cString(p), true, nil
}
