package flex

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"dflash/internal/testseed"
)

// newRand returns the test's generator (see package testseed).
func newRand(t testing.TB) *rand.Rand { return testseed.New(t) }

// refVal is a value of the reference interpreter.
type refVal struct {
	i int64
	f float64
	b bool
}

// refEval is an independent tree-walking interpreter of the expression
// language, used as the reference for compiled evaluation.
func refEval(n *node, a *Args, b, h, q, kv int, s float64) refVal {
	arg := func(i int) refVal { return refEval(n.args[i], a, b, h, q, kv, s) }
	switch n.op {
	case opB:
		return refVal{i: int64(b)}
	case opH:
		return refVal{i: int64(h)}
	case opQ:
		return refVal{i: int64(q)}
	case opKV:
		return refVal{i: int64(kv)}
	case opScore:
		return refVal{f: s}
	case opConst:
		return refVal{i: n.ival}
	case opFConst:
		return refVal{f: n.fval}
	case opIScalar:
		return refVal{i: int64(a.Ints[n.name])}
	case opFScalar:
		return refVal{f: a.Floats[n.name]}
	case opITensor, opFTensor:
		var shape []int
		if n.op == opITensor {
			shape = a.IntTensors[n.name].Shape
		} else {
			shape = a.FloatTensors[n.name].Shape
		}
		off := 0
		for d := range n.args {
			x := arg(d).i
			if x < 0 {
				x = 0
			}
			if x > int64(shape[d]-1) {
				x = int64(shape[d] - 1)
			}
			off = off*shape[d] + int(x)
		}
		if n.op == opITensor {
			return refVal{i: int64(a.IntTensors[n.name].Data[off])}
		}
		return refVal{f: a.FloatTensors[n.name].Data[off]}
	case opToFloat:
		return refVal{f: float64(arg(0).i)}
	case opToInt:
		x := arg(0).f
		switch {
		case math.IsNaN(x):
			return refVal{}
		case x > math.MaxInt32:
			return refVal{i: math.MaxInt32}
		case x < math.MinInt32:
			return refVal{i: math.MinInt32}
		}
		return refVal{i: int64(math.Trunc(x))}
	case opSelect:
		if arg(0).b {
			return arg(1)
		}
		return arg(2)
	case opAnd:
		return refVal{b: arg(0).b && arg(1).b}
	case opOr:
		return refVal{b: arg(0).b || arg(1).b}
	case opNot:
		return refVal{b: !arg(0).b}
	}
	x := arg(0)
	var y refVal
	if len(n.args) > 1 {
		y = arg(1)
	}
	return refOp(n.op, n.args[0].kind == kFloat, x, y)
}

// refOp applies a comparison or arithmetic op to the operand values x and
// y (isF: float operands).
func refOp(o op, isF bool, x, y refVal) refVal {
	switch o {
	case opLt:
		return refVal{b: (isF && x.f < y.f) || (!isF && x.i < y.i)}
	case opLe:
		return refVal{b: (isF && x.f <= y.f) || (!isF && x.i <= y.i)}
	case opGt:
		return refVal{b: (isF && x.f > y.f) || (!isF && x.i > y.i)}
	case opGe:
		return refVal{b: (isF && x.f >= y.f) || (!isF && x.i >= y.i)}
	case opEq:
		return refVal{b: (isF && x.f == y.f) || (!isF && x.i == y.i)}
	case opNe:
		return refVal{b: (isF && x.f != y.f) || (!isF && x.i != y.i)}
	}
	if isF {
		return refFloatOp(o, x, y)
	}
	return refIntOp(o, x, y)
}

// refFloatOp applies a float arithmetic op.
func refFloatOp(o op, x, y refVal) refVal {
	switch o {
	case opAdd:
		return refVal{f: x.f + y.f}
	case opSub:
		return refVal{f: x.f - y.f}
	case opMul:
		return refVal{f: x.f * y.f}
	case opDiv:
		return refVal{f: x.f / y.f}
	case opNeg:
		return refVal{f: -x.f}
	case opAbs:
		return refVal{f: math.Abs(x.f)}
	case opMin:
		if math.IsNaN(y.f) || x.f < y.f {
			return x
		}
		return y
	case opMax:
		if math.IsNaN(y.f) || x.f > y.f {
			return x
		}
		return y
	case opExp:
		return refVal{f: math.Exp(x.f)}
	case opTanh:
		return refVal{f: math.Tanh(x.f)}
	case opLog:
		return refVal{f: math.Log(x.f)}
	case opSqrt:
		return refVal{f: math.Sqrt(x.f)}
	case opPow:
		return refVal{f: math.Pow(x.f, y.f)}
	case opSigmoid:
		return refVal{f: 1 / (1 + math.Exp(-x.f))}
	case opFloor:
		return refVal{f: math.Floor(x.f)}
	case opCeil:
		return refVal{f: math.Ceil(x.f)}
	}
	panic("refEval: float op " + o.String())
}

// refIntOp applies an int arithmetic op.
func refIntOp(o op, x, y refVal) refVal {
	switch o {
	case opAdd:
		return refVal{i: x.i + y.i}
	case opSub:
		return refVal{i: x.i - y.i}
	case opMul:
		return refVal{i: x.i * y.i}
	case opDiv, opMod:
		q, r := refFloorDivMod(x.i, y.i)
		if o == opDiv {
			return refVal{i: q}
		}
		return refVal{i: r}
	case opTruncDiv:
		if y.i == 0 {
			return refVal{}
		}
		return refVal{i: x.i / y.i}
	case opTruncMod:
		if y.i == 0 {
			return refVal{}
		}
		return refVal{i: x.i % y.i}
	case opBitAnd:
		return refVal{i: x.i & y.i}
	case opBitOr:
		return refVal{i: x.i | y.i}
	case opBitXor:
		return refVal{i: x.i ^ y.i}
	case opShl, opShr:
		s := min(max(y.i, 0), 63)
		if o == opShl {
			return refVal{i: int64(uint64(x.i) * (uint64(1) << s))}
		}
		v := new(big.Int).Rsh(big.NewInt(x.i), uint(s)) // arithmetic: rounds toward -Inf
		return refVal{i: v.Int64()}
	case opNeg:
		return refVal{i: -x.i}
	case opAbs:
		if x.i < 0 {
			return refVal{i: -x.i}
		}
		return x
	case opMin:
		return refVal{i: min(x.i, y.i)}
	case opMax:
		return refVal{i: max(x.i, y.i)}
	}
	panic("refEval: op " + o.String())
}

// refFloorDivMod is Python's divmod(x, y) (with x // 0 = x % 0 = 0),
// computed with math/big: Euclidean division, which is floor division for
// a positive divisor, applied to (-x, -y) when y is negative.
func refFloorDivMod(x, y int64) (q, r int64) {
	if y == 0 {
		return 0, 0
	}
	bx, by := big.NewInt(x), big.NewInt(y)
	if y < 0 {
		bx.Neg(bx)
		by.Neg(by)
	}
	bq := new(big.Int).Div(bx, by)
	br := new(big.Int).Sub(big.NewInt(x), new(big.Int).Mul(bq, big.NewInt(y)))
	return bq.Int64(), br.Int64()
}

// refMask evaluates m at one pair with the reference interpreter.
func refMask(m *MaskProgram, a *Args, b, h, q, kv int) bool {
	return refEval(m.root, a, b, h, q, kv, 0).b
}

// refScore evaluates s (nil: identity) at one pair.
func refScore(s *ScoreProgram, a *Args, b, h, q, kv int, x float64) float64 {
	if s == nil {
		return x
	}
	return refEval(s.root, a, b, h, q, kv, x).f
}

// refForward is brute-force dense attention in float64.
func refForward(d Dims, q, k, v []float64, m *MaskProgram, s *ScoreProgram, a *Args, scale float64) (out, lse []float64) {
	D := d.HeadDim
	out = make([]float64, len(q))
	lse = make([]float64, d.Batch*d.HeadsQ*d.LenQ)
	sc := make([]float64, d.LenKV)
	for b := 0; b < d.Batch; b++ {
		for h := 0; h < d.HeadsQ; h++ {
			hk := h / (d.HeadsQ / d.HeadsKV)
			for i := 0; i < d.LenQ; i++ {
				qi := q[((b*d.HeadsQ+h)*d.LenQ+i)*D:][:D]
				mx := math.Inf(-1)
				for j := 0; j < d.LenKV; j++ {
					sc[j] = math.Inf(-1)
					if !refMask(m, a, b, h, i, j) {
						continue
					}
					kj := k[((b*d.HeadsKV+hk)*d.LenKV+j)*D:][:D]
					dot := 0.0
					for x := range qi {
						dot += qi[x] * kj[x]
					}
					sc[j] = refScore(s, a, b, h, i, j, dot*scale)
					mx = math.Max(mx, sc[j])
				}
				r := (b*d.HeadsQ+h)*d.LenQ + i
				if math.IsInf(mx, -1) {
					lse[r] = math.Inf(-1)
					continue
				}
				sum := 0.0
				for j := range sc {
					sum += math.Exp(sc[j] - mx)
				}
				lse[r] = mx + math.Log(sum)
				o := out[r*D:][:D]
				for j := range sc {
					p := math.Exp(sc[j] - lse[r])
					if p == 0 {
						continue
					}
					vj := v[((b*d.HeadsKV+hk)*d.LenKV+j)*D:][:D]
					for x := range o {
						o[x] += p * vj[x]
					}
				}
			}
		}
	}
	return out, lse
}

// refLoss is the scalar loss sum(out * dout) whose gradients Backward returns.
func refLoss(d Dims, q, k, v, dout []float64, m *MaskProgram, s *ScoreProgram, a *Args, scale float64) float64 {
	out, _ := refForward(d, q, k, v, m, s, a, scale)
	l := 0.0
	for i := range out {
		l += out[i] * dout[i]
	}
	return l
}

// trials returns full, or short under the race detector and -short.
func trials(full, short int) int {
	if raceEnabled || testing.Short() {
		return short
	}
	return full
}

// randQKVO returns random q, k, v and dout of d's shapes (float64, normal).
func randQKVO(r *rand.Rand, d Dims) (q, k, v, dout []float64) {
	q = randSlice(r, d.Batch*d.HeadsQ*d.LenQ*d.HeadDim)
	k = randSlice(r, d.Batch*d.HeadsKV*d.LenKV*d.HeadDim)
	return q, k, randSlice(r, len(k)), randSlice(r, len(q))
}

func randSlice(r *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	return x
}

// maxErr returns the largest |got - want| / (atol + rtol*|want|) over the
// elements, treating equal infinities as exact; > 1 fails.
func maxErr(got, want []float64, atol, rtol float64) (worst float64, at int) {
	for i := range want {
		g, w := got[i], want[i]
		if math.IsNaN(g) {
			return math.Inf(1), i
		}
		if math.IsInf(w, 0) || math.IsInf(g, 0) {
			if g != w {
				return math.Inf(1), i
			}
			continue
		}
		e := math.Abs(g-w) / (atol + rtol*math.Abs(w))
		if e > worst {
			worst, at = e, i
		}
	}
	return worst, at
}
