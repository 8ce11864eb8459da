package termbar

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestBar(t *testing.T) {
	for _, c := range []struct {
		frac  float64
		width int
		want  string
	}{
		{0, 4, "[....]"},
		{0.5, 4, "[##..]"},
		{0.6, 4, "[##..]"}, // 2.4 cells round to 2
		{0.65, 4, "[###.]"},
		{1, 4, "[####]"},
		{1.7, 3, "[###]"}, // clamped
		{-0.2, 3, "[...]"},
	} {
		if got := Bar(c.frac, c.width); got != c.want {
			t.Errorf("Bar(%g, %d) = %q, want %q", c.frac, c.width, got, c.want)
		}
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || IsTerminal(&bytes.Buffer{}) {
		t.Error("a regular file or a buffer is reported as a terminal")
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !IsTerminal(tty) {
			t.Error("/dev/tty is not reported as a terminal")
		}
	} else {
		t.Logf("no /dev/tty here (%v): the positive case is not checked", err)
	}
}
