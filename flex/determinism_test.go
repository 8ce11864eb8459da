package flex

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"

	"dflash/dtype"
)

// TestBackwardDeterministic runs Forward and Backward many times under
// several GOMAXPROCS values and requires every output, gradient and score
// tensor gradient to be bitwise identical to the first run (GOMAXPROCS 1),
// so that training runs and resumed runs reproduce each other exactly.
// The problems have many kv blocks per q tile (many tasks add into one dq
// tile) and score programs that read float tensors.
func TestBackwardDeterministic(t *testing.T) {
	r := newRand(t)
	reps, scaleLen := 20, 1
	if raceEnabled || testing.Short() {
		reps, scaleLen = 4, 0
	}
	slopes := func(h int) *Args {
		return NewArgs().SetFloatTensor(ALiBiSlopesName, randSlice(r, h), h)
	}
	relBias := func(h, md int) *Args {
		return NewArgs().SetFloatTensor(RelBiasName, randSlice(r, h*(2*md+1)), h, 2*md+1)
	}
	anchors := func(batch, blocks, ctx int) *Args {
		a := make([]int32, batch*blocks)
		for b := 0; b < batch; b++ {
			row := a[b*blocks : (b+1)*blocks]
			for i := range row {
				row[i] = int32(r.IntN(ctx))
			}
			slices.Sort(row)
		}
		return DFlashArgs(ctx, a, nil, blocks, nil)
	}
	seq := 96 + 96*scaleLen
	nb := 8 + 8*scaleLen
	dfl := anchors(2, nb, 64)
	dfl.SetFloatTensor(RelBiasName, randSlice(r, 4*9), 4, 9)
	// headMask depends on the head, so each query head has its own block
	// lists (no sharing of mask work across a kv head's group).
	headMask := NewMask("head_causal", Q().Add(H().Mul(Const(7))).Ge(KV()))
	cases := []testCase{
		{"causal_gqa", Dims{Batch: 1, HeadsQ: 4, HeadsKV: 2, LenQ: seq, LenKV: seq, HeadDim: 32}, Causal(), nil, NewArgs(), 16, 16},
		{"causal_alibi", Dims{Batch: 2, HeadsQ: 2, HeadsKV: 1, LenQ: seq, LenKV: seq, HeadDim: 16}, Causal(), ALiBi(), slopes(2), 16, 8},
		{"head_mask_relbias", Dims{Batch: 1, HeadsQ: 4, HeadsKV: 2, LenQ: seq, LenKV: seq, HeadDim: 24}, headMask, RelativeBias(5), relBias(4, 5), 8, 16},
		{"dflash_relbias", DFlashDims(2, 4, 1, nb, 4, 64, 32), DFlashMask(4), RelativeBias(4), dfl, 16, 16},
	}
	procs := []int{1, 2, 8}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range cases {
		for _, f64 := range []bool{false, true} {
			name := c.name + "/float32"
			if f64 {
				name = c.name + "/float64"
			}
			t.Run(name, func(t *testing.T) {
				bm, err := NewBlockMask(c.mask, c.args, c.d, c.bq, c.bkv)
				if err != nil {
					t.Fatal(err)
				}
				d := c.d
				q, k, v, dout := randQKVO(r, d)
				run := func() map[string][]uint64 {
					if f64 {
						return fwdBwdBits(d, q, k, v, dout, bm, c.score, c.args)
					}
					return fwdBwdBits(d, dtype.Convert[float32](q), dtype.Convert[float32](k), dtype.Convert[float32](v), dtype.Convert[float32](dout), bm, c.score, c.args)
				}
				runtime.GOMAXPROCS(1)
				want := run()
				if c.score != nil && len(want) != 6 {
					t.Fatalf("got %d results, want out, lse, dq, dk, dv and one tensor gradient", len(want))
				}
				for _, p := range procs {
					runtime.GOMAXPROCS(p)
					for i := 0; i < reps; i++ {
						if err := sameBits(want, run()); err != nil {
							t.Fatalf("GOMAXPROCS %d, run %d: %v", p, i, err)
						}
					}
				}
			})
		}
	}
}

// fwdBwdBits runs Forward and Backward and returns the bits of every
// result: out, lse, dq, dk, dv and d<name> for each score tensor.
func fwdBwdBits[T float32 | float64](d Dims, q, k, v, dout []T, bm *BlockMask, score *ScoreProgram, args *Args) map[string][]uint64 {
	out, lse := Forward(d, q, k, v, bm, score, args, 0.3)
	g := Backward(d, q, k, v, out, lse, dout, bm, score, args, 0.3)
	res := map[string][]uint64{"out": bitsOf(out), "lse": bitsOf(lse), "dq": bitsOf(g.DQ), "dk": bitsOf(g.DK), "dv": bitsOf(g.DV)}
	for name, tg := range g.Tensors {
		res["d"+name] = bitsOf(tg)
	}
	return res
}

func bitsOf[T float32 | float64](x []T) []uint64 {
	b := make([]uint64, len(x))
	for i, y := range x {
		switch y := any(y).(type) {
		case float32:
			b[i] = uint64(math.Float32bits(y))
		case float64:
			b[i] = math.Float64bits(y)
		}
	}
	return b
}

// sameBits reports the first element whose bits differ between want and got.
func sameBits(want, got map[string][]uint64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d results, want %d", len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: missing or wrong length", name)
		}
		for i := range w {
			if w[i] != g[i] {
				return fmt.Errorf("%s[%d] has bits %#x, the first run (GOMAXPROCS 1) gave %#x", name, i, g[i], w[i])
			}
		}
	}
	return nil
}

// TestOrderedSumAnyArrivalOrder feeds orderedSum the contributions of
// random tasks in random arrival orders, from one goroutine and from
// several, and requires each tile to hold exactly the sum taken in task
// order, including tasks that add nothing (nil).
func TestOrderedSumAnyArrivalOrder(t *testing.T) {
	r := newRand(t)
	const nTiles, tileN, nTasks = 5, 6, 40
	last := 4 // the last tile is short, like a partial q tile
	base := func(tile int) (int, int) {
		if tile == nTiles-1 {
			return tile * tileN, last
		}
		return tile * tileN, tileN
	}
	type contrib struct {
		tile, pos int
		part      []float32
	}
	for trial := 0; trial < 20; trial++ {
		var cs []contrib
		touches := make([][]int, nTasks)
		for pos := 0; pos < nTasks; pos++ {
			for tile := 0; tile < nTiles; tile++ {
				if r.IntN(2) == 0 {
					continue
				}
				touches[pos] = append(touches[pos], tile)
				var part []float32
				if r.IntN(5) != 0 {
					part = make([]float32, tileN)
					for x := range part { // wide magnitudes make the order visible in the bits
						part[x] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(9)-4)))
					}
				}
				cs = append(cs, contrib{tile, pos, part})
			}
		}
		want := make([]float32, nTiles*tileN)
		for _, c := range cs { // cs is in task order
			off, n := base(c.tile)
			if c.part != nil {
				for x := 0; x < n; x++ {
					want[off+x] += c.part[x]
				}
			}
		}
		pairs := func(pos int, fn func(int)) {
			for _, tile := range touches[pos] {
				fn(tile)
			}
		}
		for _, workers := range []int{1, 4} {
			dq := make([]float32, nTiles*tileN)
			s := newOrderedSum(dq, nTiles, tileN, base, nTasks, pairs)
			perm := r.Perm(len(cs))
			parallelFor(len(perm), workers, func(_, i int) {
				c := cs[perm[i]]
				var part []float32
				if c.part != nil {
					part = slices.Clone(c.part)
				}
				s.add(c.tile, c.pos, part)
			})
			for i := range want {
				if math.Float32bits(dq[i]) != math.Float32bits(want[i]) {
					t.Fatalf("trial %d, %d workers: dq[%d] = %v, task-order sum %v", trial, workers, i, dq[i], want[i])
				}
			}
			for i := range s.tiles {
				if ts := &s.tiles[i]; ts.next != ts.hi || len(ts.parked) != 0 {
					t.Fatalf("trial %d: tile %d added %d of %d contributions, %d parked", trial, i, ts.next-ts.lo, ts.hi-ts.lo, len(ts.parked))
				}
			}
		}
	}
}

// TestTensorGradTake checks that take returns exactly the elements added
// since the previous take, with their sums, and resets them.
func TestTensorGradTake(t *testing.T) {
	r := newRand(t)
	tg := newTensorGrad(30)
	for round := 0; round < 5; round++ {
		want := make([]float64, 30)
		for i := 0; i < 50; i++ {
			off, x := r.IntN(30), r.NormFloat64()
			tg.add(off, x)
			want[off] += x
		}
		sg := tg.take()
		got := make([]float64, 30)
		seen := map[int]bool{}
		for i, off := range sg.idx {
			if seen[off] {
				t.Fatalf("round %d: element %d reported twice", round, off)
			}
			seen[off] = true
			got[off] = sg.val[i]
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("round %d: element %d = %v, want %v", round, i, got[i], want[i])
			}
		}
		for i := range tg.g {
			if tg.g[i] != 0 || tg.seen[i] {
				t.Fatalf("round %d: element %d not reset after take", round, i)
			}
		}
	}
}
