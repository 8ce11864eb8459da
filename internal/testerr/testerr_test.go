package testerr

import (
	"errors"
	"fmt"
	"testing"
)

// recorder records whether Want failed the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatal(args ...any) { r.failed = fmt.Sprint(args...) }

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// TestWant runs Want on every pairing of an error or none with a wanted
// substring or none: it fails exactly when the error is not the wanted one
// and reports true exactly when an error is wanted.
func TestWant(t *testing.T) {
	for _, c := range []struct {
		err      error
		want     string
		fails    bool
		reported bool
	}{
		{nil, "", false, false},
		{errors.New("boom"), "", true, false},
		{nil, "boom", true, true},
		{errors.New("a boom here"), "boom", false, true},
		{errors.New("a bang here"), "boom", true, true},
	} {
		r := &recorder{TB: t}
		got := Want(r, c.err, c.want)
		if got != c.reported || (r.failed != "") != c.fails {
			t.Errorf("Want(%v, %q) = %v, failed %q; want %v, failing %v", c.err, c.want, got, r.failed, c.reported, c.fails)
		}
	}
}
