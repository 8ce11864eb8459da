package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"dflash/recipe/recipetest"
	"dflash/train"
)

const envMainArgs = "DFLASH_TEST_MAIN_ARGS"

// TestMainChild is the dflash process that the tests below start; it does nothing
// unless started that way.
func TestMainChild(t *testing.T) {
	raw := os.Getenv(envMainArgs)
	if raw == "" {
		t.Skip("helper process of the command-line tests")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	os.Exit(runMain(args))
}

// dflashCommand returns the command that runs `dflash args...` in a child process.
func dflashCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	raw, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envMainArgs+"="+string(raw))
	return cmd
}

// exitCode waits for cmd and returns its exit status.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// stopSignals are the signals that stop a command, with the exit status each gives.
var stopSignals = []struct {
	sig  syscall.Signal
	name string
	code int
}{{syscall.SIGTERM, "SIGTERM", 143}, {syscall.SIGINT, "SIGINT", 130}}

// startUntil starts cmd and reads its stderr up to the first line for which
// until is true; it returns the lines read and the rest of stderr.
func startUntil(t *testing.T, cmd *exec.Cmd, until func(line string) bool) ([]string, io.Reader) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if until(sc.Text()) {
			break
		}
	}
	return lines, stderr
}

// TestBadOptionExit: a bad option is a usage error: exit 2 with a one-line message,
// no stack trace.
func TestBadOptionExit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	cmd := dflashCommand(t, "train", "--target", "t", "--data", "d", "--out", out, "--data.batch-size", "0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr.String())
	}
	if s := stderr.String(); s != "dflash train: --data.batch-size 0: must be an int >= 1\n" {
		t.Fatalf("stderr %q", s)
	}
}

// TestTrainSignals: while one dflash train runs, a second one and a data prep on the
// same output are refused naming it. SIGINT and SIGTERM stop it with a checkpoint of
// the last finished step, a message naming the checkpoint and the resume command,
// and the exit status 128+signal; the checkpoint resumes.
func TestTrainSignals(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	for _, c := range stopSignals {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			args := []string{"train", "--target", targetDir, "--data", dataPath, "--out", out, "--progress", "lines", "--log-every", "1",
				"--plot=false", "--steps", "100000", "--save-every", "0", "--drafter.block-size", "4", "--drafter.anchors", "4",
				"--data.batch-size", "2", "--data.max-len", "300"}
			cmd := dflashCommand(t, args...)
			// Signal once the third step is done; keep every line for the checks.
			lines, stderr := startUntil(t, cmd, func(l string) bool {
				return strings.HasPrefix(l, "step ") && strings.Contains(l, " 3/100000")
			})
			// One writer per output directory: a second run (or data prep) is refused, naming the first.
			err := runTrain(args[1:])
			if want := out + " is in use by dflash train (pid " + strconv.Itoa(cmd.Process.Pid) + " on "; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("second writer: %v, want %q", err, want)
			}
			err = dataPrep([]string{"--tokenizer", targetDir, "--data", dataPath, "--out", out})
			if err == nil || !strings.Contains(err.Error(), "is in use by dflash train") {
				t.Fatalf("data prep on a training output: %v", err)
			}
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(stderr)
			lines = append(lines, strings.Split(string(rest), "\n")...)
			code := exitCode(t, cmd)
			all := strings.Join(lines, "\n")
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, all)
			}
			l, err := train.LoadLatest(out)
			if err != nil {
				t.Fatalf("no checkpoint: %v\n%s", err, all)
			}
			for _, want := range []string{"dflash train: interrupted by " + c.name + " after step ", "checkpoint " + l.Dir + "\n",
				"resume with: dflash train --target " + targetDir, " --resume"} {
				if !strings.Contains(all, want) {
					t.Fatalf("stderr lacks %q:\n%s", want, all)
				}
			}
			if l.State.Step < 3 || strings.Contains(all, "goroutine ") {
				t.Fatalf("checkpoint at step %d:\n%s", l.State.Step, all)
			}
			// The printed command resumes (stopped one step later here).
			resume := append(slices.Clone(args[1:]), "--resume", "--progress", "off", "--stop-at", strconv.Itoa(l.State.Step+1))
			if err := runTrain(resume); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDemoSignals: dflash demo stops on SIGTERM and on SIGINT during its first
// training stage, says which signal stopped it, and exits 128+signal without a
// stack trace.
func TestDemoSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the demo in a child process")
	}
	for _, c := range stopSignals {
		t.Run(c.name, func(t *testing.T) {
			cmd := dflashCommand(t, "demo", "--quick", "--progress", "off", "--dir", t.TempDir())
			lines, stderr := startUntil(t, cmd, func(l string) bool {
				return strings.Contains(l, "demo stage") && strings.Contains(l, "stage=target")
			})
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(stderr)
			all := strings.Join(append(lines, string(rest)), "\n")
			if code := exitCode(t, cmd); code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, all)
			}
			if want := "dflash demo: interrupted by " + c.name + "\n"; !strings.HasSuffix(all, want) || strings.Contains(all, "goroutine ") {
				t.Fatalf("stderr does not end in %q:\n%s", want, all)
			}
		})
	}
}

// TestErrorMessages: each error is printed once, as "dflash COMMAND: message",
// with the subcommand named and no layer repeating a prefix; a bad flag is a
// usage error (exit 2) without the flag listing.
func TestErrorMessages(t *testing.T) {
	targetDir, _ := recipetest.Fixture(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, []byte("\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"data", "prep", "--tokenizer", targetDir, "--data", empty, "--out", filepath.Join(dir, "p1")}, 1,
			"dflash data prep: no usable conversation in " + empty + ": 0 lines read (and 2 blank)\n"},
		{[]string{"data", "prep", "--tokenizer", targetDir, "--data", empty, "--out", filepath.Join(dir, "p2"), "--max-len", "-1"}, 2,
			"dflash data prep: --max-len -1: must be an int >= 0\n"},
		{[]string{"data", "prep", "--tokenizer", targetDir, "--data", empty, "--block", "4"}, 2,
			"dflash data prep: flag provided but not defined: -block (see dflash data prep --help)\n"},
		{[]string{"train", "--target", targetDir, "--data", missing, "--out", filepath.Join(dir, "t1")}, 1,
			"dflash train: stat " + missing + ": no such file or directory\n"},
		{[]string{"cache", "ls", "--dir", dir}, 2,
			"dflash cache ls: flag provided but not defined: -dir (see dflash cache ls --help)\n"},
	} {
		t.Run(strings.Join(c.args[:2], " "), func(t *testing.T) {
			cmd := dflashCommand(t, c.args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if code := exitCode(t, cmd); code != c.code || stderr.String() != c.stderr {
				t.Fatalf("exit %d, stderr %q\nwant exit %d, stderr %q", code, stderr.String(), c.code, c.stderr)
			}
		})
	}
}
