package shard

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"dflash/internal/testerr"
	"dflash/internal/testseed"
)

type sample struct {
	ids  []int32
	mask []uint8
}

func randomSamples(t *testing.T, n int) []sample {
	rng := testseed.New(t)
	out := make([]sample, n)
	for i := range out {
		l := 1 + rng.IntN(300)
		s := sample{make([]int32, l), make([]uint8, l)}
		for k := range s.ids {
			s.ids[k] = rng.Int32N(200_000) - 10 // negative ids too: the format stores any int32
			s.mask[k] = uint8(rng.IntN(2))
		}
		out[i] = s
	}
	return out
}

func key(s sample) string { return fmt.Sprint(s.ids, s.mask) }

func writeDataset(t *testing.T, dir string, samples []sample, shardTokens int) Meta {
	t.Helper()
	w, err := Create(dir, shardTokens, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		if err := w.Add(s.ids, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("output directory visible before Finish")
	}
	m, err := w.Finish(map[string]any{"note": "test"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWriteRead(t *testing.T) {
	samples := randomSamples(t, 400)
	dir := filepath.Join(t.TempDir(), "prep")
	meta := writeDataset(t, dir, samples, 10_000)
	if len(meta.Shards) < 3 {
		t.Fatalf("%d shards, want several", len(meta.Shards))
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Len() != len(samples) {
		t.Fatalf("Len %d want %d", d.Len(), len(samples))
	}
	if err := d.Verify(); err != nil {
		t.Fatal(err)
	}
	// Same multiset of samples; sorted by length within each shard, ties in
	// input order.
	want := map[string]int{}
	for _, s := range samples {
		want[key(s)]++
	}
	var supervised int64
	lengths := d.Lengths()
	i := 0
	pos := map[string][]int{}
	for k, s := range samples {
		pos[key(s)] = append(pos[key(s)], k)
	}
	for _, si := range meta.Shards {
		prevLen, prevPos := 0, -1
		for j := 0; j < int(si.Samples); j, i = j+1, i+1 {
			ids, mask := d.Sample(i)
			if len(ids) != d.SampleLen(i) || len(ids) != lengths[i] || len(mask) != len(ids) {
				t.Fatalf("sample %d: lengths disagree", i)
			}
			k := key(sample{ids, mask})
			if want[k] == 0 {
				t.Fatalf("sample %d was not written", i)
			}
			want[k]--
			p := pos[k][0]
			pos[k] = pos[k][1:]
			if len(ids) < prevLen || (len(ids) == prevLen && p < prevPos) {
				t.Fatalf("shard %s not sorted by (length, input order) at %d", si.File, j)
			}
			prevLen, prevPos = len(ids), p
			for _, m := range mask {
				supervised += int64(m)
			}
		}
	}
	if supervised != meta.Supervised || d.Meta().Supervised != supervised {
		t.Fatalf("supervised %d, meta %d", supervised, meta.Supervised)
	}
	if d.Meta().Info.(map[string]any)["note"] != "test" {
		t.Fatalf("info lost: %v", d.Meta().Info)
	}
}

func TestCorruption(t *testing.T) {
	samples := randomSamples(t, 50)
	for _, c := range []struct {
		name   string
		damage func(path string)
		want   string // "" for a Verify failure
	}{
		{"flipped id byte", func(p string) { flip(p, 64+8*51+3) }, ""},
		{"truncated", func(p string) {
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-5)
		}, "truncated or foreign"},
		{"bad magic", func(p string) { flip(p, 0) }, "bad magic"},
		{"bad offsets", func(p string) { flip(p, 64+8*3+7) }, "out of order or range"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "prep")
			writeDataset(t, dir, samples, 0)
			c.damage(filepath.Join(dir, "shard-00000.bin"))
			d, err := Open(dir)
			if testerr.Want(t, err, c.want) {
				return
			}
			defer d.Close()
			if err := d.Verify(); err == nil || !strings.Contains(err.Error(), "checksum") {
				t.Fatalf("Verify: got %v", err)
			}
		})
	}
}

func flip(path string, off int64) {
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, off)
	b[0] ^= 0xff
	f.WriteAt(b, off)
}

func TestCreateRules(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prep")
	writeDataset(t, dir, randomSamples(t, 5), 0)
	if _, err := Create(dir, 0, false); err == nil {
		t.Fatal("Create over an existing dataset without force succeeded")
	}
	w, err := Create(dir, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	w.Add([]int32{1, 2, 3}, []uint8{0, 1, 1})
	finishLen(t, w, dir, 1, "replaced dataset")
	// Abort leaves no trace.
	w, _ = Create(filepath.Join(filepath.Dir(dir), "other"), 0, false)
	w.Add([]int32{1}, []uint8{1})
	w.Abort()
	entries, _ := os.ReadDir(filepath.Dir(dir))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if !reflect.DeepEqual(names, []string{"prep"}) {
		t.Fatalf("directory holds %v after Abort", names)
	}
}

func TestEmptyDataset(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prep")
	w, _ := Create(dir, 0, false)
	finishLen(t, w, dir, 0, "empty dataset")
}

// finishLen finishes w, the writer of the dataset in dir, and fails t
// (naming what) unless the dataset then opens with n samples.
func finishLen(t *testing.T, w *Writer, dir string, n int, what string) {
	t.Helper()
	if _, err := w.Finish(nil); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer d.Close()
	if d.Len() != n {
		t.Fatalf("%s: %d samples, want %d", what, d.Len(), n)
	}
}

// TestCheckIDs writes ids in [0, 1000) with one id planted at a random
// place, and checks that CheckIDs names the shard and the sample that holds
// it, and that meta.json records every shard's largest id.
func TestCheckIDs(t *testing.T) {
	rng := testseed.New(t)
	samples := make([]sample, 60)
	for i := range samples {
		l := 1 + rng.IntN(50)
		samples[i] = sample{make([]int32, l), make([]uint8, l)}
		for k := range samples[i].ids {
			samples[i].ids[k] = rng.Int32N(1000)
		}
	}
	for _, bad := range []int32{1000, 5000, -1} {
		t.Run(fmt.Sprint(bad), func(t *testing.T) {
			s := samples[rng.IntN(len(samples))]
			at := rng.IntN(len(s.ids))
			old := s.ids[at]
			s.ids[at] = bad
			defer func() { s.ids[at] = old }()
			dir := filepath.Join(t.TempDir(), "prep")
			meta := writeDataset(t, dir, samples, 400)
			d, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if err := d.Verify(); err != nil {
				t.Fatal(err)
			}
			if err := d.CheckIDs(int(max(bad, 1000)) + 1); bad >= 0 && err != nil {
				t.Fatalf("ids below the vocabulary refused: %v", err)
			}
			err = d.CheckIDs(1000)
			// Find the planted id in the dataset, as a brute-force reference.
			where := -1
			for i := range d.Len() {
				if ids, _ := d.Sample(i); slices.Contains(ids, bad) && where < 0 {
					where = i
				}
			}
			want := fmt.Sprintf("sample %d (of the dataset; token", where)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("has id %d, outside the target's vocabulary [0, 1000)", bad)) {
				t.Fatalf("CheckIDs: %v, want %q", err, want)
			}
			for _, si := range meta.Shards {
				if si.MaxID == nil {
					t.Fatalf("%s: no max_id in meta.json", si.File)
				}
			}
		})
	}
}

// TestStalePartialRemoved checks that Create removes the temporary
// directory of a killed writer of the same output, and keeps those of live
// writers and of other outputs.
func TestStalePartialRemoved(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no process check on windows")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("no `true` to get a dead pid: %v", err)
	}
	parent := t.TempDir()
	dead := fmt.Sprintf(".prep.partial-%d-123", cmd.Process.Pid)
	live := fmt.Sprintf(".prep.partial-%d-456", os.Getpid())
	other := fmt.Sprintf(".other.partial-%d-789", cmd.Process.Pid)
	for _, n := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(parent, n, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeDataset(t, filepath.Join(parent, "prep"), randomSamples(t, 3), 0)
	entries, _ := os.ReadDir(parent)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{other, live, "prep"}
	sort.Strings(want)
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("directory holds %v, want %v", names, want)
	}
}
