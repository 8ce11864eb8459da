package kernels

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// wgmmaWidths are the N of the m64nNk16 wrappers of flex_wgmma.cuh.
var wgmmaWidths = []int{32, 64, 128, 256}

// adjacentStrings matches the gap between two adjacent string literals.
var adjacentStrings = regexp.MustCompile(`"\s+"`)

// TestWgmmaOperands expands flex_wgmma.cuh with g++'s preprocessor (it
// skips without g++) and checks each wrapper against its operand numbering
// built here: for width N, R = N/2 accumulators %0..%R-1 with constraints
// "+f"(d[0..R-1]); shared-memory A: da %R, db %R+1, acc %R+2 (the
// predicate), TA %R+3, TB %R+4; register A: a %R..%R+3, db %R+4, acc %R+5,
// TB %R+6. It also checks that flex_wgmma_ss and flex_wgmma_rs dispatch
// every width to its wrapper.
func TestWgmmaOperands(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++ to expand flex_wgmma.cuh's macros")
	}
	cmd := exec.Command("g++", "-E", "-P", "-x", "c++", "-")
	cmd.Stdin = strings.NewReader("#define FLEX_PTX_AB \"bf16\"\n" + Source("flex_wgmma.cuh"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("g++ -E: %v\n%s", err, out)
	}
	text := adjacentStrings.ReplaceAllString(string(out), "") // "a" "b" -> "ab", as the compiler joins them
	list := func(from, to int, f string) string {
		s := make([]string, 0, to-from)
		for i := from; i < to; i++ {
			s = append(s, fmt.Sprintf(f, i))
		}
		return strings.Join(s, ", ")
	}
	for _, n := range wgmmaWidths {
		r := n / 2
		head := func(pred int) string {
			return fmt.Sprintf(`"{\n.reg .pred p;\nsetp.ne.b32 p, %%%d, 0;\nwgmma.mma_async.sync.aligned.m64n%dk16.f32.bf16.bf16 {%s}, `, pred, n, list(0, r, "%%%d"))
		}
		d := list(0, r, `"+f"(d[%d])`)
		for _, want := range []string{
			fmt.Sprintf(`void flex_wgmma_ss%d(float (&d)[%d], unsigned long long da, unsigned long long db, int acc)`, n, r),
			head(r+2) + fmt.Sprintf(`%%%d, %%%d, p, 1, 1, %%%d, %%%d;\n}\n" : %s : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));`, r, r+1, r+3, r+4, d),
			fmt.Sprintf(`void flex_wgmma_rs%d(float (&d)[%d], const unsigned (&a)[4], unsigned long long db, int acc)`, n, r),
			head(r+5) + fmt.Sprintf(`{%s}, %%%d, p, 1, 1, %%%d;\n}\n" : %s : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));`, list(r, r+4, "%%%d"), r+4, r+6, d),
			fmt.Sprintf("if constexpr (N == %d) flex_wgmma_ss%d<TA, TB> (d, da, db, acc)", n, n),
			fmt.Sprintf("if constexpr (N == %d) flex_wgmma_rs%d<TB> (d, a, db, acc)", n, n),
		} {
			if !strings.Contains(text, want) {
				t.Errorf("m64n%dk16: the expanded header lacks\n%s", n, want)
			}
		}
	}
	if n := strings.Count(text, "asm volatile("); n != 2*len(wgmmaWidths) {
		t.Errorf("%d wrappers, want %d", n, 2*len(wgmmaWidths))
	}
}
