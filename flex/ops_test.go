package flex

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// opOperand returns operand j of kind k: depending on kv (a vector in row
// evaluation) or not (a scalar), with values of both signs, zero among
// them, and shift counts below 0 and above 63.
func opOperand(k kind, vec bool, j int) *node {
	switch {
	case k == kInt && vec && j == 0:
		return KV().Sub(IntScalar("s0")).n
	case k == kInt && vec:
		return Q().Sub(KV()).Add(IntScalar("s1")).n
	case k == kInt && j == 0:
		return Q().Mul(Const(-2)).Add(IntScalar("s1")).n
	case k == kInt:
		return Q().Sub(Const(25)).n
	case k == kFloat && vec && j == 0:
		return pF1.At(KV()).Mul(F(3)).n
	case k == kFloat && vec:
		return pF2.At(H(), KV()).Mul(F(4)).n
	case k == kFloat && j == 0:
		return pF1.At(Q()).Mul(F(3)).n
	case k == kFloat:
		return pF2.At(H(), Q()).n
	case vec:
		return KV().Lt(Q()).n
	}
	return Q().Lt(IntScalar("s0")).n
}

// asScore wraps a node of any kind into a float score program.
func asScore(name string, n *node) *ScoreProgram {
	switch n.kind {
	case kInt:
		return NewScore(name, Int{n}.Float())
	case kBool:
		return NewScore(name, SelectF(Bool{n}, F(1), F(-1)))
	}
	return NewScore(name, Float{n})
}

// TestEveryEvaluatorCoversEveryOp builds, for every op of opTable and each
// of its typings, programs whose operands are all scalars, all vectors or
// mixed, and runs every evaluator on them: row evaluation (scalar and
// vector paths) against the reference interpreter, interval evaluation
// (each value must lie in its block's enclosure), reverse-mode
// differentiation, CUDA C printing (forward and backward) and String. An
// op that an evaluator does not handle fails here; so does a table entry
// missing a function its typings need.
func TestEveryEvaluatorCoversEveryOp(t *testing.T) {
	r := newRand(t)
	d := Dims{Batch: 2, HeadsQ: 3, HeadsKV: 1, LenQ: 50, LenKV: 40, HeadDim: 1}
	for o := op(0); o < numOps; o++ {
		info := &opTable[o]
		if info.name == "" {
			t.Errorf("op %d has no table entry", o)
			continue
		}
		if info.class == clsLeaf || info.class == clsTensor {
			continue // every program reads them
		}
		if len(info.sigs) == 0 {
			t.Errorf("%s: no typings", o)
		}
		for _, sg := range info.sigs {
			checkTableEntry(t, o, sg)
			for mix := 0; mix < 4; mix++ {
				args := make([]*node, len(sg.args))
				for j, k := range sg.args {
					vec := mix == 1 || (mix == 2 && j == 0) || (mix == 3 && j > 0)
					args[j] = opOperand(k, vec, j)
				}
				s := asScore(fmt.Sprintf("%s_%s_%d", o, sg.res, mix), mk(o, sg.res, args...))
				t.Run(s.Name(), func(t *testing.T) { checkEvaluators(t, r, d, s) })
			}
		}
	}
}

func checkTableEntry(t *testing.T, o op, sg sig) {
	info := &opTable[o]
	if info.class != clsArith {
		return
	}
	switch sg.res {
	case kInt:
		if info.i == nil || info.ii == nil || info.ci == "" {
			t.Errorf("%s: int typing without value, interval rule or CUDA C", o)
		}
	case kFloat:
		if info.f == nil || info.fi == nil || info.cf == "" || info.df == nil || (info.cdf == nil && !info.zeroGrad) {
			t.Errorf("%s: float typing without value, interval rule, CUDA C or derivative", o)
		}
	}
}

// checkEvaluators runs every evaluator on s; see TestEveryEvaluatorCoversEveryOp.
func checkEvaluators(t *testing.T, r *rand.Rand, d Dims, s *ScoreProgram) {
	defer func() {
		if e := recover(); e != nil {
			t.Fatalf("%v: an evaluator does not handle it: %v", s, e)
		}
	}()
	a := randArgs(r, d)
	f, err := bind(s.plan, "score", a)
	if err != nil {
		t.Fatal(err)
	}
	const w = 8
	ev := compileRows(s.plan, w).newEval(f)
	iv := newIvalEval(s.plan, f)
	buildRangeTables(s.plan, f)
	ge := compileRows(s.plan, w).newGradEval(f)
	root := s.plan.root
	for k := 0; k < 6; k++ {
		b, h, q0, kv0 := r.IntN(2), r.IntN(3), r.IntN(46), r.IntN(d.LenKV-w)
		iv.setRows(b, h, q0, q0+4)
		iv.classify(kv0, kv0+w)
		for q := q0; q < q0+4; q++ {
			ev.setBH(b, h)
			ev.setRow(q)
			sc := make([]float64, w)
			ev.scoreRow(kv0, sc)
			for j, got := range sc {
				want := refScore(s, a, b, h, q, kv0+j, 0)
				if got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
					t.Fatalf("%v at b%d h%d q%d kv%d: %v, reference %v", s, b, h, q, kv0+j, got, want)
				}
				lo, hi := iv.flo[root], iv.fhi[root]
				if math.IsNaN(want) && !iv.nan[root] || !math.IsNaN(want) && (want < lo || want > hi) {
					t.Fatalf("%v at b%d h%d q%d kv%d: %v outside the block's enclosure [%v, %v] nan=%v",
						s, b, h, q, kv0+j, want, lo, hi, iv.nan[root])
				}
			}
			ge.setBH(b, h)
			ge.setRow(q)
			g, ds := make([]float64, w), make([]float64, w)
			for j := range g {
				g[j] = 1
			}
			ge.scoreGrad(kv0, sc, g, ds)
		}
	}
	for _, c := range []string{s.CUDA("fn"), s.CUDABackward("fn_bwd"), s.String()} {
		if strings.Contains(c, "%!") {
			t.Fatalf("%v: malformed printing:\n%s", s, c)
		}
	}
}

// TestIntOpsPythonSemantics checks the integer ops on the values Python
// (and PyTorch on int tensors) gives, through compiled row evaluation, the
// interval rules at a point, and the reference interpreter.
func TestIntOpsPythonSemantics(t *testing.T) {
	cases := []struct {
		o       op
		x, y    int64
		want    int64
		comment string
	}{
		{opDiv, -7, 2, -4, "-7 // 2"}, {opDiv, 7, -2, -4, "7 // -2"}, {opDiv, -7, -2, 3, "-7 // -2"},
		{opDiv, 7, 2, 3, "7 // 2"}, {opDiv, -8, 2, -4, "-8 // 2"}, {opDiv, 5, 0, 0, "x // 0 (defined as 0)"},
		{opMod, -7, 2, 1, "-7 % 2"}, {opMod, 7, -2, -1, "7 % -2"}, {opMod, -7, -2, -1, "-7 % -2"},
		{opMod, 7, 2, 1, "7 % 2"}, {opMod, -8, 2, 0, "-8 % 2"}, {opMod, 5, 0, 0, "x % 0 (defined as 0)"},
		{opTruncDiv, -7, 2, -3, "torch.div(-7, 2, rounding_mode='trunc')"}, {opTruncDiv, 7, -2, -3, "trunc"},
		{opTruncMod, -7, 2, -1, "math.fmod(-7, 2)"}, {opTruncMod, 7, -2, 1, "math.fmod(7, -2)"},
		{opBitAnd, -6, 3, 2, "-6 & 3"}, {opBitOr, -6, 3, -5, "-6 | 3"}, {opBitXor, -6, 3, -7, "-6 ^ 3"},
		{opShl, 3, 4, 48, "3 << 4"}, {opShl, -3, 2, -12, "-3 << 2"}, {opShl, 5, -1, 5, "negative count clamps to 0"},
		{opShr, -7, 1, -4, "-7 >> 1"}, {opShr, 7, 1, 3, "7 >> 1"}, {opShr, -1, 100, -1, "count clamps to 63"},
		{opShr, 1 << 40, 100, 0, "count clamps to 63"},
	}
	for _, c := range cases {
		e := Int{mk(c.o, kInt, Const(int(c.x)).n, Const(int(c.y)).n)}
		s := NewScore(c.comment, e.Float())
		f, err := bind(s.plan, "score", nil)
		if err != nil {
			t.Fatal(err)
		}
		ev := compileRows(s.plan, 1).newEval(f)
		ev.setBH(0, 0)
		ev.setRow(0)
		out := []float64{0}
		ev.scoreRow(0, out)
		ref := refScore(s, nil, 0, 0, 0, 0, 0)
		iv := opTable[c.o].ii(ival{c.x, c.x}, ival{c.y, c.y})
		if int64(out[0]) != c.want || int64(ref) != c.want || iv.lo > c.want || iv.hi < c.want {
			t.Errorf("%s %d %d (%s): compiled %v, reference %v, interval %v; want %d", c.o, c.x, c.y, c.comment, out[0], ref, iv, c.want)
		}
	}
	for _, c := range []struct{ x, want float64 }{{2.7, 2}, {-2.7, -2}, {math.NaN(), 0}, {1e10, math.MaxInt32}, {-1e10, math.MinInt32}} {
		if got := toInt(c.x); float64(got) != c.want {
			t.Errorf("int(%v) = %d, want %v", c.x, got, c.want)
		}
	}
}

// TestIntervalRulesSound fuzzes every interval rule of opTable: random
// operand intervals (small, huge, at the int64 edges, with infinities,
// signed zeros and possible NaNs for floats), random points inside; the
// op's value at the points must lie in the rule's interval.
func TestIntervalRulesSound(t *testing.T) {
	r := newRand(t)
	n := trials(20000, 3000)
	for o := op(0); o < numOps; o++ {
		info := &opTable[o]
		if info.class != clsArith {
			continue
		}
		for it := 0; it < n; it++ {
			if info.ii != nil {
				x, y := randIval(r), randIval(r)
				got := info.ii(x, y)
				for p := 0; p < 8; p++ {
					a, b := inIval(r, x), inIval(r, y)
					if v := info.i(a, b); v < got.lo || v > got.hi {
						t.Fatalf("%s(%d, %d) = %d outside %v, the rule's interval for %v, %v", o, a, b, v, got, x, y)
					}
				}
			}
			if info.fi != nil {
				x, y := randFival(r), randFival(r)
				got := info.fi(x, y)
				for p := 0; p < 8; p++ {
					a, b := inFival(r, x), inFival(r, y)
					v := info.f(a, b)
					if v != v && !got.nan || v == v && (v < got.lo || v > got.hi) {
						t.Fatalf("%s(%v, %v) = %v outside %+v, the rule's interval for %+v, %+v", o, a, b, v, got, x, y)
					}
				}
			}
		}
	}
}

func randInt64(r *rand.Rand) int64 {
	switch r.IntN(6) {
	case 0:
		return int64(r.Uint64())
	case 1:
		return []int64{minI, maxI, minI + 1, maxI - 1, 0, -1, 1}[r.IntN(7)]
	case 2:
		return int64(1)<<r.IntN(63) - int64(r.IntN(3))
	}
	return r.Int64N(200) - 100
}

func randIval(r *rand.Rand) ival {
	a, b := randInt64(r), randInt64(r)
	if r.IntN(3) == 0 {
		b = a + r.Int64N(5)
		if b < a {
			b = a
		}
	}
	return ival{min(a, b), max(a, b)}
}

func inIval(r *rand.Rand, x ival) int64 {
	switch r.IntN(4) {
	case 0:
		return x.lo
	case 1:
		return x.hi
	}
	w := uint64(x.hi) - uint64(x.lo)
	if w == math.MaxUint64 {
		return int64(r.Uint64())
	}
	return x.lo + int64(r.Uint64N(w+1))
}

func randFloat(r *rand.Rand) float64 {
	switch r.IntN(8) {
	case 0:
		return []float64{math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1, -1, 0.5, 2}[r.IntN(8)]
	case 1:
		return r.NormFloat64() * 1e3
	case 2:
		return float64(r.IntN(9) - 4)
	}
	return r.NormFloat64() * 3
}

func randFival(r *rand.Rand) fival {
	a, b := randFloat(r), randFloat(r)
	return fival{math.Min(a, b), math.Max(a, b), r.IntN(6) == 0}
}

func inFival(r *rand.Rand, x fival) float64 {
	switch r.IntN(6) {
	case 0:
		return x.lo
	case 1:
		return x.hi
	case 2:
		if x.nan {
			return math.NaN()
		}
		if x.lo == 0 && x.hi == 0 {
			return math.Copysign(0, -1)
		}
	}
	v := x.lo + r.Float64()*(x.hi-x.lo)
	if v != v || v < x.lo || v > x.hi { // inf - inf
		return x.lo
	}
	return v
}

// TestDerivativesFiniteDifferences checks every float op's partial
// derivatives (opTable's df) against central differences of its value at
// random points away from kinks; piecewise-constant ops have derivative 0.
func TestDerivativesFiniteDifferences(t *testing.T) {
	r := newRand(t)
	for o := op(0); o < numOps; o++ {
		info := &opTable[o]
		if info.f == nil {
			continue
		}
		for it := 0; it < 200; it++ {
			x, y := r.NormFloat64()*2, r.NormFloat64()*2
			if o == opLog || o == opSqrt || o == opPow {
				x = math.Abs(x) + 0.1
			}
			if math.Abs(x-y) < 1e-3 || math.Abs(x) < 1e-3 || math.Abs(x-math.Round(x)) < 1e-3 || math.Abs(y) < 0.05 {
				continue // kinks of min, max, abs, floor and ceil; the pole of x/y (central differences lose accuracy near it)
			}
			out := info.f(x, y)
			dx, dy := info.df(x, y, out)
			e := 1e-6
			wx := (info.f(x+e, y) - info.f(x-e, y)) / (2 * e)
			wy := (info.f(x, y+e) - info.f(x, y-e)) / (2 * e)
			binary := len(info.sigs[0].args) == 2
			if math.Abs(dx-wx) > 1e-5*(1+math.Abs(wx)) || binary && math.Abs(dy-wy) > 1e-5*(1+math.Abs(wy)) {
				t.Fatalf("%s at (%v, %v): derivatives (%v, %v), finite differences (%v, %v)", o, x, y, dx, dy, wx, wy)
			}
		}
	}
}

// cudaOpPrograms returns a score program for each arithmetic op and each
// conversion, for TestCUDACompilesAndAgrees: int ops on operands of both
// signs (zero divisors included; shift counts kept where int32 and int64
// agree), float ops on the score (so that the printed derivative is
// compared with finite differences), on domains where float32 and float64
// round alike.
func cudaOpPrograms() []*ScoreProgram {
	var ps []*ScoreProgram
	x, y := KV().Sub(IntScalar("s0")), Q().Sub(Const(25))
	for o := op(0); o < numOps; o++ {
		if opTable[o].class != clsArith || opTable[o].i == nil {
			continue
		}
		var e Int
		switch o {
		case opShl:
			e = x.Shl(Q().Sub(KV()).Mod(Const(12)).Sub(Const(2)))
		case opNeg, opAbs:
			e = Int{mk(o, kInt, x.n)}
		default:
			e = Int{mk(o, kInt, x.n, y.n)}
		}
		ps = append(ps, NewScore("int_"+o.String(), e.Float()))
	}
	s, pos := Score(), Score().Abs().Add(F(0.1))
	for _, e := range []Float{pos.Log(), pos.Sqrt(), pos.Pow(pF1.At(KV()).Mul(F(2))).Add(F(1.7).Pow(s.Mul(F(0.5)))),
		s.Sigmoid(), s.Floor().Add(s), s.Ceil().Mul(s), s.Mul(F(2)).Int().Float().Add(s)} {
		ps = append(ps, NewScore("float", e))
	}
	return ps
}
