package jit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestMain lets the test binary act as a second process (see runChild).
func TestMain(m *testing.M) {
	if os.Getenv("DFLASH_JIT_CHILD") != "" {
		os.Exit(runChild())
	}
	if os.Getenv("DFLASH_JIT_GPU_CHILD") != "" {
		os.Exit(runGPUChild())
	}
	os.Exit(m.Run())
}

// childResult is what a child process reports on stdout.
type childResult struct {
	Stats Stats
	Bad   int // images that differed from the expected bytes
}

// runChild Gets DFLASH_JIT_KEYS keys from the cache in DFLASH_JIT_DIR with a
// slow fake compiler and 256 KiB images, in forward or reverse order, from 8
// goroutines, and checks every image byte for byte.
func runChild() int {
	n, _ := strconv.Atoi(os.Getenv("DFLASH_JIT_KEYS"))
	reverse := os.Getenv("DFLASH_JIT_ORDER") == "reverse"
	fc := newFake(15 * time.Millisecond)
	fc.size = 256 << 10
	c, err := New(Config{Compiler: fc, Dir: os.Getenv("DFLASH_JIT_DIR"), Budget: 1 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	keys := make(chan int, n)
	for i := 0; i < n; i++ {
		if reverse {
			keys <- n - 1 - i
		} else {
			keys <- i
		}
	}
	close(keys)
	var res childResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				s := src("proc", k)
				img, err := c.Get(context.Background(), s)
				if err != nil || !bytes.Equal(img.Data, fakeImage(s, fc.size)) {
					mu.Lock()
					res.Bad++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	res.Stats = c.Stats()
	json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

func startChild(t *testing.T, dir string, keys int, order string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DFLASH_JIT_CHILD=1", "DFLASH_JIT_DIR="+dir,
		"DFLASH_JIT_KEYS="+strconv.Itoa(keys), "DFLASH_JIT_ORDER="+order)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

func childDone(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer) childResult {
	t.Helper()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	var r childResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("child output %q: %v", out.String(), err)
	}
	return r
}

// TestTwoProcessesShareOneDirectory runs two processes at once on one cache
// directory, asking for the same keys in opposite orders so each reads files
// the other is writing. Neither may see a half-written file (no discards,
// every image exact); afterwards a third process compiles nothing.
func TestTwoProcessesShareOneDirectory(t *testing.T) {
	const keys = 16
	dir := t.TempDir()
	c1, o1 := startChild(t, dir, keys, "forward")
	c2, o2 := startChild(t, dir, keys, "reverse")
	r1, r2 := childDone(t, c1, o1), childDone(t, c2, o2)
	for i, r := range []childResult{r1, r2} {
		st := r.Stats
		t.Logf("process %d: %d compiles, %d disk hits, %d discarded", i+1, st.Compiles, st.DiskHits, st.DiskDiscarded)
		if r.Bad != 0 || st.DiskDiscarded != 0 || st.DiskReadErrors != 0 || st.Compiles+st.DiskHits != keys {
			t.Errorf("process %d: %d bad images, stats %+v", i+1, r.Bad, st)
		}
	}
	ents, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	valid := 0
	for _, e := range ents {
		if e.Temp {
			t.Errorf("temporary file left behind: %s", e.Path)
		}
		if e.Err == nil && !e.Temp {
			valid++
		}
	}
	if valid != keys {
		t.Errorf("%d valid files, want %d", valid, keys)
	}
	c3, o3 := startChild(t, dir, keys, "forward")
	r3 := childDone(t, c3, o3)
	if r3.Bad != 0 || r3.Stats.Compiles != 0 || r3.Stats.DiskHits != keys {
		t.Errorf("third process: %d bad, stats %+v; want 0 compiles and %d disk hits", r3.Bad, r3.Stats, keys)
	}
}
