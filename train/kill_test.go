package train

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"dflash/internal/testseed"
)

const envKillChild = "DFLASH_TRAIN_KILL_CHILD"

const (
	killSteps = 100
	killSave  = 2
	killHid   = 2048
	killSeed  = 1234
)

func killConfig(out string) Config {
	cfg := testConfig(out, killSteps)
	cfg.Seed, cfg.SaveEvery, cfg.KeepCheckpoints, cfg.EvalEvery = killSeed, killSave, 2, 0
	return cfg
}

// TestKillChild is the training process that TestKillDuringCheckpoint starts and kills;
// it does nothing unless started that way. It prints "begin N" when step N (0-based)
// starts, "stage S" at each stage of a checkpoint save, "ckpt N" once checkpoint N is
// durable and "done" at the end, and sleeps a little at each stage so that kills land
// inside saves.
func TestKillChild(t *testing.T) {
	out := os.Getenv(envKillChild)
	if out == "" {
		t.Skip("helper process of TestKillDuringCheckpoint")
	}
	r := testseed.New(t)
	checkpointHook = func(stage string) {
		fmt.Printf("stage %s\n", stage)
		time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
	}
	tk := newTask(killSeed, killHid)
	tk.stepDelay = 2 * time.Millisecond
	tk.onStep = func(s StepInfo) {
		if s.Micro == 0 {
			fmt.Printf("begin %d\n", s.Step)
		}
	}
	h := tk.hooks()
	h.OnCheckpoint = func(dir string, step int) { fmt.Printf("ckpt %d\n", step) }
	cfg := killConfig(out)
	steps, err := listCheckpoints(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Resume = len(steps) > 0 // killed before its first checkpoint: nothing to resume
	if _, err := Run(context.Background(), cfg, h); err != nil {
		t.Fatal(err)
	}
	fmt.Println("done")
}

// TestKillDuringCheckpoint starts the training process, kills it (SIGKILL) at random
// moments, many inside checkpoint writes, and after each kill checks that the newest
// checkpoint loads and validates, that no checkpoint-* directory is half written, that
// it is at least as new as the last one the process reported durable, that at most the
// steps since it are lost, and that its parameters equal those of an uninterrupted run
// at that step, bit for bit. Finally the process runs to the end and matches too.
func TestKillDuringCheckpoint(t *testing.T) {
	if os.Getenv(envKillChild) != "" {
		t.Skip("inside the child")
	}
	// Reference: parameters after every step of an uninterrupted run.
	ref := map[int][][]float32{}
	rt := newTask(killSeed, killHid)
	h := rt.hooks()
	h.OnCheckpoint = func(dir string, step int) { ref[step] = snapshot(rt.m.params()) }
	cfg := killConfig(t.TempDir())
	cfg.SaveEvery = 1
	mustRun(t, context.Background(), cfg, h)

	r := testseed.New(t)
	out := t.TempDir()
	stages := []string{"config", "model", "optimizer", "synced", "renamed"}
	var kills, midWrite int
	finished := false
	const maxKills = 16
	for iter := 0; iter <= maxKills && !finished; iter++ {
		final := iter == maxKills // the last start runs to the end unkilled
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envKillChild+"="+out)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Even iterations kill at a random time after the first step began; odd ones
		// right after a chosen stage of a save (after skipping a random number of saves).
		var deadline <-chan time.Time
		delay := time.Duration(r.IntN(150)) * time.Millisecond
		target, skip := stages[r.IntN(len(stages))], r.IntN(4)
		var got []string
		killed := false
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				got = append(got, l)
				if iter%2 == 0 && !final && deadline == nil && !killed && strings.HasPrefix(l, "begin ") {
					deadline = time.After(delay)
				}
				if iter%2 == 1 && !final && !killed && l == "stage "+target {
					if skip == 0 {
						cmd.Process.Kill()
						killed = true
					}
					skip--
				}
			case <-deadline:
				cmd.Process.Kill()
				killed = true
				deadline = nil
			}
		}
		werr := cmd.Wait()
		var maxCkpt, begun = 0, -1
		last, done := "", false
		for _, l := range got {
			if l == "done" {
				done = true
			}
			if l == "PASS" || strings.HasPrefix(l, "ok ") || l == "done" {
				continue
			}
			f := strings.Fields(l)
			if len(f) == 2 {
				n, _ := strconv.Atoi(f[1])
				switch f[0] {
				case "ckpt":
					maxCkpt = max(maxCkpt, n)
				case "begin":
					begun = max(begun, n)
				}
			}
			last = l
		}
		if done {
			if werr != nil {
				t.Fatalf("child finished but exited with %v", werr)
			}
			finished = true
		} else {
			if !killed {
				t.Fatalf("child exited by itself (%v) after %q", werr, last)
			}
			kills++
			if strings.HasPrefix(last, "stage ") {
				midWrite++
			}
		}
		l, err := LoadLatest(out)
		if errors.Is(err, ErrNoCheckpoint) && maxCkpt == 0 {
			continue
		}
		if err != nil {
			t.Fatalf("iteration %d (last line %q): %v", iter, last, err)
		}
		if len(l.Skipped) > 0 {
			t.Fatalf("iteration %d: half-written checkpoints: %v", iter, l.Skipped)
		}
		if s := l.State.Step; s < maxCkpt || begun >= 0 && s < begun-killSave {
			t.Fatalf("iteration %d: loaded step %d, but checkpoint %d was durable and step %d had begun", iter, s, maxCkpt, begun)
		}
		ents, _ := os.ReadDir(out)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), tmpPrefix) {
				t.Fatalf("LoadLatest left %s", e.Name())
			}
		}
		m := newMLP(0, 4, killHid)
		if err := l.Restore(m.params(), nil); err != nil {
			t.Fatal(err)
		}
		want, ok := ref[l.State.Step]
		if !ok {
			t.Fatalf("no reference for step %d", l.State.Step)
		}
		assertSameBits(t, fmt.Sprintf("iteration %d, %s", iter, filepath.Base(l.Dir)), want, snapshot(m.params()))
		t.Logf("iteration %d: killed after %q; resumable at step %d (durable %d, begun %d)", iter, last, l.State.Step, maxCkpt, begun)
	}
	if !finished {
		t.Fatal("training did not finish")
	}
	t.Logf("%d kills, %d inside a checkpoint save", kills, midWrite)
	if kills < 4 || midWrite < 2 {
		t.Fatalf("only %d kills (%d mid-write): the test did not exercise interruption", kills, midWrite)
	}
	l, err := LoadLatest(out)
	if err != nil || l.State.Step != killSteps {
		t.Fatalf("final checkpoint %v, %v", l, err)
	}
	m := newMLP(0, 4, killHid)
	if err := l.Restore(m.params(), nil); err != nil {
		t.Fatal(err)
	}
	assertSameBits(t, "final", ref[killSteps], snapshot(m.params()))
}
