package kernels

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

func TestSourcesEmbedded(t *testing.T) {
	want := map[string][]string{
		"saxpy.cu": {"saxpy"},
	}
	names := map[string]bool{}
	for _, n := range Names() {
		names[n] = true
	}
	for file, kernels := range want {
		t.Run(file, func(t *testing.T) {
			if !names[file] {
				t.Fatalf("Names() lacks %s", file)
			}
			src := Source(file)
			if strings.Contains(src, "#include") {
				t.Errorf("%s includes a header; kernels must build alone", file)
			}
			for _, k := range kernels {
				if !strings.Contains(src, `extern "C" __global__ void `+k+"(") &&
					!strings.Contains(src, "\n"+k+"(") {
					t.Errorf("%s does not define extern \"C\" kernel %s", file, k)
				}
			}
		})
	}
}

func TestSourceMissingPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Source of a missing file did not panic")
		}
	}()
	Source("no-such.cu")
}

// TestEmbedLeavesDevOut checks that the embedded files are this folder's
// .cu and .cuh files only: the superseded variants of dev/ stay out.
func TestEmbedLeavesDevOut(t *testing.T) {
	if _, err := os.Stat(filepath.Join("dev", "README.md")); err != nil {
		t.Fatalf("dev/README.md: %v", err)
	}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		if d.IsDir() || strings.Contains(p, "/") || path.Ext(p) != ".cu" && path.Ext(p) != ".cuh" {
			t.Errorf("embedded %s: only the folder's .cu and .cuh files should be", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
