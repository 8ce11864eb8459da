package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestGuardTable(t *testing.T) {
	safe := map[string]string{"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name    string
		env     map[string]string
		wantSet []string
		wantBad []string // substrings of the error; nil means no error
	}{
		{"all unset", with(), []string{"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}, nil},
		{"all safe already", safe, nil, nil},
		{"empty counts as unset", with("NCCL_NVLS_ENABLE", "", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
			[]string{"NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS"}, nil},
		{"NVLS enabled", with("NCCL_NVLS_ENABLE", "1"), nil, []string{`NCCL_NVLS_ENABLE="1" must be "0"`}},
		{"NVLS auto", with("NCCL_NVLS_ENABLE", "2"), nil, []string{`NCCL_NVLS_ENABLE="2"`}},
		{"torch multicast on", with("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0"), nil, []string{`TORCH_SYMM_MEM_DISABLE_MULTICAST="0" must be "1"`}},
		{"unknown spelling refused", with("NVSHMEM_DISABLE_NVLS", "true"), nil, []string{`NVSHMEM_DISABLE_NVLS="true" must be "1"`}},
		{"two bad, both named", with("NCCL_NVLS_ENABLE", "1", "NVSHMEM_DISABLE_NVLS", "0"), nil,
			[]string{"NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS"}},
		{"NCCL_ALGO NVLS", with("NCCL_ALGO", "NVLS"), nil, []string{`NCCL_ALGO="NVLS"`}},
		{"NCCL_ALGO list with NVLSTree", with("NCCL_ALGO", "Ring, nvlstree"), nil, []string{"NCCL_ALGO"}},
		{"NCCL_ALGO per collective", with("NCCL_ALGO", "allreduce:ring;broadcast:NVLS"), nil, []string{"NCCL_ALGO"}},
		{"NCCL_ALGO excluding NVLS", with("NCCL_ALGO", "^NVLS,NVLSTree"), []string{"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}, nil},
		{"NCCL_ALGO per collective excluding", with("NCCL_ALGO", "allreduce:^nvls;broadcast:ring"), []string{"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}, nil},
		{"NCCL_ALGO ring,tree", with("NCCL_ALGO", "ring,tree", "NCCL_NVLS_ENABLE", "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", "NVSHMEM_DISABLE_NVLS", "1"), nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range c.env {
				env[k] = v
			}
			lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
			setenv := func(k, v string) error { env[k] = v; return nil }
			set, err := guard(lookup, setenv)
			if c.wantBad != nil {
				if !errors.Is(err, ErrMulticastEnabled) {
					t.Fatalf("err = %v, want ErrMulticastEnabled", err)
				}
				for _, s := range c.wantBad {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				if !reflect.DeepEqual(env, c.env) {
					t.Errorf("a refused guard changed the environment: %v -> %v", c.env, env)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(set, c.wantSet) {
				t.Errorf("set %v, want %v", set, c.wantSet)
			}
			for k, v := range safe {
				if env[k] != v {
					t.Errorf("after the guard %s=%q, want %q", k, env[k], v)
				}
			}
		})
	}
}

// TestGuardReachesC checks that what GuardMulticast sets is what the C
// library's getenv returns (NCCL reads its variables that way) and what a
// child process inherits.
func TestGuardReachesC(t *testing.T) {
	for _, s := range MulticastOff {
		t.Setenv(s.Name, "") // restored after the test
	}
	t.Setenv("NCCL_ALGO", "")
	if err := CheckCEnv(); err == nil {
		t.Fatal("CheckCEnv passed before the guard ran")
	}
	set, err := GuardMulticast()
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != len(MulticastOff) {
		t.Errorf("set %v, want all %d variables", set, len(MulticastOff))
	}
	if err := CheckCEnv(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DFLASH_CUDA_CENV_PROBE", "x=1 y")
	if v, ok, err := CEnv("DFLASH_CUDA_CENV_PROBE"); err != nil || !ok || v != "x=1 y" {
		t.Errorf("CEnv(probe) = %q, %v, %v", v, ok, err)
	}
	if v, ok, err := CEnv("DFLASH_CUDA_SURELY_UNSET_VARIABLE"); err != nil || ok {
		t.Errorf("CEnv(unset) = %q, %v, %v; want not found", v, ok, err)
	}
	if _, _, err := CEnv("DFLASH_CUDA_CENV_PROBE\x00X"); err == nil {
		t.Error("CEnv accepted a name with a NUL byte (C would read a shorter name)")
	}

	// A child started with the inherited environment sees the guard too.
	cmd := exec.Command(os.Args[0], "-test.run=^TestCEnvChild$", "-test.v")
	cmd.Env = append(os.Environ(), cenvChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, s := range MulticastOff {
		if want := s.Name + "=" + s.Value; !strings.Contains(string(out), want) {
			t.Errorf("child's C environment lacks %s:\n%s", want, out)
		}
	}

	// A user who turned multicast on is refused, and the variable is kept.
	t.Setenv("NCCL_NVLS_ENABLE", "1")
	if _, err := GuardMulticast(); !errors.Is(err, ErrMulticastEnabled) {
		t.Fatalf("guard with NCCL_NVLS_ENABLE=1: err = %v", err)
	}
	if v := os.Getenv("NCCL_NVLS_ENABLE"); v != "1" {
		t.Errorf("refusing guard changed NCCL_NVLS_ENABLE to %q", v)
	}
}

// cenvChildEnv makes TestCEnvChild, run in a child process by
// TestGuardReachesC, print the multicast variables as the C library sees
// them.
const cenvChildEnv = "DFLASH_CUDA_CENV_CHILD"

func TestCEnvChild(t *testing.T) {
	if os.Getenv(cenvChildEnv) == "" {
		t.Skip("runs only as TestGuardReachesC's child process")
	}
	for _, s := range MulticastOff {
		v, ok, err := CEnv(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%s=%s (set %v)\n", s.Name, v, ok)
	}
}

func TestMulticastEnv(t *testing.T) {
	got := MulticastEnv()
	want := []string{"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MulticastEnv() = %v, want %v", got, want)
	}
}

// TestNoMulticastBindings keeps the CUDA bindings free of the multicast
// object API (cuMulticastCreate and friends), which must never be called on
// the shared machines.
func TestNoMulticastBindings(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err == nil && len(files) == 0 {
		// The GPU machine runs the compiled test binary from the repository root.
		files, err = filepath.Glob("cuda/*.go")
	}
	if err != nil || len(files) == 0 {
		t.Fatalf("no cuda sources found: %v", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue // this file names the API it forbids
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "cuMulticast") {
			t.Errorf("%s binds the multicast object API (cuMulticast*)", f)
		}
	}
}

// TestGuardSetenvFails: a variable the guard cannot set is an error naming
// it, and what was set before it is not reported as set.
func TestGuardSetenvFails(t *testing.T) {
	env := map[string]string{"NCCL_NVLS_ENABLE": "0"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	setenv := func(k, v string) error {
		if k == "NVSHMEM_DISABLE_NVLS" {
			return errors.New("read-only environment")
		}
		env[k] = v
		return nil
	}
	set, err := guard(lookup, setenv)
	if err == nil || !strings.Contains(err.Error(), "NVSHMEM_DISABLE_NVLS=1") || !strings.Contains(err.Error(), "read-only environment") {
		t.Fatalf("err = %v, want one naming NVSHMEM_DISABLE_NVLS=1 and the cause", err)
	}
	if set != nil {
		t.Errorf("set = %v on failure, want nil", set)
	}
	if env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] != "1" {
		t.Errorf("the variable before the failing one was not set: %v", env)
	}
}
