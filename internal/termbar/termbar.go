// Package termbar holds the pieces every progress display of dflash shares:
// whether stderr is a terminal (then a bar is redrawn in place with "\r"),
// and how a bar is drawn.
package termbar

import (
	"io"
	"math"
	"os"
	"strings"
)

// IsTerminal reports whether w is a terminal (a character device).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Bar returns a bar of width cells, the fraction frac of them (rounded to
// nearest, clamped to [0, 1]) filled: "[######..........]".
func Bar(frac float64, width int) string {
	fill := int(math.Round(min(1, max(0, frac)) * float64(width)))
	return "[" + strings.Repeat("#", fill) + strings.Repeat(".", width-fill) + "]"
}
