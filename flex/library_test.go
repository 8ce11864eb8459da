package flex

import (
	"math"
	"slices"
	"testing"
)

// TestLibraryMasks checks each library mask against a direct Go statement
// of its definition at every pair of small random problems.
func TestLibraryMasks(t *testing.T) {
	r := newRand(t)
	const B, L = 2, 45
	prefix := []int32{int32(r.IntN(L)), int32(r.IntN(L))}
	ids := make([]int32, B*L)
	for i := range ids {
		ids[i] = int32(r.IntN(4))
	}
	slices.Sort(ids[:L])
	slices.Sort(ids[L:])
	args := NewArgs().SetIntTensor(PrefixLen, prefix, B).SetIntTensor(DocIDs, ids, B, L)
	w := 1 + r.IntN(10)
	cases := []struct {
		name string
		m    *MaskProgram
		want func(b, q, kv int) bool
	}{
		{"causal", Causal(), func(b, q, kv int) bool { return kv <= q }},
		{"window", SlidingWindow(w), func(b, q, kv int) bool { return kv <= q && q-kv < w }},
		{"prefixlm", PrefixLM(), func(b, q, kv int) bool { return kv <= q || kv < int(prefix[b]) }},
		{"document", Document(false), func(b, q, kv int) bool { return ids[b*L+q] == ids[b*L+kv] }},
		{"document_causal", Document(true), func(b, q, kv int) bool { return ids[b*L+q] == ids[b*L+kv] && kv <= q }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Dims{Batch: B, HeadsQ: 2, HeadsKV: 1, LenQ: L, LenKV: L, HeadDim: 1}
			dm, err := NewDenseMask(c.m, args, d, 0)
			if err != nil {
				t.Fatal(err)
			}
			for b := 0; b < B; b++ {
				for q := 0; q < L; q++ {
					for kv := 0; kv < L; kv++ {
						if got, want := dm.At(b, 1, q, kv), c.want(b, q, kv); got != want {
							t.Fatalf("%v at b%d q%d kv%d: %v, want %v", c.m, b, q, kv, got, want)
						}
					}
				}
			}
		})
	}
}

// TestDFlashMask checks the DFlash training mask against its definition in
// DESIGN.md: a query of block j sees the context positions of its own
// conversation (from block_starts[b, j]) strictly before anchor j and its own
// block bidirectionally; padding blocks see nothing.
func TestDFlashMask(t *testing.T) {
	r := newRand(t)
	for _, bs := range []int{1, 4, 16} {
		for _, convs := range []int{1, 3} {
			nb, ctx := 1+r.IntN(9), 1+r.IntN(80)
			d := DFlashDims(3, 2, 1, nb, bs, ctx, 4)
			anchors, starts := randPackedDFlash(r, 3, nb, ctx, convs)
			valid := []int32{int32(nb), int32(r.IntN(nb + 1)), 0}
			a := DFlashArgs(ctx, anchors, starts, nb, valid)
			dm, err := NewDenseMask(DFlashMask(bs), a, d, 0)
			if err != nil {
				t.Fatal(err)
			}
			for b := 0; b < 3; b++ {
				for q := 0; q < d.LenQ; q++ {
					j := q / bs
					for kv := 0; kv < d.LenKV; kv++ {
						want := false
						if j < int(valid[b]) {
							if kv < ctx {
								want = kv >= int(starts[b*nb+j]) && kv < int(anchors[b*nb+j])
							} else {
								pos := kv - ctx // draft position
								want = pos >= j*bs && pos < (j+1)*bs
							}
						}
						if got := dm.At(b, 0, q, kv); got != want {
							t.Fatalf("bs %d b%d q%d (block %d, start %d, anchor %d) kv%d: %v, want %v",
								bs, b, q, j, starts[b*nb+j], anchors[b*nb+j], kv, got, want)
						}
					}
				}
			}
		}
	}
}

// TestDFlashArgs checks DFlashArgs' defaults (block starts 0, every block
// valid) and that it panics on a block-start or num_valid slice of the wrong
// length.
func TestDFlashArgs(t *testing.T) {
	a := DFlashArgs(10, []int32{1, 5, 2, 7}, nil, 2, nil)
	if st := a.IntTensors[DFlashStarts]; !slices.Equal(st.Data, []int32{0, 0, 0, 0}) || !slices.Equal(st.Shape, []int{2, 2}) {
		t.Errorf("nil starts: %v shape %v, want zeros of shape [2 2]", st.Data, st.Shape)
	}
	if nv := a.IntTensors[DFlashNumValid]; !slices.Equal(nv.Data, []int32{2, 2}) {
		t.Errorf("nil num_valid: %v, want [2 2]", nv.Data)
	}
	st := []int32{0, 3, 0, 4}
	if got := DFlashArgs(10, []int32{1, 5, 2, 7}, st, 2, nil).IntTensors[DFlashStarts].Data; !slices.Equal(got, st) {
		t.Errorf("starts %v, want %v", got, st)
	}
	for _, c := range []struct {
		name          string
		starts, valid []int32
	}{{"short starts", []int32{0, 0, 0}, nil}, {"long starts", make([]int32, 5), nil}, {"short num_valid", nil, []int32{2}}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", c.name)
				}
			}()
			DFlashArgs(10, []int32{1, 5, 2, 7}, c.starts, 2, c.valid)
		}()
	}
}

// TestDFlashBlock checks which mask programs say they are DFlash's, and
// with what block size: DFlashMask's, not a program that only borrows its
// name nor a combination of it.
func TestDFlashBlock(t *testing.T) {
	for _, c := range []struct {
		name string
		p    *MaskProgram
		bs   int
		ok   bool
	}{
		{"dflash16", DFlashMask(16), 16, true},
		{"dflash3", DFlashMask(3), 3, true},
		{"causal", Causal(), 0, false},
		{"impostor", NewMask("dflash16", Q().Ge(KV())), 0, false},
		{"combined", DFlashMask(16).And(Causal()), 0, false},
		{"negated", DFlashMask(16).Not(), 0, false},
	} {
		bs, ok := c.p.DFlashBlock()
		if ok != c.ok || bs != c.bs {
			t.Errorf("%s: DFlashBlock = %d, %v; want %d, %v", c.name, bs, ok, c.bs, c.ok)
		}
	}
}

// TestDFlashIntervalExact checks that interval evaluation alone classifies
// the DFlash mask exactly (no block left undecided that is not truly
// partial) at a realistic size without padding nor packing, and that with
// padding or rows packed with conversations the default (refined)
// classification is exact.
func TestDFlashIntervalExact(t *testing.T) {
	r := newRand(t)
	nb := 64
	if raceEnabled {
		nb = 24
	}
	d := DFlashDims(2, 4, 1, nb, 16, 600, 8)
	anchors, _ := randPackedDFlash(r, 2, nb, 600, 1)
	packedAnchors, packedStarts := randPackedDFlash(r, 2, nb, 600, 5)
	all := []int32{int32(nb), int32(nb)}
	refined := func(*buildConfig) {}
	for _, c := range []struct {
		name            string
		anchors, starts []int32
		valid           []int32
		opt             BlockMaskOption
	}{
		{"interval", anchors, nil, all, NoRefine()},
		{"padding", anchors, nil, []int32{int32(nb), int32(nb) - 14}, refined},
		{"packed", packedAnchors, packedStarts, []int32{int32(nb) - 3, int32(nb)}, refined},
	} {
		a := DFlashArgs(600, c.anchors, c.starts, nb, c.valid)
		iv, err := NewBlockMask(DFlashMask(16), a, d, 0, 0, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := NewBlockMask(DFlashMask(16), a, d, 0, 0, Exact())
		if err != nil {
			t.Fatal(err)
		}
		if iv.Stats.Partial != ex.Stats.Partial || iv.Stats.Full != ex.Stats.Full {
			t.Fatalf("%s: %+v, exact %+v", c.name, iv.Stats, ex.Stats)
		}
		if !slices.Equal(iv.KVIdx, ex.KVIdx) || !slices.Equal(iv.FullKVIdx, ex.FullKVIdx) {
			t.Fatalf("%s: block lists differ from exact classification", c.name)
		}
	}
}

// TestLibraryScores checks the library score programs against their
// formulas.
func TestLibraryScores(t *testing.T) {
	r := newRand(t)
	slopes := ALiBiSlopes(8)
	for i, s := range slopes {
		if want := math.Pow(2, -float64(i+1)); math.Abs(s-want) > 1e-15 {
			t.Fatalf("ALiBi slope %d = %v, want %v", i, s, want)
		}
	}
	if s6 := ALiBiSlopes(6); len(s6) != 6 || s6[4] != 0.5 || s6[5] != 0.125 {
		t.Fatalf("ALiBiSlopes(6) = %v", s6)
	}
	md := 5
	table := randSlice(r, 3*(2*md+1))
	a := NewArgs().SetFloatTensor(ALiBiSlopesName, slopes[:3], 3).SetFloatTensor(RelBiasName, table, 3, 2*md+1).SetFloat(SoftcapName, 7)
	for n := 0; n < 200; n++ {
		h, q, kv, x := r.IntN(3), r.IntN(30), r.IntN(30), r.NormFloat64()*20
		rel := min(max(q-kv, -md), md) + md
		for _, c := range []struct {
			s    *ScoreProgram
			want float64
		}{
			{Softcap(7), 7 * math.Tanh(x/7)},
			{SoftcapScalar(), 7 * math.Tanh(x/7)},
			{ALiBi(), x + slopes[h]*float64(kv-q)},
			{RelativeBias(md), x + table[h*(2*md+1)+rel]},
		} {
			rp := compileRows(c.s.plan, 1)
			f, err := bind(c.s.plan, "test", a)
			if err != nil {
				t.Fatal(err)
			}
			ev := rp.newEval(f)
			ev.setBH(0, h)
			ev.setRow(q)
			v := []float64{x}
			ev.scoreRow(kv, v)
			if math.Abs(v[0]-c.want) > 1e-12*(1+math.Abs(c.want)) {
				t.Fatalf("%v at h%d q%d kv%d score %v: %v, want %v", c.s, h, q, kv, x, v[0], c.want)
			}
		}
	}
}
