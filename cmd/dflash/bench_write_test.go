package main

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

// TestBenchWrite runs `dflash bench write --json` on a small checkpoint:
// every write is reported under its documented key, the medians are the
// middle rates, the ratio is theirs, and the directory is left empty.
func TestBenchWrite(t *testing.T) {
	dir := t.TempDir()
	cmd := dflashCommand(t, "bench", "write", "--dir", dir, "--gb", "0.006", "--reps", "3", "--json")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rep struct {
		Checkpoint []struct {
			Bytes  int64   `json:"bytes"`
			GBPerS float64 `json:"gb_per_s"`
		} `json:"checkpoint"`
		Disk []struct {
			Bytes  int64   `json:"bytes"`
			GBPerS float64 `json:"gb_per_s"`
		} `json:"disk"`
		CheckpointGBPerS float64 `json:"checkpoint_gb_per_s"`
		DiskGBPerS       float64 `json:"disk_gb_per_s"`
		Ratio            float64 `json:"ratio"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Checkpoint) != 3 || len(rep.Disk) != 3 {
		t.Fatalf("%d checkpoint and %d disk writes, want 3 of each:\n%s", len(rep.Checkpoint), len(rep.Disk), out)
	}
	median := func(xs []float64) float64 { // of three: the one neither largest nor smallest
		return xs[0] + xs[1] + xs[2] - max(xs[0], xs[1], xs[2]) - min(xs[0], xs[1], xs[2])
	}
	var c, d []float64
	for i := range 3 {
		if rep.Checkpoint[i].Bytes < 6e6 || rep.Disk[i].Bytes < 6e6-12 {
			t.Errorf("write %d: checkpoint %d bytes, disk %d, want about 6e6 each", i, rep.Checkpoint[i].Bytes, rep.Disk[i].Bytes)
		}
		c, d = append(c, rep.Checkpoint[i].GBPerS), append(d, rep.Disk[i].GBPerS)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) }
	if !near(rep.CheckpointGBPerS, median(c)) || !near(rep.DiskGBPerS, median(d)) || !near(rep.Ratio, rep.CheckpointGBPerS/rep.DiskGBPerS) {
		t.Errorf("medians %v of %v and %v of %v, ratio %v", rep.CheckpointGBPerS, c, rep.DiskGBPerS, d, rep.Ratio)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("the directory holds %d entries (%v), want none", len(ents), err)
	}
	if err := benchWrite(nil); err == nil || !strings.Contains(err.Error(), "--dir is required") {
		t.Errorf("bench write without --dir: %v", err)
	}
}
