package directio

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// TestAllocAndWrite: Alloc's memory is aligned, zeroed and writable, and a
// direct write of it lands in the file (where the file system takes direct
// writes; elsewhere OpenFile's refusal is one Refused knows).
func TestAllocAndWrite(t *testing.T) {
	for _, n := range []int{Align, 3*Align + 17, 1 << 20} {
		b, err := Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || uintptr(unsafe.Pointer(&b[0]))%Align != 0 {
			t.Fatalf("Alloc(%d): %d bytes at %p, want %d at a multiple of %d", n, len(b), &b[0], n, Align)
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("Alloc(%d)[%d] = %d, want zeroed memory", n, i, b[i])
			}
			b[i] = byte(i*7 + 3)
		}
		if n%Align == 0 {
			path := filepath.Join(t.TempDir(), "f")
			f, err := OpenFile(path, os.O_CREATE|os.O_TRUNC, 0o644)
			switch {
			case Refused(err):
				t.Logf("%s refuses direct writes: %v", path, err)
			case err != nil:
				t.Fatal(err)
			default:
				if _, err := f.WriteAt(b, 0); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, b) {
					t.Errorf("read back %d bytes (%v), want the %d written", len(got), err, n)
				}
			}
		}
		if err := Free(b); err != nil {
			t.Fatal(err)
		}
	}
}
