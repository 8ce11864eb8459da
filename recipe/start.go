package recipe

import (
	"context"
	"log/slog"
	"math"
	"time"

	"dflash/gpu"
	"dflash/jit"
	"dflash/model"
)

// processStart is when the process began (package initialisation, before
// main): the start that a run's first step is timed from.
var processStart = time.Now()

// startClock is where a rank's time went from the process's start to its
// first step, logged once at the first step's record (the "start" line).
type startClock struct {
	prepare   time.Duration // Run's prepare: config, tokenizer, chat template, data, the lead's drafter made (its values beside, NewAsync)
	prepared  time.Time     // when it ended (zero when the rank was started without Run)
	rank      time.Time     // when the rank began (after its device and backend were made)
	load      model.LoadStats
	compile   time.Duration // Compile on its own goroutine, beside the load (GPU)
	kernels   time.Duration // after the drafter's placement: the wait for Compile and Prepare's module loads
	drafter   time.Duration // the wait for the rank's drafter values, then its placement on its backend (beside the compiles), its session wired to the target
	run       time.Time     // when train.Run began
	gemm      gpu.GemmTuneStats
	allocRun  gpu.AllocStats // the device's allocator when train.Run began
	alloc     gpu.AllocStats // and at the first step's record
	cache     jit.Stats
	hasDevice bool
}

// log writes the start line of the first step, whose record is written
// now: every part in seconds, the target's bytes and read rate, and on a
// GPU the GEMM tuning of the first step and the kernel cache's work.
func (c *startClock) log() {
	now := time.Now()
	s := func(d time.Duration) float64 { return d.Round(time.Millisecond).Seconds() }
	gb := float64(c.load.Bytes) / 1e9
	attrs := []any{"first_step_at_s", s(now.Sub(processStart)), "prepare_s", s(c.prepare)}
	if !c.prepared.IsZero() {
		attrs = append(attrs, "device_s", s(c.rank.Sub(c.prepared)))
	}
	var rate float64
	if c.load.Elapsed > 0 {
		rate = gb / c.load.Elapsed.Seconds()
	}
	attrs = append(attrs, "target_bytes", c.load.Bytes, "target_gb", round3(gb), "target_s", s(c.load.Elapsed), "target_gbps", round3(rate),
		"readers", c.load.Readers, "upload_s", s(c.load.Write), "compile_s", s(c.compile), "kernels_s", s(c.kernels),
		"drafter_s", s(c.drafter), "first_step_s", s(now.Sub(c.run)))
	if c.hasDevice {
		attrs = append(attrs, "gemm_tune_s", round3(c.gemm.Seconds), "gemm_timed", c.gemm.Timed, "gemm_tuned_from_file", c.gemm.Loaded, "gemm_untuned", c.gemm.Untuned,
			"compiles", c.cache.Compiles, "kernel_disk_hits", c.cache.DiskHits,
			// the first step's driver allocations: the step arena's maps and the cached allocator's cuMemAlloc calls
			"first_step_alloc_s", round3(c.alloc.DriverSeconds-c.allocRun.DriverSeconds),
			"first_step_maps", c.alloc.Maps-c.allocRun.Maps, "first_step_device_allocs", c.alloc.DeviceAllocs-c.allocRun.DeviceAllocs,
			"first_step_mapped_gb", round3(float64(c.alloc.MappedBytes-c.allocRun.MappedBytes)/1e9))
	}
	slog.Info("start", attrs...)
}

// round3 rounds x to three decimals, for the log.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// loadTarget loads the rank's target (model.LoadWith: the shards read in
// parallel, each piece written to the backend as it arrives) and, on a
// GPU, starts compiling every kernel that Prepare will load for the
// target's forward and the drafter's step (tensorcuda.Backend.Compile on
// its own goroutine: the compiles touch no device), so that the start
// costs the longer of the two. compiled waits for the compiles and returns
// their error, as Prepare would return it: the caller places the drafter
// before it waits (a cold kernel cache compiles for longer than the target
// takes to load).
func (j *job) loadTarget(ctx context.Context, r rankEnv, clock *startClock) (target *model.Model, compiled func() error, err error) {
	done := make(chan error, 1)
	if r.cuda != nil {
		uses := append(j.targetCfg.ForwardAttentions(j.pack != nil), j.lead.Drafter.StepAttentions()...)
		go func() {
			t := time.Now()
			err := r.cuda.Backend.Compile(ctx, uses)
			clock.compile = time.Since(t)
			done <- err
		}()
	} else {
		done <- nil
	}
	compiled = func() error { return <-done }
	if r.loading != nil {
		r.loading.Lock()
	}
	target, st, err := model.LoadWith(j.spec.TargetDir, r.backend, model.LoadOptions{FP8: j.spec.TargetDType == "fp8"})
	if r.loading != nil {
		r.loading.Unlock()
	}
	clock.load = st
	if err != nil {
		compiled() // the compiles' goroutine ends before the backend closes
		return nil, nil, err
	}
	return target, compiled, nil
}

// gauges returns inner (nil: none) wrapped so that its first call logs
// the start line: train.Run reads the lead rank's gauges once a step has
// ended, just before it writes the step's record.
func (c *startClock) gauges(r rankEnv, inner func() map[string]float64) func() map[string]float64 {
	logged := false
	return func() map[string]float64 {
		if !logged {
			logged = true
			if r.cuda != nil {
				c.gemm, c.alloc = r.cuda.Device.GemmTuneStats(), r.cuda.Device.AllocStats()
			}
			if r.kernels != nil {
				c.cache = r.kernels.Stats()
			}
			c.log()
		}
		if inner == nil {
			return nil
		}
		return inner()
	}
}
