package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/internal/switches"
	"dflash/ncclcheck"
	"dflash/rendezvous"
	"dflash/train"
)

func init() {
	register(&command{name: "nccl", summary: "NCCL checks: exact all-reduce, bus bandwidth, kernel cache", run: func(args []string) error {
		return subcommands("nccl", map[string]*command{
			"check": {name: "check", summary: "all-reduce exactness and bandwidth, one process or one rank per process", run: ncclCheck},
		}, args)
	}})
}

type ncclGPU struct {
	Ordinal int    `json:"ordinal"`
	Name    string `json:"name"`
	Arch    string `json:"arch"`
}

type ncclReport struct {
	Mode        string                 `json:"mode"` // single-process | multi-process
	NRanks      int                    `json:"nranks"`
	Rank        *int                   `json:"rank,omitempty"` // multi-process: this process's rank
	NCCL        string                 `json:"nccl_version"`
	GPUs        []ncclGPU              `json:"gpus"`
	Env         map[string]string      `json:"env"`               // the multicast variables as NCCL's getenv sees them
	EnvSet      []string               `json:"env_set,omitempty"` // those the guard set
	Note        string                 `json:"note,omitempty"`
	Rows        []ncclcheck.Row        `json:"rows"`
	Checksum    string                 `json:"checksum"`
	Exact       bool                   `json:"exact"`
	KernelCache *ncclcheck.CacheResult `json:"kernel_cache,omitempty"`
	Failures    []string               `json:"failures,omitempty"`
	Pass        bool                   `json:"pass"`
	Seconds     float64                `json:"seconds"`
}

const ncclCheckSynopsis = `nccl check [--gpus N] [--sizes 4K..1G] [--dtype bf16,f32] [--json]
       dflash nccl check --rank R --nranks N --coordinator HOST:PORT [--token T] [--device D] ...

One process drives one worker per GPU and all-reduces (sum) across them;
with --rank/--nranks/--coordinator each process is one rank and rank 0
hands out NCCL's unique id over TCP. Results are checked element by element
against exact sums; bus bandwidth is NCCL's 2(n-1)/n * bytes / time.
NVLink multicast is kept off (NCCL_NVLS_ENABLE=0 and friends); a run with it
turned on is refused.`

// ncclFlags are the flags of `dflash nccl check`, bound with train.BindOptions.
type ncclFlags struct {
	GPUs        int           `yaml:"gpus" range:">=0" help:"GPUs to use in single-process mode, from ordinal 0 (0: all)"`
	Sizes       string        `yaml:"sizes" help:"all-reduce sizes in bytes: SIZE, FROM..TO[:FACTOR], comma-separated (K, M, G = KiB, MiB, GiB)"`
	DType       string        `yaml:"dtype" help:"element types, comma-separated: bf16, f32"`
	Iters       int           `yaml:"iters" range:">=0" help:"timed all-reduces per size (0: enough for about 1 GiB, 20..500)"`
	Warmup      int           `yaml:"warmup" range:">=-1" help:"untimed all-reduces before timing (0: ncclcheck.DefaultWarmup, -1: none)"`
	JSON        bool          `yaml:"json" help:"print one JSON object instead of a table"`
	NoCache     bool          `yaml:"no-kernel-cache" help:"skip the kernel-cache check"`
	Rank        int           `yaml:"rank" range:">=-1" help:"multi-process mode: this process's rank"`
	NRanks      int           `yaml:"nranks" range:">=0" help:"multi-process mode: number of ranks (processes)"`
	Coordinator string        `yaml:"coordinator" help:"multi-process mode: HOST:PORT where rank 0 listens"`
	Token       string        `yaml:"token" help:"multi-process mode: job token, the same on every rank (default $DFLASH_JOB_TOKEN)"`
	Device      int           `yaml:"device" range:">=-1" help:"multi-process mode: local GPU ordinal (-1: rank modulo the GPUs present)"`
	RdvTimeout  time.Duration `yaml:"rendezvous-timeout" range:">0" help:"multi-process mode: how long ranks wait for each other"`
	Deadline    time.Duration `yaml:"timeout" range:">0" help:"end the process with an error if the whole check takes longer (a hung collective)"`
}

func ncclCheck(args []string) error {
	fs := newFlagSet("nccl check", ncclCheckSynopsis)
	f := ncclFlags{Sizes: "4K..1G", DType: "bf16,f32", Rank: -1, Token: switches.JobToken.Value(), Device: -1,
		RdvTimeout: 2 * time.Minute, Deadline: 15 * time.Minute}
	if err := parseOptions(fs, train.BindOptions(fs, &f), args); err != nil {
		return err
	}
	// Before anything can load NCCL.
	set, err := cuda.GuardMulticast()
	if err != nil {
		return err
	}
	if err := cuda.CheckCEnv(); err != nil {
		return err
	}
	sizes, err := ncclcheck.ParseSizes(f.Sizes)
	if err != nil {
		return fmt.Errorf("--sizes: %w", err)
	}
	dtypes, err := ncclcheck.ParseDTypes(f.DType)
	if err != nil {
		return fmt.Errorf("--dtype: %w", err)
	}
	plan := ncclcheck.Plan{Sizes: sizes, DTypes: dtypes, Iters: f.Iters, Warmup: f.Warmup}
	if err := plan.Validate(); err != nil {
		return fmt.Errorf("--sizes/--dtype: %w", err)
	}
	multi := f.Rank >= 0 || f.NRanks > 0 || f.Coordinator != ""
	if multi && (f.Rank < 0 || f.NRanks < 1 || f.Coordinator == "") {
		return fmt.Errorf("multi-process mode needs --rank, --nranks and --coordinator together (got rank %d, nranks %d, coordinator %q)", f.Rank, f.NRanks, f.Coordinator)
	}
	watchdog := time.AfterFunc(f.Deadline, func() {
		slog.Error("nccl check: still running after --timeout; a collective is probably waiting for a rank that is gone", "timeout", f.Deadline)
		os.Exit(3)
	})
	defer watchdog.Stop()
	defer func() {
		if err := gpu.CloseAll(); err != nil {
			slog.Warn("nccl check: closing the GPU workers", "err", err)
		}
	}()

	t0 := time.Now()
	rep := &ncclReport{Env: map[string]string{}, EnvSet: set}
	for _, s := range cuda.MulticastOff {
		v, _, _ := cuda.CEnv(s.Name)
		rep.Env[s.Name] = v
	}
	ctx := context.Background()
	if multi {
		err = ncclMulti(ctx, rep, plan, rendezvous.Config{Addr: f.Coordinator, Rank: f.Rank, NRanks: f.NRanks, Token: f.Token, Timeout: f.RdvTimeout}, f.Device, !f.NoCache)
	} else {
		err = ncclSingle(ctx, rep, plan, f.GPUs, !f.NoCache)
	}
	if err != nil {
		return err
	}
	rep.Checksum = ncclcheck.Checksum(rep.NRanks, rep.Rows)
	rep.Failures = ncclcheck.Failures(rep.Rows)
	rep.Exact = len(rep.Failures) == 0
	rep.Pass = rep.Exact
	if kc := rep.KernelCache; kc != nil && !kc.Pass {
		rep.Pass = false
		rep.Failures = append(rep.Failures, "kernel cache: "+kc.Detail)
	}
	rep.Seconds = time.Since(t0).Seconds()
	if f.JSON {
		if err := writeJSON(os.Stdout, rep); err != nil {
			return err
		}
	} else {
		ncclPrint(rep)
	}
	if !rep.Pass {
		return fmt.Errorf("check failed: %s", strings.Join(rep.Failures, "; "))
	}
	return nil
}

func ncclVersion() (string, error) {
	v, err := cuda.NCCLVersion()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100), nil
}

// ncclSingle runs every rank in this process, one worker per GPU.
func ncclSingle(ctx context.Context, rep *ncclReport, plan ncclcheck.Plan, want int, cacheCheck bool) error {
	n, err := gpu.Count()
	if err != nil {
		return fmt.Errorf("check: no GPU: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("check: no CUDA GPU present")
	}
	if want == 0 {
		want = n
	}
	if want > n {
		return fmt.Errorf("--gpus %d: only %d GPU(s) present", want, n)
	}
	ws := make([]*gpu.Worker, want)
	for i := range ws {
		if ws[i], err = gpu.Open(i); err != nil {
			return err
		}
		info := ws[i].Info()
		rep.GPUs = append(rep.GPUs, ncclGPU{Ordinal: i, Name: info.Name, Arch: info.Arch()})
	}
	rep.Mode, rep.NRanks = "single-process", want
	if want == 1 {
		rep.Note = fmt.Sprintf("1 of %d GPU(s) used: a single-rank communicator, where an all-reduce is a copy and busBw is 0 by its formula; the multi-GPU checks need 2 GPUs", n)
		slog.Warn("nccl check: " + rep.Note)
	}
	if rep.NCCL, err = ncclVersion(); err != nil {
		return err
	}
	slog.Info("nccl check: creating the communicator", "ranks", want, "nccl", rep.NCCL)
	comms, err := gpu.NewComms(ws)
	if err != nil {
		return err
	}
	slog.Info("nccl check: all-reduce", "sizes", len(plan.Sizes), "dtypes", len(plan.DTypes))
	results, err := ncclcheck.RunWorkers(ctx, ws, comms, plan)
	if err != nil {
		return err
	}
	rep.Rows = ncclcheck.Merge(results)
	// Every rank's communicator is destroyed at the same time, each on its
	// own worker, rather than one after another when the workers close.
	jobs := make([]*gpu.Job, len(ws))
	for i, w := range ws {
		jobs[i] = w.Submit(func(*gpu.Device) error { return comms[i].Destroy() })
	}
	for i, j := range jobs {
		if err := j.Wait(); err != nil {
			slog.Warn("nccl check: destroying a communicator", "gpu", i, "err", err)
		}
	}
	if cacheCheck {
		kc, err := ncclcheck.KernelCacheWorkers(ctx, ws)
		if err != nil {
			slog.Error("nccl check: kernel cache", "err", err)
		}
		rep.KernelCache = &kc
	}
	return nil
}

// ncclMulti runs this process's rank of a communicator spread over processes.
func ncclMulti(ctx context.Context, rep *ncclReport, plan ncclcheck.Plan, cfg rendezvous.Config, device int, cacheCheck bool) error {
	n, err := gpu.Count()
	if err != nil {
		return fmt.Errorf("check rank %d: no GPU: %w", cfg.Rank, err)
	}
	if n == 0 {
		return fmt.Errorf("check rank %d: no CUDA GPU present", cfg.Rank)
	}
	if device < 0 {
		device = cfg.Rank % n
	}
	w, err := gpu.Open(device)
	if err != nil {
		return fmt.Errorf("rank %d: %w", cfg.Rank, err)
	}
	info := w.Info()
	rep.GPUs = []ncclGPU{{Ordinal: device, Name: info.Name, Arch: info.Arch()}}
	rep.Mode, rep.NRanks, rep.Rank = "multi-process", cfg.NRanks, &cfg.Rank
	if rep.NCCL, err = ncclVersion(); err != nil {
		return err
	}
	slog.Info("nccl check: rendezvous", "rank", cfg.Rank, "nranks", cfg.NRanks, "coordinator", cfg.Addr, "gpu", device)
	id, err := rendezvous.Exchange(ctx, cfg, func() (rendezvous.UniqueID, error) { return cuda.NCCLGetUniqueID() })
	if err != nil {
		return err
	}
	var res *ncclcheck.RankResult
	err = w.Run(func(d *gpu.Device) error {
		c, err := d.JoinComm(cfg.NRanks, id, cfg.Rank)
		if err != nil {
			return err
		}
		res, err = ncclcheck.RunRank(ctx, ncclcheck.GPURank{D: d, Comm: c}, plan)
		return errors.Join(err, c.Destroy())
	})
	if err != nil {
		return fmt.Errorf("rank %d on gpu %d: %w", cfg.Rank, device, err)
	}
	rep.Rows = res.Rows
	if cacheCheck {
		kc, err := ncclcheck.KernelCacheWorkers(ctx, []*gpu.Worker{w})
		if err != nil {
			slog.Error("nccl check: kernel cache", "err", err)
		}
		rep.KernelCache = &kc
	}
	return nil
}

func ncclPrint(rep *ncclReport) {
	var gpus []string
	for _, g := range rep.GPUs {
		gpus = append(gpus, fmt.Sprintf("gpu %d %s %s", g.Ordinal, g.Name, g.Arch))
	}
	who := fmt.Sprintf("%s, %d rank(s)", rep.Mode, rep.NRanks)
	if rep.Rank != nil {
		who = fmt.Sprintf("%s, rank %d of %d", rep.Mode, *rep.Rank, rep.NRanks)
	}
	fmt.Printf("dflash nccl check: %s, NCCL %s; %s\n", who, rep.NCCL, strings.Join(gpus, "; "))
	var env []string
	for _, s := range cuda.MulticastOff {
		env = append(env, s.Name+"="+rep.Env[s.Name])
	}
	fmt.Printf("NVLink multicast off: %s (set here: %s)\n", strings.Join(env, " "), cmp.Or(strings.Join(rep.EnvSet, ","), "none, already set"))
	if rep.Note != "" {
		fmt.Println("note:", rep.Note)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "dtype\tsize\telements\texact\titers\ttime us\talgbw GB/s\tbusbw GB/s\tsha256\t")
	for _, r := range rep.Rows {
		exact := "yes"
		if !r.Exact {
			exact = fmt.Sprintf("NO (%d)", r.Mismatches)
		} else if !r.Agree {
			exact = "ranks differ"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%.1f\t%.2f\t%.2f\t%s\t\n", r.DType, ncclcheck.FormatBytes(r.Bytes), r.Count, exact,
			r.Iters, r.TimeUS, r.AlgBW, r.BusBW, r.SHA256[:16])
	}
	tw.Flush()
	fmt.Printf("checksum %s\n", rep.Checksum)
	if kc := rep.KernelCache; kc != nil {
		fmt.Printf("kernel cache (%s): %s: %s\n", kc.Kernel, ncclPass(kc.Pass), kc.Detail)
	}
	for _, f := range rep.Failures {
		fmt.Println("FAIL:", f)
	}
	fmt.Printf("result: %s (%.1f s)\n", ncclPass(rep.Pass), rep.Seconds)
}

func ncclPass(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
