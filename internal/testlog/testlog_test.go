package testlog

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// TestCapture: the records that 8 goroutines log at once through the
// default logger all reach the Buffer, each whole on its own line, and the
// default logger is the old one again after the test.
func TestCapture(t *testing.T) {
	old := slog.Default()
	t.Run("capture", func(t *testing.T) {
		b := Capture(t)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 100 {
					slog.Info("record", "g", g, "i", i)
				}
			}()
		}
		wg.Wait()
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != 800 {
			t.Fatalf("%d lines, want 800", len(lines))
		}
		seen := map[string]bool{} // what follows msg= on each line: exactly one record's

		for _, l := range lines {
			i := strings.Index(l, "msg=record g=")
			if i < 0 || !strings.HasPrefix(l, "time=") {
				t.Fatalf("line %q is not one whole record", l)
			}
			seen[l[i:]] = true
		}
		for g := range 8 {
			for i := range 100 {
				if k := fmt.Sprintf("msg=record g=%d i=%d", g, i); !seen[k] {
					t.Fatalf("record %q is missing", k)
				}
			}
		}
	})
	if slog.Default() != old {
		t.Fatal("the default logger was not restored")
	}
}
