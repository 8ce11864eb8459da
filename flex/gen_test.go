package flex

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// A testCase is a random attention problem: shape, programs and arguments.
type testCase struct {
	name    string
	d       Dims
	mask    *MaskProgram
	score   *ScoreProgram
	args    *Args
	bq, bkv int
}

func (c testCase) String() string {
	s := "<nil>"
	if c.score != nil {
		s = c.score.String()
	}
	return fmt.Sprintf("%s dims=%+v blocks=%dx%d mask=%s score=%s", c.name, c.d, c.bq, c.bkv, c.mask, s)
}

// randArgs fills the parameters the random programs read.
func randArgs(r *rand.Rand, d Dims) *Args {
	a := NewArgs()
	a.SetInt("s0", r.IntN(70)-5).SetInt("s1", r.IntN(20)+1)
	a.SetFloat("fs", r.Float64()*2+0.5)
	n1 := 1 + r.IntN(50)
	t1 := make([]int32, n1)
	for i := range t1 {
		t1[i] = int32(r.IntN(60) - 5)
	}
	a.SetIntTensor("it1", t1, n1)
	n2 := 1 + r.IntN(40)
	t2 := make([]int32, d.Batch*n2)
	for i := range t2 {
		t2[i] = int32(r.IntN(6))
	}
	if r.IntN(2) == 0 { // sorted rows: document-like runs
		for b := 0; b < d.Batch; b++ {
			slices.Sort(t2[b*n2 : (b+1)*n2])
		}
	}
	a.SetIntTensor("it2", t2, d.Batch, n2)
	f1 := make([]float64, d.HeadsQ+r.IntN(4))
	for i := range f1 {
		f1[i] = r.NormFloat64()
	}
	a.SetFloatTensor("ft1", f1, len(f1))
	nf2 := 1 + r.IntN(30)
	f2 := make([]float64, d.HeadsQ*nf2)
	for i := range f2 {
		f2[i] = r.NormFloat64() * 0.5
	}
	a.SetFloatTensor("ft2", f2, d.HeadsQ, nf2)
	return a
}

var (
	pT1 = IntTensorParam("it1", 1)
	pT2 = IntTensorParam("it2", 2)
	pF1 = FloatTensorParam("ft1", 1)
	pF2 = FloatTensorParam("ft2", 2)
)

func randInt(r *rand.Rand, depth int) Int {
	if depth <= 0 || r.IntN(3) == 0 {
		switch r.IntN(9) {
		case 0, 1:
			return Q()
		case 2, 3:
			return KV()
		case 4:
			return B()
		case 5:
			return H()
		case 6:
			return IntScalar("s0")
		case 7:
			return IntScalar("s1")
		default:
			return Const(r.IntN(50) - 10)
		}
	}
	x := randInt(r, depth-1)
	switch r.IntN(22) {
	case 0, 1:
		return x.Add(randInt(r, depth-1))
	case 2, 3:
		return x.Sub(randInt(r, depth-1))
	case 4:
		return x.Mul(Const(r.IntN(5) - 1))
	case 5:
		return x.Div(Const(r.IntN(20) + 1))
	case 6:
		return x.Div(randInt(r, depth-1))
	case 7:
		return x.Mod(Const(r.IntN(16) + 1))
	case 8:
		return x.Mod(randInt(r, depth-1))
	case 9:
		return x.Min(randInt(r, depth-1))
	case 10:
		return x.Max(randInt(r, depth-1)).Abs()
	case 11:
		return pT1.At(x)
	case 12:
		return pT2.At(B(), x)
	case 13:
		return x.TruncDiv(randInt(r, depth-1))
	case 14:
		return x.TruncMod(Const(r.IntN(9) - 4))
	case 15:
		return x.BitAnd(randInt(r, depth-1))
	case 16:
		return x.BitOr(Const(r.IntN(16) - 3)).BitXor(randInt(r, depth-1))
	case 17:
		return x.Shl(Const(r.IntN(6) - 1))
	case 18:
		return x.Shr(randInt(r, depth-1))
	case 19:
		return pF1.At(x).Mul(F(4)).Int()
	case 20:
		return pF2.At(H(), x).Sigmoid().Mul(F(7)).Floor().Int()
	default:
		return Select(randBool(r, depth-1), x, randInt(r, depth-1).Neg())
	}
}

func randBool(r *rand.Rand, depth int) Bool {
	if depth <= 0 || r.IntN(2) == 0 {
		x, y := randInt(r, depth-1), randInt(r, depth-1)
		switch r.IntN(8) {
		case 0:
			return x.Lt(y)
		case 1:
			return x.Le(y)
		case 2:
			return x.Gt(y)
		case 3:
			return x.Ge(y)
		case 4:
			return x.Eq(y)
		case 5:
			return x.Ne(y)
		case 6:
			return pF1.At(x).Mul(F(2)).Lt(pF2.At(H(), y).Add(F(0.1)))
		default:
			return pF1.At(x).Abs().Sqrt().Add(pF2.At(H(), y).Exp().Log()).
				Gt(pF1.At(y).Abs().Pow(pF2.At(H(), x)).Ceil().Sub(F(1)))
		}
	}
	switch r.IntN(4) {
	case 0:
		return randBool(r, depth-1).Or(randBool(r, depth-1))
	case 1:
		return randBool(r, depth-1).Not()
	case 2:
		return SelectB(randBool(r, depth-1), randBool(r, depth-1), randBool(r, depth-1))
	}
	return randBool(r, depth-1).And(randBool(r, depth-1))
}

// randMask returns a library mask with matching arguments or a random
// program; it may modify args.
func randMask(r *rand.Rand, d Dims, a *Args) *MaskProgram {
	switch r.IntN(9) {
	case 0:
		return Causal()
	case 1:
		return SlidingWindow(1 + r.IntN(20))
	case 2:
		pl := make([]int32, d.Batch)
		for i := range pl {
			pl[i] = int32(r.IntN(d.LenKV + 1))
		}
		a.SetIntTensor(PrefixLen, pl, d.Batch)
		return PrefixLM()
	case 3:
		n := max(d.LenQ, d.LenKV)
		ids := make([]int32, d.Batch*n)
		for b := 0; b < d.Batch; b++ {
			id := int32(0)
			for i := 0; i < n; i++ {
				if r.IntN(12) == 0 {
					id++
				}
				ids[b*n+i] = id
			}
		}
		a.SetIntTensor(DocIDs, ids, d.Batch, n)
		return Document(r.IntN(2) == 0)
	case 4:
		return Causal().Or(randMask(r, d, a)).And(NewMask("rand", randBool(r, 3)))
	}
	return NewMask("rand", randBool(r, 4))
}

// randScore returns nil, a library score program or a random one.
func randScore(r *rand.Rand, d Dims, a *Args) *ScoreProgram {
	switch r.IntN(7) {
	case 0, 1:
		return nil
	case 2:
		return Softcap(0.5 + 3*r.Float64())
	case 3:
		a.SetFloatTensor(ALiBiSlopesName, ALiBiSlopes(d.HeadsQ), d.HeadsQ)
		return ALiBi()
	case 4:
		md := r.IntN(8)
		t := make([]float64, d.HeadsQ*(2*md+1))
		for i := range t {
			t[i] = r.NormFloat64() * 0.5
		}
		a.SetFloatTensor(RelBiasName, t, d.HeadsQ, 2*md+1)
		return RelativeBias(md)
	case 5:
		return NewScore("rand", Score().Mul(pF1.At(H()).Abs().Add(F(0.5))).
			Add(pF2.At(H(), Q().Sub(KV()).Abs()).Tanh()).Add(SelectF(Q().Lt(KV()), F(-0.7), pF1.At(KV()))))
	}
	if r.IntN(2) == 0 {
		return NewScore("randfn", Score().Mul(pF1.At(H()).Sigmoid()).
			Add(pF2.At(H(), Q().Sub(KV()).Abs()).Abs().Add(F(0.5)).Log()).
			Add(pF1.At(KV()).Mul(pF1.At(KV())).Add(Score().Mul(Score())).Add(F(1)).Sqrt()).
			Add(pF1.At(Q()).Abs().Add(F(0.2)).Pow(pF2.At(H(), KV()).Add(F(1.5)))).
			Add(Q().Sub(KV()).Float().Div(F(3)).Floor().Mul(F(0.25))))
	}
	// exp of a bounded argument: exp(ft1²) reached 1e6 on some draws, where
	// float32 scores keep no fraction and the float32 kernels cannot match
	// the float64 reference (a property of the program, not of the kernels).
	return NewScore("randexp", FloatScalar("fs").Mul(Score().Div(FloatScalar("fs")).Tanh()).
		Sub(pF1.At(Q()).Mul(pF1.At(Q())).Tanh().Exp().Mul(F(0.1))))
}

// blockMask builds c's block mask for its dims, failing t when it cannot.
func (c testCase) blockMask(t *testing.T) *BlockMask {
	t.Helper()
	bm, err := NewBlockMask(c.mask, c.args, c.d, c.bq, c.bkv)
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	return bm
}

// problem holds the inputs of a random case: q, k, v and dout of its dims
// (float64, normal), the softmax scale 1/√HeadDim and its block mask.
type problem struct {
	q, k, v, dout []float64
	scale         float64
	bm            *BlockMask
}

// forRandProblems runs check as a subtest on trials(full, short) random
// cases of at most maxLen positions per side, each with its problem, all
// drawn from r; one case in ten at least is of DFlash rows packed with
// conversations.
func forRandProblems(t *testing.T, r *rand.Rand, full, short, maxLen int, check func(t *testing.T, c testCase, p problem)) {
	for i := range trials(full, short) {
		c := randCase(r, maxLen)
		if i%10 == 0 {
			c = randDFlashCase(r, maxLen, 2+r.IntN(3))
		}
		t.Run(c.name, func(t *testing.T) {
			q, k, v, dout := randQKVO(r, c.d)
			p := problem{q: q, k: k, v: v, dout: dout, scale: 1 / math.Sqrt(float64(c.d.HeadDim)), bm: c.blockMask(t)}
			check(t, c, p)
		})
	}
}

// denseMask builds c's dense mask, failing t when it cannot.
func (c testCase) denseMask(t *testing.T) *DenseMask {
	t.Helper()
	dm, err := NewDenseMask(c.mask, c.args, c.d, 0)
	if err != nil {
		t.Fatal(err)
	}
	return dm
}

// randCase draws a random problem of at most maxLen positions per side: a
// quarter of the time a DFlash one (randDFlashCase) of 1 to 4 conversations
// a row, otherwise a library or random mask.
func randCase(r *rand.Rand, maxLen int) testCase {
	if r.IntN(4) == 0 {
		return randDFlashCase(r, maxLen, 1+r.IntN(4))
	}
	d := randDims(r, maxLen)
	c := testCase{name: "random", d: d, bq: randBlock(r), bkv: randBlock(r)}
	c.args = randArgs(r, d)
	c.mask = randMask(r, d, c.args)
	c.score = randScore(r, c.d, c.args)
	return c
}

// randDFlashCase draws a DFlash problem with convs conversations packed in
// each context row (randPackedDFlash; 1: unpacked, every block start 0),
// sorted anchors and num_valid in [0, NumBlocks] (dead blocks).
func randDFlashCase(r *rand.Rand, maxLen, convs int) testCase {
	d := randDims(r, maxLen)
	bs := 1 + r.IntN(6)
	nb := 1 + r.IntN(max(1, maxLen/bs))
	ctx := 1 + r.IntN(maxLen)
	d = DFlashDims(d.Batch, d.HeadsQ, d.HeadsKV, nb, bs, ctx, d.HeadDim)
	anchors, starts := randPackedDFlash(r, d.Batch, nb, ctx, convs)
	valid := make([]int32, d.Batch)
	for b := range valid {
		valid[b] = int32(r.IntN(nb + 1))
	}
	c := testCase{name: fmt.Sprintf("dflash_convs%d", convs), d: d, mask: DFlashMask(bs), bq: randBlock(r), bkv: randBlock(r)}
	c.args = randArgs(r, d).SetInt(DFlashCtxLen, ctx).SetIntTensor(DFlashAnchors, anchors, d.Batch, nb).
		SetIntTensor(DFlashStarts, starts, d.Batch, nb).SetIntTensor(DFlashNumValid, valid, d.Batch)
	c.score = randScore(r, c.d, c.args)
	return c
}

// randPackedDFlash draws the anchors and block starts of batch context rows
// of ctx positions, nb blocks a row, each row cut at random points into
// convs conversations (fewer when ctx is too short): anchors uniform in [0,
// ctx), sorted ascending per row, each block's start the first position of
// the conversation that holds its anchor.
func randPackedDFlash(r *rand.Rand, batch, nb, ctx, convs int) (anchors, starts []int32) {
	anchors, starts = make([]int32, batch*nb), make([]int32, batch*nb)
	for b := 0; b < batch; b++ {
		cuts := []int32{0}
		if ctx > 1 {
			for _, p := range r.Perm(ctx - 1)[:min(convs-1, ctx-1)] {
				cuts = append(cuts, int32(p+1))
			}
		}
		slices.Sort(cuts)
		row := anchors[b*nb : (b+1)*nb]
		for j := range row {
			row[j] = int32(r.IntN(ctx))
		}
		slices.Sort(row)
		for j, a := range row {
			i, found := slices.BinarySearch(cuts, a)
			if !found {
				i--
			}
			starts[b*nb+j] = cuts[i]
		}
	}
	return anchors, starts
}

// randDims draws attention dimensions of at most maxLen positions per side.
func randDims(r *rand.Rand, maxLen int) Dims {
	hkv := 1 + r.IntN(2)
	return Dims{Batch: 1 + r.IntN(2), HeadsKV: hkv, HeadsQ: hkv * (1 + r.IntN(3)),
		LenQ: 1 + r.IntN(maxLen), LenKV: 1 + r.IntN(maxLen), HeadDim: 1 + r.IntN(19)}
}

// randBlock draws a block size (0: DefaultBlock).
func randBlock(r *rand.Rand) int {
	blocks := []int{1, 3, 4, 8, 16, 32, 0}
	return blocks[r.IntN(len(blocks))]
}
