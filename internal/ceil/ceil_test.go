package ceil

import "testing"

// TestDiv checks Div against the smallest q with q·b ≥ a.
func TestDiv(t *testing.T) {
	for a := 0; a <= 70; a++ {
		for b := 1; b <= 17; b++ {
			want := 0
			for want*b < a {
				want++
			}
			if got := Div(a, b); got != want {
				t.Fatalf("Div(%d, %d) = %d, want %d", a, b, got, want)
			}
		}
	}
}
