package train

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
// starts, "stage S" at each stage of a checkpoint save (the snapshot on the training
// goroutine, then the stages of its write in the background), "ckpt N" once
// checkpoint N is durable and "done" at the end, and sleeps a little at each stage so
// that kills land inside saves, while training goes on beside the write.
func TestKillChild(t *testing.T) {
	out := os.Getenv(envKillChild)
	if out == "" {
		t.Skip("helper process of TestKillDuringCheckpoint")
	}
	r := testseed.New(t)
	checkpointHook = func(stage string) error {
		fmt.Printf("stage %s\n", stage)
		time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
		return nil
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
// moments, many inside checkpoint writes and some while steps ran beside a write in
// the background, and after each kill checks that the newest checkpoint loads and
// validates, that no checkpoint-* directory is half written, that it is at least as
// new as the last one the process reported durable, that at most the steps since the
// checkpoint before the last snapshot are lost (one write in flight), and that its
// parameters equal those of an uninterrupted run at that step, bit for bit. Finally
// the process resumes and runs to the end, and matches too.
func TestKillDuringCheckpoint(t *testing.T) {
	if os.Getenv(envKillChild) != "" {
		t.Skip("inside the child")
	}
	ref := killReference(t)
	r := testseed.New(t)
	out := t.TempDir()
	var kills, midWrite, besideWrite int
	finished := false
	const maxKills = 16
	for iter := 0; iter <= maxKills && !finished; iter++ {
		k := runKilled(t, out, iter, iter == maxKills, r) // the last start runs to the end unkilled
		if k.done {
			if k.werr != nil {
				t.Fatalf("child finished but exited with %v", k.werr)
			}
			finished = true
		} else {
			if !k.killed {
				t.Fatalf("child exited by itself (%v) after %q", k.werr, k.last)
			}
			kills++
			if strings.HasPrefix(k.last, "stage ") {
				midWrite++
			}
			if k.besideWrite() {
				besideWrite++
			}
		}
		checkResumable(t, out, iter, k, ref)
	}
	if !finished {
		t.Fatal("training did not finish")
	}
	t.Logf("%d kills, %d inside a checkpoint save, %d while steps ran beside a write", kills, midWrite, besideWrite)
	if kills < 4 || midWrite < 2 || besideWrite < 2 {
		t.Fatalf("only %d kills (%d mid-write, %d beside a background write): the test did not exercise interruption", kills, midWrite, besideWrite)
	}
	l, err := LoadLatest(out)
	if err != nil || l.State.Step != killSteps {
		t.Fatalf("final checkpoint %v, %v", l, err)
	}
	m := newMLP(0, 4, killHid)
	if err := LoadValues(l.Dir, testCPU, m.arena); err != nil {
		t.Fatal(err)
	}
	assertSameBits(t, "final", ref[killSteps], snapshot(m.params()))
}

// killReference returns the parameters after every step of an uninterrupted run.
func killReference(t *testing.T) map[int][][]float32 {
	return stepReference(t, newTask(killSeed, killHid), killConfig(t.TempDir()))
}

// stepReference runs tk under cfg and returns its parameters after every step
// (taken as the next step begins, and at the end).
func stepReference(t *testing.T, tk *task, cfg Config) map[int][][]float32 {
	t.Helper()
	ref := map[int][][]float32{}
	tk.onStep = chain(tk.onStep, func(s StepInfo) {
		if s.Micro == 0 {
			ref[s.Step] = snapshot(tk.m.params())
		}
	})
	res := mustRun(t, context.Background(), cfg, tk.hooks())
	ref[res.Steps] = snapshot(tk.m.params())
	return ref
}

// chain returns a step callback that calls f (if any), then g.
func chain(f, g func(StepInfo)) func(StepInfo) {
	return func(s StepInfo) {
		if f != nil {
			f(s)
		}
		g(s)
	}
}

// killedRun is what one start of the child printed and how it ended.
type killedRun struct {
	got     []string // its stdout lines
	killed  bool
	werr    error // from Wait
	maxCkpt int   // newest checkpoint it reported durable
	begun   int   // newest step it began (-1: none)
	last    string
	done    bool // it printed "done"
}

// killStages are the stages of a checkpoint save that TestKillChild prints: the
// snapshot, then those of the write.
var killStages = []string{"snapshot", "config", "model", "optimizer", "synced", "renamed"}

// runKilled starts the child on out and, unless final, kills it: even
// iterations at a random time after the first step began, odd ones right after
// a chosen stage of a save (after skipping a random number of saves).
func runKilled(t *testing.T, out string, iter int, final bool, r *rand.Rand) killedRun {
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
	var deadline <-chan time.Time
	delay := time.Duration(r.IntN(150)) * time.Millisecond
	target, skip := killStages[r.IntN(len(killStages))], r.IntN(4)
	var k killedRun
read:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break read
			}
			k.got = append(k.got, l)
			if iter%2 == 0 && !final && deadline == nil && !k.killed && strings.HasPrefix(l, "begin ") {
				deadline = time.After(delay)
			}
			if iter%2 == 1 && !final && !k.killed && l == "stage "+target {
				if skip == 0 {
					cmd.Process.Kill()
					k.killed = true
				}
				skip--
			}
		case <-deadline:
			cmd.Process.Kill()
			k.killed = true
			deadline = nil
		}
	}
	k.werr = cmd.Wait()
	k.parse()
	return k
}

// parse reads the child's progress lines into maxCkpt, begun, last and done.
func (k *killedRun) parse() {
	k.begun = -1
	for _, l := range k.got {
		if l == "done" {
			k.done = true
		}
		if l == "PASS" || strings.HasPrefix(l, "ok ") || l == "done" {
			continue
		}
		f := strings.Fields(l)
		if len(f) == 2 {
			n, _ := strconv.Atoi(f[1])
			switch f[0] {
			case "ckpt":
				k.maxCkpt = max(k.maxCkpt, n)
			case "begin":
				k.begun = max(k.begun, n)
			}
		}
		k.last = l
	}
}

// besideWrite reports whether k was killed while a checkpoint's write ran in
// the background and a step had begun after its snapshot.
func (k *killedRun) besideWrite() bool {
	stepped := false
	for i := len(k.got) - 1; i >= 0; i-- {
		switch l := k.got[i]; {
		case l == "stage latest":
			return false
		case l == "stage snapshot":
			return stepped
		case strings.HasPrefix(l, "begin "):
			stepped = true
		}
	}
	return false
}

// checkResumable checks the newest checkpoint in out after run k: it loads
// with nothing half written, is no older than what k reported durable (nor
// than the checkpoint before the last snapshot k took before the newest step
// it began: that snapshot's write may have been in flight, the one before had
// to be durable), and holds exactly the reference parameters of its step.
func checkResumable(t *testing.T, out string, iter int, k killedRun, ref map[int][][]float32) {
	t.Helper()
	l, err := LoadLatest(out)
	if errors.Is(err, ErrNoCheckpoint) && k.maxCkpt == 0 {
		return
	}
	if err != nil {
		t.Fatalf("iteration %d (last line %q): %v", iter, k.last, err)
	}
	if len(l.Skipped) > 0 {
		t.Fatalf("iteration %d: half-written checkpoints: %v", iter, l.Skipped)
	}
	if s := l.State.Step; s < k.maxCkpt || k.begun >= 0 && s < k.begun-k.begun%killSave-killSave {
		t.Fatalf("iteration %d: loaded step %d, but checkpoint %d was durable and step %d had begun", iter, s, k.maxCkpt, k.begun)
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Fatalf("LoadLatest left %s", e.Name())
		}
	}
	m := newMLP(0, 4, killHid)
	if err := LoadValues(l.Dir, testCPU, m.arena); err != nil {
		t.Fatal(err)
	}
	want, ok := ref[l.State.Step]
	if !ok {
		t.Fatalf("no reference for step %d", l.State.Step)
	}
	assertSameBits(t, fmt.Sprintf("iteration %d, %s", iter, filepath.Base(l.Dir)), want, snapshot(m.params()))
	t.Logf("iteration %d: killed after %q; resumable at step %d (durable %d, begun %d)", iter, k.last, l.State.Step, k.maxCkpt, k.begun)
}
