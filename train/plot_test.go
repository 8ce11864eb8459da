package train

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestPreciseTicks checks that every labelled tick's label reads back as its
// value and that no two labels are equal, on ranges where gonum's default
// labels repeat.
func TestPreciseTicks(t *testing.T) {
	for _, r := range [][2]float64{{1, 1.125}, {0, 0.125}, {5.5, 7.9}, {-3e-4, 2e-4}, {1000, 1000.5}} {
		seen := map[string]bool{}
		for _, tk := range (preciseTicks{}).Ticks(r[0], r[1]) {
			if tk.Label == "" {
				continue
			}
			v, err := strconv.ParseFloat(tk.Label, 64)
			if err != nil || math.Abs(v-tk.Value) > 1e-6*(r[1]-r[0]) {
				t.Errorf("range %v: tick %g labelled %q", r, tk.Value, tk.Label)
			}
			if seen[tk.Label] {
				t.Errorf("range %v: label %q twice", r, tk.Label)
			}
			seen[tk.Label] = true
		}
	}
}

// TestPlotSpecTau checks that the real acceptance length is plotted: a
// metrics file whose only values are eval records' spec_tau draws its
// acceptance panel (with no series for it, PlotMetrics has nothing to plot).
func TestPlotSpecTau(t *testing.T) {
	dir := t.TempDir()
	var lines []byte
	for step, tau := range []float64{1.2, 2.5, 3.1} {
		b, err := Record{Kind: "eval", Step: 10 * (step + 1), Values: map[string]float64{"spec_tau": tau}}.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		lines = append(append(lines, b...), '\n')
	}
	metrics, png := filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, PlotFile)
	if err := os.WriteFile(metrics, lines, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := PlotMetrics(metrics, png); err != nil {
		t.Fatalf("spec_tau alone: %v", err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Fatalf("%s: %v", png, err)
	}
}
