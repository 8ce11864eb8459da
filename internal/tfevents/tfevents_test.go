package tfevents_test

import (
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"dflash/internal/testseed"
	"dflash/internal/tfevents"
	"dflash/internal/tfevents/tfeventstest"
)

// TestCRC: CRC-32C of "123456789" is the published check value 0xe3069283;
// masked by hand: c>>15 = 0x0001c60d, c<<17 (32 bits) = 0x25060000, or'ed
// 0x2507c60d, plus 0xa282ead8 = 0xc78ab0e5 (mod 2^32).
func TestCRC(t *testing.T) {
	check := []byte("123456789")
	if got := crc32.Checksum(check, crc32.MakeTable(crc32.Castagnoli)); got != 0xe3069283 {
		t.Fatalf("CRC-32C(123456789) = %#x, want 0xe3069283", got)
	}
	if got := tfevents.MaskedCRC(check); got != 0xc78ab0e5 {
		t.Fatalf("masked CRC-32C(123456789) = %#x, want 0xc78ab0e5", got)
	}
}

type written struct {
	step   int64
	start  bool
	values map[string]float64
}

// writeRandom writes a file of n scalar events (random tags and values,
// some special) with a START event in the middle, and returns what it wrote.
func writeRandom(t *testing.T, dir string, n int) (string, []written) {
	rng := testseed.New(t)
	w, err := tfevents.Create(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var want []written
	for i := range n {
		step := int64(i*3 + rng.IntN(3))
		if i == n/2 {
			if err := w.Start(step, time.Now()); err != nil {
				t.Fatal(err)
			}
			want = append(want, written{step: step, start: true})
		}
		vals := map[string]float64{}
		for j := range 1 + rng.IntN(6) {
			tag := fmt.Sprintf("train/m%d", rng.IntN(50)+j*100)
			vals[tag] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6))
		}
		if i == 1 {
			vals["eval/inf"], vals["eval/big"], vals["eval/zero"] = math.Inf(1), 3e39, 0
		}
		if err := w.Scalars(step, time.Now(), vals); err != nil {
			t.Fatal(err)
		}
		want = append(want, written{step: step, values: vals})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.Path(), want
}

// TestWriteRead: every record decodes with valid CRCs; the first is the file
// version, then every written event with its step, tags (sorted) and values
// rounded to float32.
func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	path, want := writeRandom(t, dir, 20)
	if !strings.Contains(filepath.Base(path), "tfevents") || !strings.HasPrefix(filepath.Base(path), "events.out.tfevents.") {
		t.Fatalf("file name %q", filepath.Base(path))
	}
	evs, torn, err := tfeventstest.ReadFile(path)
	if err != nil || torn {
		t.Fatalf("read: torn %v, %v", torn, err)
	}
	checkEvents(t, evs, want)
}

func checkEvents(t *testing.T, evs []tfeventstest.Event, want []written) {
	t.Helper()
	if len(evs) != len(want)+1 {
		t.Fatalf("%d events, want %d", len(evs), len(want)+1)
	}
	if evs[0].FileVersion != "brain.Event:2" || evs[0].WallTime < 1e9 {
		t.Fatalf("first event %+v, want file_version brain.Event:2 and a wall time", evs[0])
	}
	for i, w := range want {
		e := evs[i+1]
		if e.Step != w.step || e.Start != w.start || e.FileVersion != "" {
			t.Fatalf("event %d: step %d start %v version %q, want step %d start %v", i+1, e.Step, e.Start, e.FileVersion, w.step, w.start)
		}
		tags := slices.Sorted(maps.Keys(w.values))
		if !slices.Equal(e.Tags, tags) && (len(tags) > 0 || len(e.Tags) > 0) {
			t.Fatalf("event %d: tags %v, want %v", i+1, e.Tags, tags)
		}
		for k, v := range w.values {
			got := e.Scalars[k]
			if math.Float32bits(got) != math.Float32bits(float32(v)) {
				t.Fatalf("event %d %s = %g, want %g (float32 of %g)", i+1, k, got, float32(v), v)
			}
		}
	}
}

// TestTorn: a file cut anywhere inside its last record still yields every
// complete record.
func TestTorn(t *testing.T) {
	dir := t.TempDir()
	path, want := writeRandom(t, dir, 6)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	evs, _, err := tfeventstest.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := len(raw) - lastRecordLen(t, raw, len(evs))
	for cut := last + 1; cut < len(raw); cut++ {
		if err := os.WriteFile(path, raw[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		got, torn, err := tfeventstest.ReadFile(path)
		if err != nil || !torn {
			t.Fatalf("cut at %d of %d: torn %v, %v", cut, len(raw), torn, err)
		}
		checkEvents(t, got, want[:len(want)-1])
	}
}

// lastRecordLen returns the framed size of the last of n records of raw.
func lastRecordLen(t *testing.T, raw []byte, n int) int {
	off := 0
	for range n - 1 {
		l := int(raw[off]) | int(raw[off+1])<<8 | int(raw[off+2])<<16
		off += 12 + l + 4
	}
	return len(raw) - off
}

// TestNames: a second file of the same second and host gets a new name that
// sorts after the first, and both keep their own events.
func TestNames(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	var paths []string
	for i := range 3 {
		w, err := tfevents.Create(dir, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Scalars(int64(i), now, map[string]float64{"x": float64(i)}); err != nil {
			t.Fatal(err)
		}
		w.Close()
		paths = append(paths, w.Path())
	}
	if !slices.IsSorted(paths) || paths[0] == paths[1] || paths[1] == paths[2] {
		t.Fatalf("paths %v: want distinct, in creation order", paths)
	}
	for i, p := range paths {
		evs, _, err := tfeventstest.ReadFile(p)
		if err != nil || len(evs) != 2 || evs[1].Scalars["x"] != float32(i) {
			t.Fatalf("%s: %+v, %v", p, evs, err)
		}
	}
}
