package train

import (
	"math"
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
