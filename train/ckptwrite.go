package train

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"time"
)

// Checkpoints in the background: at a step boundary save copies what the
// checkpoint holds (the master values, AdamW's moments and step count, the
// trainer state) into host memory allocated once for the run
// (Backend.AllocHost: page-locked on a device, so that the copies run at
// the link's speed) and hands it to a goroutine that writes the files
// (writeCheckpoint: the format, atomic rename and checksums of
// SaveCheckpoint) while training goes on. Training stalls only for the
// copies, and for the write before when it is still running: at most one
// write is in flight, as there is one snapshot. The end of the run, a stop
// (ctx cancelled) and an error wait for the write in flight. A write that
// fails is logged at the next step boundary and fails the run at its end;
// OnCheckpoint runs, on the training goroutine, once a write is durable.

// bgWrite is one checkpoint write in the background; its fields after
// done are set by the writer before it closes done.
type bgWrite struct {
	step int
	done chan struct{}
	w    written
	err  error
	took time.Duration
}

// snapshotAfter is how many steps of a call to Run go before the
// checkpoint snapshot's memory is allocated: the first steps back the step
// arena and capture the replayed regions, and a page-locked allocation
// of many GB beside them holds the driver for seconds (12.6 GB took 7 s
// in the 8B run), slowing the run's first steps; later steps replay.
const snapshotAfter = 2

// allocSnapshot starts allocating the host memory of the run's checkpoint
// snapshots (on the lead rank, once) beside the steps: page-locked, many
// GB take seconds, which training does not wait for. The loop starts it
// snapshotAfter steps in; a checkpoint before then starts it itself. The
// checkpoint takes it (snapshot), waiting for it if it is not ready.
func (r *runner) allocSnapshot() {
	if !r.lead || r.snapAlloc != nil || r.snap != nil { // snapAlloc first: the goroutine sets snap
		return
	}
	done := make(chan error, 1)
	r.snapAlloc = done
	go func() {
		t0 := time.Now()
		s, err := r.params.newSnapshot(r.h.Backend.AllocHost)
		if err != nil {
			done <- fmt.Errorf("checkpoint snapshot memory (%.2f GB): %w", float64(snapshotBytes(r.params.a.Len()))/1e9, err)
			return
		}
		r.snap = s
		slog.Info("checkpoint snapshot memory", "gb", gb(s.bytes()), "pinned", !r.h.Backend.HostParams(), "alloc_s", secs(time.Since(t0)))
		done <- nil
	}()
}

// snapshot waits for allocSnapshot's memory (the first time) and returns
// its error.
func (r *runner) snapshot() error {
	if r.snapAlloc == nil {
		return nil
	}
	err := <-r.snapAlloc
	r.snapAlloc = nil
	return err
}

// save checkpoints the current step with the RNG and data position of b,
// unless this step is already saved: it waits for the write in flight,
// copies the state into the snapshot and starts its write.
func (r *runner) save(b boundary) error {
	if r.st.Step == r.lastSaved || !r.lead {
		return nil
	}
	t0 := time.Now()
	r.awaitWrite()
	r.allocSnapshot()
	if err := r.snapshot(); err != nil {
		return err
	}
	waited := time.Since(t0)
	var modelCfg []byte
	if r.h.ModelConfig != nil {
		var err error
		if modelCfg, err = r.h.ModelConfig(); err != nil {
			return fmt.Errorf("model config: %w", err)
		}
	}
	s := r.st
	s.RNG, s.DataPosition = b.rng, b.data
	s.ElapsedSec = r.elapsed + time.Since(r.began).Seconds()
	// The maps go on changing with the run; the writer gets its own.
	s.Best, s.BestStep, s.Identity = maps.Clone(s.Best), maps.Clone(s.BestStep), maps.Clone(s.Identity)
	t1 := time.Now()
	r.params.take(r.snap)
	copied := time.Since(t1)
	if err := hook("snapshot"); err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", s.Step, err)
	}
	r.time.Snapshot += copied
	r.time.SnapshotBytes += r.snap.bytes()
	slog.Info("checkpoint snapshot", "step", s.Step, "stall_s", secs(time.Since(t0)), "wait_s", secs(waited),
		"copy_s", secs(copied), "copy_gb_per_s", gbPerS(r.snap.bytes(), copied))
	wr := &bgWrite{step: s.Step, done: make(chan struct{})}
	go func(out string, keep int, snap *paramSnapshot) {
		defer close(wr.done)
		t := time.Now()
		wr.w, wr.err = writeCheckpoint(out, modelCfg, snap, s, keep)
		wr.took = time.Since(t)
		if wr.err == nil {
			slog.Info("checkpoint written", "step", wr.step, "dir", wr.w.dir, "write_s", secs(wr.took),
				"gb", gb(wr.w.bytes), "gb_per_s", gbPerS(wr.w.bytes, wr.took))
		}
	}(r.cfg.Out, r.cfg.KeepCheckpoints, r.snap)
	r.inflight = wr
	r.lastSaved = s.Step
	return nil
}

// pollWrite takes note of the write in flight if it has ended.
func (r *runner) pollWrite() {
	if r.inflight == nil {
		return
	}
	select {
	case <-r.inflight.done:
		r.awaitWrite()
	default:
	}
}

// awaitWrite waits for the write in flight, if any, and takes note of how
// it ended: a durable checkpoint becomes the result's and OnCheckpoint's;
// a failure is logged and kept for the end of the run, and its step may be
// saved again.
func (r *runner) awaitWrite() {
	wr := r.inflight
	if wr == nil {
		return
	}
	<-wr.done
	r.inflight = nil
	r.time.Writing += wr.took
	if wr.err != nil {
		err := fmt.Errorf("checkpoint at step %d: %w", wr.step, wr.err)
		slog.Error("checkpoint write failed; training goes on and the run fails at its end", "step", wr.step, "err", wr.err)
		r.writeErrs = append(r.writeErrs, err)
		if r.lastSaved == wr.step {
			r.lastSaved = r.lastDurable
		}
		return
	}
	r.time.WrittenBytes += wr.w.bytes
	r.lastDurable = wr.step
	r.res.Checkpoint = wr.w.dir
	if r.h.OnCheckpoint != nil {
		r.h.OnCheckpoint(wr.w.dir, wr.step)
	}
}

// endWrites waits for the write in flight, gives back the snapshot memory
// and returns the failures of the run's writes (once: a second call
// returns nil).
func (r *runner) endWrites() error {
	r.awaitWrite()
	err := r.snapshot()
	if r.snap != nil {
		if ferr := r.snap.free(r.h.Backend); ferr != nil {
			err = errors.Join(err, fmt.Errorf("checkpoint snapshot memory: %w", ferr))
		}
		r.snap = nil
	}
	err = errors.Join(append(r.writeErrs, err)...)
	r.writeErrs = nil
	return err
}

// gb returns n bytes in GB, to 3 decimals.
func gb(n int64) float64 { return round3(float64(n) / 1e9) }

// gbPerS returns the rate of n bytes in d in GB/s, to 3 decimals.
func gbPerS(n int64, d time.Duration) float64 {
	return round3(float64(n) / 1e9 / max(d.Seconds(), 1e-9))
}

// secs returns d in seconds, to the millisecond.
func secs(d time.Duration) float64 { return round3(d.Seconds()) }

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
