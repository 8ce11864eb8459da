package flex

import (
	"math"
	"math/bits"
)

// op is one operation of the expression language. Each op is described once,
// in opTable; the evaluators (row closures, interval evaluation, CUDA C
// printing, derivatives, hashing and printing) read its entry, and
// TestEveryEvaluatorCoversEveryOp fails for an op that one of them misses.
type op uint8

const (
	opB op = iota
	opH
	opQ
	opKV
	opScore
	opConst    // integer constant (structural)
	opFConst   // float constant (structural)
	opIScalar  // named run-time int scalar
	opFScalar  // named run-time float scalar
	opITensor  // read of a named int tensor
	opFTensor  // read of a named float tensor
	opAdd      // int or float
	opSub      // int or float
	opMul      // int or float
	opDiv      // int: floor division (Python's //); float: x / y
	opMod      // int: floor modulo (Python's %), the sign of the divisor
	opTruncDiv // int: division truncated toward zero (C's /)
	opTruncMod // int: remainder with the sign of the dividend (C's %)
	opNeg      // int or float
	opMin      // int or float
	opMax      // int or float
	opAbs      // int or float
	opBitAnd   // int
	opBitOr    // int
	opBitXor   // int
	opShl      // int
	opShr      // int (arithmetic)
	opExp      // float
	opTanh     // float
	opLog      // float
	opSqrt     // float
	opPow      // float
	opSigmoid  // float
	opFloor    // float
	opCeil     // float
	opToFloat  // int -> float
	opToInt    // float -> int (truncating, saturating, NaN -> 0)
	opLt       // -> bool
	opLe       // -> bool
	opGt       // -> bool
	opGe       // -> bool
	opEq       // -> bool
	opNe       // -> bool
	opAnd      // bool
	opOr       // bool
	opNot      // bool
	opSelect   // select(cond, a, b)
	numOps
)

// opClass groups ops that the evaluators treat alike.
type opClass uint8

const (
	clsLeaf   opClass = iota // index variables, Score, constants, scalars
	clsTensor                // tensor reads: one operand per dimension
	clsArith                 // result kind = operand kind, per-kind functions below
	clsConv                  // int <-> float conversions
	clsCmp                   // comparisons of two ints or two floats
	clsLogic                 // and, or, not on bools
	clsSelect                // select(cond, a, b) of any kind
)

// sig is one typing of an op: its result kind and its operands' kinds.
type sig struct {
	res  kind
	args []kind
}

// ival is a closed interval of int values; fival of float values, with a
// flag for a possible NaN.
type ival struct{ lo, hi int64 }

type fival struct {
	lo, hi float64
	nan    bool
}

// opInfo describes one op for every evaluator.
type opInfo struct {
	name  string
	class opClass
	sigs  []sig  // accepted typings (nil for leaves and tensors)
	infix string // infix symbol in String (and CUDA C where no cuda form is given)
	comm  bool   // commutative: operands hash in either order

	// Int arithmetic: value, interval rule, CUDA C (operands %[1]s, %[2]s).
	i   func(x, y int64) int64
	ii  func(x, y ival) ival
	ci  string
	ciK func(x string, c int64) (string, bool) // CUDA C when operand 2 is the constant c

	// Float arithmetic: value, interval rule, CUDA C, partial derivatives
	// and their CUDA C (given the adjoint a, operands x, y and result out:
	// the expressions added to each operand's adjoint, "" for none).
	f   func(x, y float64) float64
	fi  func(x, y fival) fival
	cf  string
	df  func(x, y, out float64) (dx, dy float64)
	cdf func(a, x, y, out string) (dx, dy string)
	// zeroGrad marks a piecewise-constant op (floor, ceil): its derivative
	// is zero wherever it exists, so no gradient flows through it.
	zeroGrad bool
}

var (
	sigII  = []sig{{kInt, []kind{kInt}}}
	sigIII = []sig{{kInt, []kind{kInt, kInt}}}
	sigFF  = []sig{{kFloat, []kind{kFloat}}}
	sigFFF = []sig{{kFloat, []kind{kFloat, kFloat}}}
	sigN1  = []sig{{kInt, []kind{kInt}}, {kFloat, []kind{kFloat}}}
	sigN2  = []sig{{kInt, []kind{kInt, kInt}}, {kFloat, []kind{kFloat, kFloat}}}
	sigCmp = []sig{{kBool, []kind{kInt, kInt}}, {kBool, []kind{kFloat, kFloat}}}
)

// opTable describes every op; see opInfo.
var opTable = [numOps]opInfo{
	opB: {name: "b"}, opH: {name: "h"}, opQ: {name: "q"}, opKV: {name: "kv"}, opScore: {name: "score"},
	opConst: {name: "const"}, opFConst: {name: "fconst"}, opIScalar: {name: "iscalar"}, opFScalar: {name: "fscalar"},
	opITensor: {name: "itensor", class: clsTensor}, opFTensor: {name: "ftensor", class: clsTensor},

	opAdd: {name: "add", class: clsArith, sigs: sigN2, infix: "+", comm: true,
		i: func(x, y int64) int64 { return x + y }, ii: ivalAdd, ci: "%s + %s",
		f: func(x, y float64) float64 { return x + y }, fi: fivalAdd, cf: "%s + %s",
		df:  func(x, y, out float64) (float64, float64) { return 1, 1 },
		cdf: func(a, x, y, out string) (string, string) { return a, a }},
	opSub: {name: "sub", class: clsArith, sigs: sigN2, infix: "-",
		i: func(x, y int64) int64 { return x - y }, ii: ivalSub, ci: "%s - %s",
		f: func(x, y float64) float64 { return x - y }, fi: fivalSub, cf: "%s - %s",
		df:  func(x, y, out float64) (float64, float64) { return 1, -1 },
		cdf: func(a, x, y, out string) (string, string) { return a, "-" + a }},
	opMul: {name: "mul", class: clsArith, sigs: sigN2, infix: "*", comm: true,
		i: func(x, y int64) int64 { return x * y }, ii: ivalMul, ci: "%s * %s",
		f: func(x, y float64) float64 { return x * y }, fi: fivalMul, cf: "%s * %s",
		df:  func(x, y, out float64) (float64, float64) { return y, x },
		cdf: func(a, x, y, out string) (string, string) { return a + " * " + y, a + " * " + x }},
	opDiv: {name: "div", class: clsArith, sigs: sigN2, infix: "/",
		i: floorDiv, ii: ivalFloorDiv, ci: "flex_fdiv(%s, %s)", ciK: cudaFloorDivK,
		f: func(x, y float64) float64 { return x / y }, fi: fivalDiv, cf: "%s / %s",
		df: func(x, y, out float64) (float64, float64) { return 1 / y, -x / (y * y) },
		cdf: func(a, x, y, out string) (string, string) {
			return a + " / " + y, "-" + a + " * " + x + " / (" + y + " * " + y + ")"
		}},
	opMod:      {name: "mod", class: clsArith, sigs: sigIII, infix: "%", i: floorMod, ii: ivalFloorMod, ci: "flex_fmod(%s, %s)", ciK: cudaFloorModK},
	opTruncDiv: {name: "tdiv", class: clsArith, sigs: sigIII, i: truncDiv, ii: ivalTruncDiv, ci: "flex_tdiv(%s, %s)", ciK: cudaTruncK("/")},
	opTruncMod: {name: "tmod", class: clsArith, sigs: sigIII, i: truncMod, ii: ivalTruncMod, ci: "flex_tmod(%s, %s)", ciK: cudaTruncK("%")},
	opNeg: {name: "neg", class: clsArith, sigs: sigN1,
		i: func(x, _ int64) int64 { return -x }, ii: ivalNeg, ci: "-%s",
		f: func(x, _ float64) float64 { return -x }, fi: func(x, _ fival) fival { return fival{-x.hi, -x.lo, x.nan} }, cf: "-%s",
		df:  func(x, y, out float64) (float64, float64) { return -1, 0 },
		cdf: func(a, x, y, out string) (string, string) { return "-" + a, "" }},
	opMin: {name: "min", class: clsArith, sigs: sigN2, comm: true,
		i: func(x, y int64) int64 { return min(x, y) }, ii: func(x, y ival) ival { return ival{min(x.lo, y.lo), min(x.hi, y.hi)} }, ci: "min(%s, %s)",
		f: fmin, fi: fivalMin, cf: "fminf(%s, %s)",
		df: func(x, y, out float64) (float64, float64) { return pick(x < y || y != y) },
		cdf: func(a, x, y, out string) (string, string) {
			return cudaPick("("+x+" < "+y+" || "+y+" != "+y+")", a)
		}},
	opMax: {name: "max", class: clsArith, sigs: sigN2, comm: true,
		i: func(x, y int64) int64 { return max(x, y) }, ii: func(x, y ival) ival { return ival{max(x.lo, y.lo), max(x.hi, y.hi)} }, ci: "max(%s, %s)",
		f: fmax, fi: fivalMax, cf: "fmaxf(%s, %s)",
		df: func(x, y, out float64) (float64, float64) { return pick(x > y || y != y) },
		cdf: func(a, x, y, out string) (string, string) {
			return cudaPick("("+x+" > "+y+" || "+y+" != "+y+")", a)
		}},
	opAbs: {name: "abs", class: clsArith, sigs: sigN1,
		i: func(x, _ int64) int64 { return abs64(x) }, ii: ivalAbs, ci: "flex_abs(%s)",
		f: func(x, _ float64) float64 { return math.Abs(x) }, fi: fivalAbs, cf: "fabsf(%s)",
		df: func(x, y, out float64) (float64, float64) {
			switch {
			case x > 0:
				return 1, 0
			case x < 0:
				return -1, 0
			}
			return 0, 0
		},
		cdf: func(a, x, y, out string) (string, string) {
			return x + " > 0.0f ? " + a + " : (" + x + " < 0.0f ? -" + a + " : 0.0f)", ""
		}},
	opBitAnd: {name: "bitand", class: clsArith, sigs: sigIII, infix: "&", comm: true,
		i: func(x, y int64) int64 { return x & y }, ii: ivalBitAnd, ci: "%s & %s"},
	opBitOr: {name: "bitor", class: clsArith, sigs: sigIII, infix: "|", comm: true,
		i: func(x, y int64) int64 { return x | y }, ii: ivalBitOr, ci: "%s | %s"},
	opBitXor: {name: "bitxor", class: clsArith, sigs: sigIII, infix: "^", comm: true,
		i: func(x, y int64) int64 { return x ^ y }, ii: ivalBitXor, ci: "%s ^ %s"},
	opShl: {name: "shl", class: clsArith, sigs: sigIII, infix: "<<", i: shl, ii: ivalShl, ci: "flex_shl(%s, %s)"},
	opShr: {name: "shr", class: clsArith, sigs: sigIII, infix: ">>", i: shr, ii: ivalShr, ci: "flex_shr(%s, %s)"},
	opExp: {name: "exp", class: clsArith, sigs: sigFF, f: unary(math.Exp), fi: monotone(math.Exp), cf: "expf(%s)",
		df:  func(x, y, out float64) (float64, float64) { return out, 0 },
		cdf: func(a, x, y, out string) (string, string) { return a + " * " + out, "" }},
	opTanh: {name: "tanh", class: clsArith, sigs: sigFF, f: unary(math.Tanh), fi: monotone(math.Tanh), cf: "tanhf(%s)",
		df:  func(x, y, out float64) (float64, float64) { return 1 - out*out, 0 },
		cdf: func(a, x, y, out string) (string, string) { return a + " * (1.0f - " + out + " * " + out + ")", "" }},
	opLog: {name: "log", class: clsArith, sigs: sigFF, f: unary(math.Log), fi: fivalLogSqrt(math.Log), cf: "logf(%s)",
		df:  func(x, y, out float64) (float64, float64) { return 1 / x, 0 },
		cdf: func(a, x, y, out string) (string, string) { return a + " / " + x, "" }},
	opSqrt: {name: "sqrt", class: clsArith, sigs: sigFF, f: unary(math.Sqrt), fi: fivalLogSqrt(math.Sqrt), cf: "sqrtf(%s)",
		df:  func(x, y, out float64) (float64, float64) { return 0.5 / out, 0 },
		cdf: func(a, x, y, out string) (string, string) { return a + " * 0.5f / " + out, "" }},
	opPow: {name: "pow", class: clsArith, sigs: sigFFF, f: math.Pow, fi: fivalPow, cf: "powf(%s, %s)", df: dpow,
		cdf: func(a, x, y, out string) (string, string) {
			return "(" + y + " == 0.0f ? 0.0f : " + a + " * " + y + " * powf(" + x + ", " + y + " - 1.0f))",
				"((" + x + " == 0.0f && " + y + " >= 0.0f) ? 0.0f : " + a + " * " + out + " * logf(" + x + "))"
		}},
	opSigmoid: {name: "sigmoid", class: clsArith, sigs: sigFF, f: unary(sigmoid), fi: monotone(sigmoid), cf: "flex_sigmoid(%s)",
		df:  func(x, y, out float64) (float64, float64) { return out * (1 - out), 0 },
		cdf: func(a, x, y, out string) (string, string) { return a + " * " + out + " * (1.0f - " + out + ")", "" }},
	opFloor: {name: "floor", class: clsArith, sigs: sigFF, f: unary(math.Floor), fi: monotone(math.Floor), cf: "floorf(%s)", zeroGrad: true,
		df: func(x, y, out float64) (float64, float64) { return 0, 0 }},
	opCeil: {name: "ceil", class: clsArith, sigs: sigFF, f: unary(math.Ceil), fi: monotone(math.Ceil), cf: "ceilf(%s)", zeroGrad: true,
		df: func(x, y, out float64) (float64, float64) { return 0, 0 }},

	opToFloat: {name: "float", class: clsConv, sigs: []sig{{kFloat, []kind{kInt}}}},
	opToInt:   {name: "int", class: clsConv, sigs: []sig{{kInt, []kind{kFloat}}}},

	opLt: {name: "lt", class: clsCmp, sigs: sigCmp, infix: "<"},
	opLe: {name: "le", class: clsCmp, sigs: sigCmp, infix: "<="},
	opGt: {name: "gt", class: clsCmp, sigs: sigCmp, infix: ">"},
	opGe: {name: "ge", class: clsCmp, sigs: sigCmp, infix: ">="},
	opEq: {name: "eq", class: clsCmp, sigs: sigCmp, infix: "==", comm: true},
	opNe: {name: "ne", class: clsCmp, sigs: sigCmp, infix: "!=", comm: true},

	opAnd: {name: "and", class: clsLogic, sigs: []sig{{kBool, []kind{kBool, kBool}}}, infix: "&&", comm: true},
	opOr:  {name: "or", class: clsLogic, sigs: []sig{{kBool, []kind{kBool, kBool}}}, infix: "||", comm: true},
	opNot: {name: "not", class: clsLogic, sigs: []sig{{kBool, []kind{kBool}}}},

	opSelect: {name: "select", class: clsSelect, sigs: []sig{{kInt, []kind{kBool, kInt, kInt}},
		{kFloat, []kind{kBool, kFloat, kFloat}}, {kBool, []kind{kBool, kBool, kBool}}}},
}

func (o op) String() string { return opTable[o].name }

func unary(f func(float64) float64) func(x, y float64) float64 {
	return func(x, _ float64) float64 { return f(x) }
}

// pick returns the derivatives of a min or max that chose x (or y).
func pick(x bool) (dx, dy float64) {
	if x {
		return 1, 0
	}
	return 0, 1
}

func cudaPick(c, a string) (string, string) {
	return c + " ? " + a + " : 0.0f", c + " ? 0.0f : " + a
}

// Integer semantics. Division and remainder by 0 give 0, and by -1 never
// trap (x / -1 = -x, wrapping at the int64 minimum). Shift counts are
// clamped into [0, 63] (CUDA: [0, 31], which agrees while values stay
// within int32, the language's range); >> is arithmetic (sign-filling) and
// << wraps.

// floorDiv is Python's x // y: the quotient rounded toward -Inf.
func floorDiv(x, y int64) int64 {
	if y == 0 {
		return 0
	}
	if y == -1 {
		return -x
	}
	q := x / y
	if x%y != 0 && (x < 0) != (y < 0) {
		q--
	}
	return q
}

// floorMod is Python's x % y: x - y*(x // y), with the sign of y.
func floorMod(x, y int64) int64 {
	if y == 0 || y == -1 {
		return 0
	}
	r := x % y
	if r != 0 && (r < 0) != (y < 0) {
		r += y
	}
	return r
}

// truncDiv is C's x / y: the quotient rounded toward zero.
func truncDiv(x, y int64) int64 {
	if y == 0 {
		return 0
	}
	if y == -1 {
		return -x
	}
	return x / y
}

// truncMod is C's x % y, with the sign of x.
func truncMod(x, y int64) int64 {
	if y == 0 || y == -1 {
		return 0
	}
	return x % y
}

func shiftCount(s int64) uint { return uint(min(max(s, 0), 63)) }

func shl(x, s int64) int64 { return x << shiftCount(s) }

func shr(x, s int64) int64 { return x >> shiftCount(s) }

// toInt converts like PyTorch's .int(): truncation toward zero, saturated
// to the int32 range; NaN gives 0 (CUDA's cvt.rzi.s32.f32 does the same).
func toInt(x float64) int64 {
	switch {
	case x != x:
		return 0
	case x >= math.MaxInt32:
		return math.MaxInt32
	case x <= math.MinInt32:
		return math.MinInt32
	}
	return int64(x)
}

// sigmoid is 1 / (1 + e^-x).
func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// dpow returns the partial derivatives of x^y as PyTorch defines them:
// y·x^(y-1) (0 where y == 0) and x^y·ln x (0 where x == 0 and y >= 0).
func dpow(x, y, out float64) (dx, dy float64) {
	if y != 0 {
		dx = y * math.Pow(x, y-1)
	}
	if !(x == 0 && y >= 0) {
		dy = out * math.Log(x)
	}
	return dx, dy
}

// fmin and fmax follow C's fminf/fmaxf (and CUDA): a NaN operand is ignored.
func fmin(x, y float64) float64 {
	if x < y || y != y {
		return x
	}
	return y
}

func fmax(x, y float64) float64 {
	if x > y || y != y {
		return x
	}
	return y
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// cudaFloorDivK prints x // c for a constant c: an arithmetic shift for a
// power of two (exactly floor division), the helper otherwise.
func cudaFloorDivK(x string, c int64) (string, bool) {
	if c > 0 && c&(c-1) == 0 {
		return x + " >> " + itoa(int64(bits.TrailingZeros64(uint64(c)))), true
	}
	return "", false
}

// cudaFloorModK prints x % c for a constant power of two c as a mask.
func cudaFloorModK(x string, c int64) (string, bool) {
	if c > 0 && c&(c-1) == 0 {
		return x + " & " + itoa(c-1), true
	}
	return "", false
}

// cudaTruncK prints C's own / or % for a constant divisor other than 0 and -1.
func cudaTruncK(sym string) func(x string, c int64) (string, bool) {
	return func(x string, c int64) (string, bool) {
		if c == 0 || c == -1 {
			return "", false
		}
		return x + " " + sym + " " + itoa(c), true
	}
}
