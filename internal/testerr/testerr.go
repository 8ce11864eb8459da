// Package testerr checks the error of a table-driven test's case against
// the one the case expects.
package testerr

import (
	"strings"
	"testing"
)

// Want fails t unless err is what a case expects: an error whose text
// contains want, or no error when want is "". It reports whether the case
// expected an error, so that the case can end there:
//
//	got, err := Parse(c.in)
//	if testerr.Want(t, err, c.err) {
//		return
//	}
func Want(t testing.TB, err error, want string) bool {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
	return true
}
