package kernels

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// wgOff32 matches flex_common.cuh's flex_wg_off32, template line to the
// closing brace.
var wgOff32 = regexp.MustCompile(`(?s)template <int ROWS>\n__device__ __forceinline__ int flex_wg_off32\(.*?\n}\n`)

// TestWgOff32Swizzle builds flex_wg_off32 (its text from flex_common.cuh)
// with g++, runs it over every element of a 64-row fp32 tile of 64 columns,
// and checks it against the copy engine's 128-byte swizzle as CUDA defines
// it on addresses (byte address bits 4-6 XOR bits 7-9) of the unswizzled
// [cols/32][64][32] layout: the bulk dQ adds (FLEX_BWD_BULK) read the
// tile through a tensor map with that swizzle. It also checks what the
// comment claims of the stores: a warp's float2 stores of one 8-column
// block (rows r, r+8.. by lane/4, column pairs by lane%4) hit every bank
// exactly twice. It skips without g++.
func TestWgOff32Swizzle(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ to build flex_wg_off32 on the host")
	}
	fn := wgOff32.FindString(Source("flex_common.cuh"))
	if fn == "" {
		t.Fatal("flex_wg_off32 not found in flex_common.cuh")
	}
	const rows, cols = 64, 64
	prog := "#include <cstdio>\n#define __device__\n#define __forceinline__ inline\n" + fn +
		fmt.Sprintf("int main() { for (int r = 0; r < %d; r++) for (int c = 0; c < %d; c++) printf(\"%%d\\n\", flex_wg_off32<%d>(r, c)); }\n", rows, cols, rows)
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "off.cc"), filepath.Join(dir, "off")
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gxx, "-std=c++17", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != rows*cols {
		t.Fatalf("%d offsets, want %d", len(lines), rows*cols)
	}
	off := func(r, c int) int {
		v, err := strconv.Atoi(lines[r*cols+c])
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for r := range rows {
		for c := range cols {
			lin := ((c/32)*rows+r)*128 + c%32*4 // bytes, unswizzled
			want := lin ^ (lin>>7&7)<<4
			if got := off(r, c) * 4; got != want {
				t.Fatalf("flex_wg_off32<%d>(%d, %d) = byte %d, the 128-byte swizzle puts it at %d", rows, r, c, got, want)
			}
		}
	}
	for r0 := 0; r0 < rows; r0 += 8 {
		for n := range cols / 8 {
			var hits [32]int
			for lane := range 32 {
				w := off(r0+lane/4, n*8+lane%4*2)
				hits[w%32]++
				hits[(w+1)%32]++
			}
			for b, h := range hits {
				if h != 2 {
					t.Fatalf("rows %d.., column block %d: bank %d taken by %d stores, want 2", r0, n, b, h)
				}
			}
		}
	}
}
