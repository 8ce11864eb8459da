package recipe_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"dflash/recipe"
)

// TestDrafterNotWritten: a run that ends on a file it could not write (a full disk:
// ENOSPC) says that the drafter was not written and names the last good checkpoint
// and --resume; with no checkpoint it says so; other errors are left as they are.
func TestDrafterNotWritten(t *testing.T) {
	s := tinySpec(t)
	out := s.Out
	if _, err := recipe.Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	full := &fs.PathError{Op: "write", Path: filepath.Join(out, ".drafter.tmp-1", "model.safetensors"), Err: syscall.ENOSPC}
	err := recipe.NotWritten(full, out)
	want := "the drafter was not written to " + filepath.Join(out, "drafter") + "; the last good checkpoint is " +
		filepath.Join(out, "checkpoint-2") + " (step 2): make room and run the same command with --resume"
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), full.Error()) {
		t.Fatalf("got %v\nwant %s, then %q", err, full, want)
	}
	empty := t.TempDir()
	if err := recipe.NotWritten(full, empty); err == nil || !strings.Contains(err.Error(), empty+" holds no checkpoint to resume from") {
		t.Fatalf("no checkpoint: %v", err)
	}
	other := errors.New(out + " belongs to another run")
	if err := recipe.NotWritten(other, out); err != other {
		t.Fatalf("another error became %v", err)
	}
	if err := recipe.NotWritten(nil, out); err != nil {
		t.Fatalf("nil became %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "drafter")); err != nil {
		t.Fatalf("the run itself exported no drafter: %v", err)
	}
}
