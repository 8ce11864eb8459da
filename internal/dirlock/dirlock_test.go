package dirlock

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const envChild = "DFLASH_DIRLOCK_CHILD"

// TestChild holds the lock of $DFLASH_DIRLOCK_CHILD until its stdin closes or it is
// killed; it does nothing unless started by TestAcrossProcesses.
func TestChild(t *testing.T) {
	dir := os.Getenv(envChild)
	if dir == "" {
		t.Skip("helper process of TestAcrossProcesses")
	}
	l, err := Acquire(dir, "dirlock child")
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(3)
	}
	os.Stdout.WriteString("locked\n")
	io.Copy(io.Discard, os.Stdin)
	l.Release()
	os.Exit(0)
}

// startHolder starts a process that holds dir's lock and waits until it does.
func startHolder(t *testing.T, dir string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "locked\n" {
		t.Fatalf("child: %q", line)
	}
	return cmd, stdin
}

// TestAcrossProcesses: a lock held by another process refuses at once naming it; a
// lock left by a killed process is taken over; a released one is free.
func TestAcrossProcesses(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock(2)")
	}
	dir := filepath.Join(t.TempDir(), "out")
	cmd, stdin := startHolder(t, dir)
	_, err := Acquire(dir, "test")
	var he *HeldError
	if !errors.As(err, &he) || he.Holder == nil || he.Holder.PID != cmd.Process.Pid || he.Holder.Command != "dirlock child" {
		t.Fatalf("held lock: %v (holder %+v)", err, he)
	}
	host, _ := os.Hostname()
	for _, want := range []string{dir + " is in use by dirlock child (pid ", " on " + host + ", started ", "one writer per output directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("message %q lacks %q", err, want)
		}
	}
	// Killed without releasing: the kernel drops the flock, the file keeps its details.
	cmd.Process.Kill()
	cmd.Wait()
	if b, _ := os.ReadFile(Path(dir)); !strings.Contains(string(b), `"pid"`) {
		t.Fatalf("lock file after the kill: %q", b)
	}
	l, err := Acquire(dir, "test")
	if err != nil {
		t.Fatalf("stale lock not taken over: %v", err)
	}
	// Held by this process: a second open of the lock file is refused too.
	if _, err := Acquire(dir, "again"); !errors.As(err, &he) || he.Holder.PID != os.Getpid() {
		t.Fatalf("second acquire in-process: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	// Released cleanly: the next holder (a process again) gets it.
	cmd, stdin = startHolder(t, dir)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	l, err = Acquire(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the lock created %s itself", dir)
	}
}

func TestPath(t *testing.T) {
	for in, want := range map[string]string{"a/b/out": "a/b/.out.lock", "out/": ".out.lock", "/x/run": "/x/.run.lock"} {
		if got := Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
}
