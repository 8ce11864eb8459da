package flex

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"dflash/internal/switches"
)

// TestCheckedMode checks the CPU side of the checked mode: clamped reads
// pass silently without it; with Args.Check or DFLASH_FLEX_CHECK=1,
// NewBlockMask returns an *IndexError naming the tensor and an index that
// is really out of range, and Forward panics with one for a score program;
// in-range programs give identical results either way.
func TestCheckedMode(t *testing.T) {
	r := newRand(t)
	d := Dims{Batch: 1, HeadsQ: 2, HeadsKV: 1, LenQ: 20, LenKV: 30, HeadDim: 2}
	n := 5 + r.IntN(20) // it1 is shorter than LenKV + 3
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(r.IntN(30))
	}
	off := r.IntN(4)
	m := NewMask("late", KV().Lt(pT1.At(KV().Add(Const(off)))))
	mk := func(check bool) *Args {
		a := NewArgs().SetIntTensor("it1", ids, n).SetFloatTensor("ft1", randSlice(r, 3), 3)
		a.Check = check
		return a
	}
	if _, err := NewBlockMask(m, mk(false), d, 8, 8); err != nil {
		t.Fatalf("unchecked: %v", err)
	}
	for _, env := range []bool{false, true} {
		if env {
			t.Setenv(switches.FlexCheck.Name, "1")
		}
		_, err := NewBlockMask(m, mk(!env), d, 8, 8)
		var ie *IndexError
		if !errors.As(err, &ie) {
			t.Fatalf("env %v: error %v, want an *IndexError", env, err)
		}
		if ie.Tensor != "it1" || ie.Dim != 0 || ie.Index[0] < int64(n) || ie.Index[0] > int64(d.LenKV-1+off) ||
			!strings.Contains(err.Error(), `"it1"`) || !strings.Contains(err.Error(), fmt.Sprint(ie.Index)) {
			t.Fatalf("env %v: %v (tensor of %d, kv + %d read)", env, err, n, off)
		}
	}
	t.Setenv(switches.FlexCheck.Name, "sometimes")
	if _, err := NewBlockMask(m, mk(false), d, 8, 8); err == nil || !strings.Contains(err.Error(), `DFLASH_FLEX_CHECK="sometimes"`) {
		t.Fatalf("DFLASH_FLEX_CHECK=sometimes: %v, want an error naming it", err)
	}
	t.Setenv(switches.FlexCheck.Name, "0")

	// A score program reading ft1[kv] (3 entries) panics in Forward and
	// in Backward, with a message naming the program, tensor and index.
	a := mk(true)
	bm, err := NewBlockMask(Causal(), a, d, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	q, k := randSlice(r, d.Batch*d.HeadsQ*d.LenQ*2), randSlice(r, d.Batch*d.LenKV*2)
	bad := NewScore("bias", Score().Add(pF1.At(KV())))
	s := NewScore("bias", Score().Add(pF1.At(KV().Min(Const(2)))))
	o1, l1 := Forward(d, q, k, k, bm, s, a, 0.5)
	for name, run := range map[string]func(){
		"Forward":  func() { Forward(d, q, k, k, bm, bad, a, 0.5) },
		"Backward": func() { Backward(d, q, k, k, o1, l1, q, bm, bad, a, 0.5) },
	} {
		func() {
			defer func() {
				e, _ := recover().(*IndexError)
				if e == nil || e.Tensor != "ft1" || e.Index[0] < 3 || !strings.HasPrefix(e.Program, "score bias") ||
					!strings.Contains(e.Error(), `score bias reads tensor "ft1" at index [`) {
					t.Fatalf("%s with an out-of-range score read: recovered %v, want an *IndexError for ft1", name, e)
				}
			}()
			run()
		}()
	}
	// In range: same numbers with and without the check.
	o2, l2 := Forward(d, q, k, k, bm, s, mk(false).SetFloatTensor("ft1", a.FloatTensors["ft1"].Data, 3), 0.5)
	if w, at := maxErr(append(o1, l1...), append(o2, l2...), 0, 0); w != 0 {
		t.Fatalf("checked and unchecked results differ at %d", at)
	}
}

// TestCUDACheckedMode compiles a checked mask and score program with g++,
// reads out of range, and decodes flex_check_word: it must name the tensor,
// the dimension and the index read; the unchecked printing has no test.
func TestCUDACheckedMode(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found: the generated CUDA C is checked by compiling it as C++")
	}
	r := newRand(t)
	m := NewMask("m", pT2.At(B(), KV()).Lt(Q()))
	s := NewScore("s", Score().Add(pF2.At(H(), Q().Sub(KV()))))
	if strings.Contains(m.CUDA("f")+s.CUDA("sf")+s.CUDABackward("sf_bwd"), "flex_check") {
		t.Fatal("unchecked printing tests indices")
	}
	cases := []struct {
		score       bool
		b, h, q, kv int
		tensor      string
		dim         int
		index       int64
	}{
		{false, 1, 0, 3, 7 + r.IntN(20), "it2", 1, 0}, // it2 is [2, 7]
		{false, 0, 0, 3, -1 - r.IntN(5), "it2", 1, 0},
		{true, 0, 5, 3, 0, "ft2", 0, 5},             // ft2 is [3, 4]
		{true, 0, 1, 4 + r.IntN(9), 0, "ft2", 1, 0}, // q - kv >= 4: past dim 1
	}
	src := gxxPrelude + "static int P_it2[14];\nstatic float P_ft2[12];\n" +
		m.CUDA("mask_fn", Checked()) + s.CUDA("score_fn", Checked()) + "int main() {\n"
	for i := range cases {
		c := &cases[i]
		if c.score {
			src += fmt.Sprintf("  flex_check_word = 0; score_fn(0.5f, %d, %d, %d, %d, P_ft2, 3, 4);\n", c.b, c.h, c.q, c.kv)
			if c.dim == 1 {
				c.index = int64(c.q - c.kv)
			}
		} else {
			src += fmt.Sprintf("  flex_check_word = 0; mask_fn(%d, %d, %d, %d, P_it2, 2, 7);\n", c.b, c.h, c.q, c.kv)
			c.index = int64(c.kv)
		}
		src += "  printf(\"%llu\\n\", flex_check_word);\n"
	}
	src += "  return 0;\n}\n"
	words := strings.Fields(string(gxxRun(t, gxx, src)))
	for i, c := range cases {
		w, err := strconv.ParseUint(words[i], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		var ie *IndexError
		if err := CheckWordError(w, m, s); !errors.As(err, &ie) || ie.Tensor != c.tensor || ie.Dim != c.dim || ie.Index[c.dim] != c.index {
			t.Errorf("case %+v: check word %#x decodes to %v", c, w, err)
		}
	}
	if err := CheckWordError(0, m, s); err != nil {
		t.Errorf("word 0: %v", err)
	}
}
