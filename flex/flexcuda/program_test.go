package flexcuda

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"dflash/cuda"
	"dflash/flex"
	"dflash/gpu"
)

// TestLayoutPacksSlots checks the FlexArgs layout of the DFlash mask with an
// ALiBi score: pointers first, then 32-bit words two per slot in parameter
// order, then the gradient pointer, and the C expressions that read them.
func TestLayoutPacksSlots(t *testing.T) {
	mask, score := flex.DFlashMask(16), flex.ALiBi()
	l, err := newLayout(mask.Params(), score.Params())
	if err != nil {
		t.Fatal(err)
	}
	// alibi_slopes, anchors, block_starts, ctx_len, num_valid: 4 pointers;
	// words: alibi d0, anchors d0 d1, block_starts d0 d1, ctx_len, num_valid
	// d0 = 7 words = 4 slots; 1 gradient.
	if got, want := l.slots(false), 8; got != want {
		t.Fatalf("forward slots %d, want %d", got, want)
	}
	if got, want := l.slots(true), 9; got != want {
		t.Fatalf("backward slots %d, want %d", got, want)
	}
	buf := func(p uint64, n int64) gpu.Buffer { return gpu.Buffer{Ptr: cuda.DevicePtr(p), Size: n} }
	a := NewArgs().SetInt(flex.DFlashCtxLen, 3072).
		SetTensor(flex.DFlashAnchors, Tensor{Buf: buf(0x1000, 4*2*512), Shape: []int{2, 512}}).
		SetTensor(flex.DFlashStarts, Tensor{Buf: buf(0x5000, 4*2*512), Shape: []int{2, 512}}).
		SetTensor(flex.DFlashNumValid, Tensor{Buf: buf(0x2000, 8), Shape: []int{2}}).
		SetTensor(flex.ALiBiSlopesName, Tensor{Buf: buf(0x3000, 4*32), Shape: []int{32}, Float: true})
	slots := make([]uint64, 9)
	if err := l.pack(slots, a, true, map[string]gpu.Buffer{flex.ALiBiSlopesName: buf(0x4000, 4*32)}); err != nil {
		t.Fatal(err)
	}
	want := []uint64{0x3000, 0x1000, 0x5000, 0x2000, 32 | 2<<32, 512 | 2<<32, 512 | 3072<<32, 2, 0x4000}
	for i := range want {
		if slots[i] != want[i] {
			t.Errorf("slot %d = %#x, want %#x", i, slots[i], want[i])
		}
	}
	p := l.program(mask, score, true)
	for _, s := range []string{
		"flex_user_mask(b, h, q, kv, (const int *)A.s[1], flex_hi(A, 4), flex_lo(A, 5), (const int *)A.s[2], flex_hi(A, 5), flex_lo(A, 6), flex_hi(A, 6), (const int *)A.s[3], flex_lo(A, 7))",
		"flex_user_score(s, b, h, q, kv, (const float *)A.s[0], flex_lo(A, 4))",
		"(float *)A.s[8]",
	} {
		if !strings.Contains(p.CUDA, s) {
			t.Errorf("generated program lacks %q", s)
		}
	}
	// Errors name what is wrong.
	for _, c := range []struct {
		args *Args
		want string
	}{
		{NewArgs(), "alibi_slopes"},
		{NewArgs().SetTensor(flex.ALiBiSlopesName, Tensor{Buf: buf(1, 128), Shape: []int{32}, Float: true}).
			SetTensor(flex.DFlashAnchors, Tensor{Buf: buf(1, 4096), Shape: []int{1024}}), "rank 2"},
		{NewArgs().SetTensor(flex.ALiBiSlopesName, Tensor{Buf: buf(1, 128), Shape: []int{32}}), "other element type"},
	} {
		if err := l.pack(slots, c.args, false, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pack: got %v, want an error naming %q", err, c.want)
		}
	}
	if err := l.pack(slots, a, true, nil); err == nil || !strings.Contains(err.Error(), "gradient buffer") {
		t.Errorf("backward without gradient buffer: got %v", err)
	}
	big := NewArgs().SetInt(flex.DFlashCtxLen, math.MaxInt32+1)
	ls, _ := newLayout(flex.DFlashMask(16).Params(), nil)
	big.SetTensor(flex.DFlashAnchors, Tensor{Buf: buf(1, 8), Shape: []int{1, 2}}).SetTensor(flex.DFlashStarts, Tensor{Buf: buf(1, 8), Shape: []int{1, 2}}).
		SetTensor(flex.DFlashNumValid, Tensor{Buf: buf(1, 4), Shape: []int{1}})
	if err := ls.pack(make([]uint64, ls.slots(false)), big, false, nil); err == nil || !strings.Contains(err.Error(), "int32") {
		t.Errorf("ctx_len past int32: got %v", err)
	}
}

// TestLayoutRejectsConflicts checks that a parameter used with two kinds by
// the mask and the score is an error, and that too many slots are refused.
func TestLayoutRejectsConflicts(t *testing.T) {
	m := flex.NewMask("m", flex.KV().Lt(flex.IntScalar("x")))
	s := flex.NewScore("s", flex.Score().Add(flex.FloatScalar("x")))
	if _, err := newLayout(m.Params(), s.Params()); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("conflicting parameter: got %v", err)
	}
	e := flex.KV().Ge(flex.Const(0))
	const n = 20 // two slots each: past cuda.MaxKernelArgs with the fixed parameters
	for i := 0; i < n; i++ {
		e = e.And(flex.KV().Lt(flex.IntTensorParam(fmt.Sprintf("tab_%d", i), 1).At(flex.Q())))
	}
	if _, err := New(nil, flex.NewMask("many", e), nil, Config{HeadDim: 64}); err == nil || !strings.Contains(err.Error(), "kernel arguments") {
		t.Errorf("%d tensors: got %v", n, err)
	}
}

// TestLayoutPacksFloatScalar checks that a float scalar set with SetFloat
// lands as its float32 bits in its word (parameters in name order:
// softcap word 0, the low half of slot 0, the mask's negative int scalar "w"
// word 1), read back with __int_as_float, and that a missing one is named.
func TestLayoutPacksFloatScalar(t *testing.T) {
	mask, score := flex.NewMask("w", flex.KV().Lt(flex.IntScalar("w"))), flex.SoftcapScalar()
	l, err := newLayout(mask.Params(), score.Params())
	if err != nil {
		t.Fatal(err)
	}
	r := newRand(t)
	v, w := 0.1+50*r.Float64(), int32(-1-r.IntN(1000))
	slots := make([]uint64, l.slots(false))
	if err := l.pack(slots, NewArgs().SetInt("w", int(w)).SetFloat(flex.SoftcapName, v), false, nil); err != nil {
		t.Fatal(err)
	}
	want := uint64(math.Float32bits(float32(v))) | uint64(uint32(w))<<32
	if len(slots) != 1 || slots[0] != want {
		t.Fatalf("slots %#x, want [%#x] (softcap %v)", slots, want, v)
	}
	if p := l.program(mask, score, false); !strings.Contains(p.CUDA, "__int_as_float(flex_lo(A, 0))") {
		t.Errorf("the score does not read softcap as the float bits of word 0:\n%s", p.CUDA)
	}
	if err := l.pack(slots, NewArgs().SetInt("w", 1), false, nil); err == nil || !strings.Contains(err.Error(), `float scalar "softcap"`) {
		t.Errorf("missing float scalar: got %v", err)
	}
}
