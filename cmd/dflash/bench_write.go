package main

import (
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"dflash/gpu"
	"dflash/internal/diskspeed"
	"dflash/train"
)

// writeFlags are the flags of `dflash bench write`, bound with
// train.BindOptions.
type writeFlags struct {
	Dir        string  `yaml:"dir" help:"directory on the disk to measure (required); the files written there are removed"`
	GB         float64 `yaml:"gb" range:">0" help:"checkpoint size in GB (1e9 bytes): the model and optimizer tensors, 12 bytes a parameter"`
	Reps       int     `yaml:"reps" range:">=1" help:"timed writes of each kind, alternating; the medians are reported"`
	RawBlockMB int     `yaml:"raw-block-mib" range:">=1" help:"block size in MiB of the disk's own speed (O_DIRECT writes of one buffer, as dd bs=16M oflag=direct conv=fsync)"`
	Seed       uint64  `yaml:"seed" range:">=0" help:"random seed of the parameters"`
	JSON       bool    `yaml:"json" help:"print one JSON object instead of a table"`
}

// writeReport is `dflash bench write --json`: every write of each kind,
// and their medians in GB/s (1e9 bytes per second).
type writeReport struct {
	Dir string `json:"dir"`
	// Checkpoint is each checkpoint write, through the path of a run's
	// background writes (its bytes count every file of the checkpoint).
	Checkpoint []train.CheckpointWrite `json:"checkpoint"`
	// Disk is each write of the disk's own speed, as many bytes as the
	// checkpoint's tensors.
	Disk []diskspeed.Result `json:"disk"`
	// CheckpointGBPerS and DiskGBPerS are the medians of the rates (of
	// an even count, the slower of the middle two).
	CheckpointGBPerS float64 `json:"checkpoint_gb_per_s"`
	DiskGBPerS       float64 `json:"disk_gb_per_s"`
	// Ratio is CheckpointGBPerS / DiskGBPerS: 1 is the disk's own speed.
	Ratio float64 `json:"ratio"`
}

// benchWrite runs `dflash bench write`: a checkpoint of random parameters
// held in host memory, written as a run writes its checkpoints, beside the
// disk's own direct write speed, in the same directory.
func benchWrite(args []string) error {
	fs := newFlagSet("bench write", "bench write --dir DIR --gb N [--reps R] [--json] [flags]")
	f := writeFlags{GB: 2, Reps: 3, RawBlockMB: 16, Seed: 1}
	if err := parseOptions(fs, train.BindOptions(fs, &f), args); err != nil {
		return err
	}
	if f.Dir == "" {
		return usageError(fmt.Errorf("--dir is required: a directory on the disk to measure"))
	}
	if err := os.MkdirAll(f.Dir, 0o755); err != nil {
		return err
	}
	bytes := int64(f.GB * 1e9)
	t0 := time.Now()
	b, err := train.NewCheckpointBench(bytes, f.Seed)
	if err != nil {
		return err
	}
	slog.Info("bench write: random checkpoint in memory", "gb", f.GB, "fill_s", time.Since(t0).Seconds())
	rep := writeReport{Dir: f.Dir}
	var ckpt, disk gpu.Timing
	for i := range f.Reps {
		d, err := diskspeed.Write(f.Dir, bytes, f.RawBlockMB<<20)
		if err != nil {
			return err
		}
		slog.Info("bench write: disk", "rep", i+1, "gb_per_s", d.GBPerS, "direct", d.Direct)
		c, err := b.Write(f.Dir)
		if err != nil {
			return err
		}
		slog.Info("bench write: checkpoint", "rep", i+1, "gb_per_s", c.GBPerS)
		rep.Disk, rep.Checkpoint = append(rep.Disk, d), append(rep.Checkpoint, c)
		disk.Samples = append(disk.Samples, time.Duration(float64(time.Second)/d.GBPerS))
		ckpt.Samples = append(ckpt.Samples, time.Duration(float64(time.Second)/c.GBPerS))
	}
	// Medians of the times a GB took, turned back into rates.
	rep.CheckpointGBPerS, rep.DiskGBPerS = 1/ckpt.Median().Seconds(), 1/disk.Median().Seconds()
	rep.Ratio = rep.CheckpointGBPerS / rep.DiskGBPerS
	if f.JSON {
		return writeJSON(os.Stdout, rep)
	}
	printWriteReport(&rep)
	return nil
}

// printWriteReport prints r as a table: a row of rates for each kind of
// write, and the ratio.
func printWriteReport(r *writeReport) {
	d := r.Disk[0]
	fmt.Printf("writes to %s: a checkpoint of %.3f GB (every file), the disk's own speed on %.3f GB (%s, %d MiB blocks, fsync)\n\n",
		r.Dir, float64(r.Checkpoint[0].Bytes)/1e9, float64(d.Bytes)/1e9, map[bool]string{true: "O_DIRECT", false: "direct writes refused: page cache"}[d.Direct], d.BlockBytes>>20)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "GB/s\t")
	for i := range r.Checkpoint {
		fmt.Fprintf(w, "rep %d\t", i+1)
	}
	fmt.Fprintln(w, "median\t")
	fmt.Fprint(w, "checkpoint\t")
	for _, c := range r.Checkpoint {
		fmt.Fprintf(w, "%.3f\t", c.GBPerS)
	}
	fmt.Fprintf(w, "%.3f\t\n", r.CheckpointGBPerS)
	fmt.Fprint(w, "disk\t")
	for _, d := range r.Disk {
		fmt.Fprintf(w, "%.3f\t", d.GBPerS)
	}
	fmt.Fprintf(w, "%.3f\t\n", r.DiskGBPerS)
	w.Flush()
	fmt.Printf("checkpoint / disk: %.3f\n", r.Ratio)
}
