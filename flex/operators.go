package flex

// The operators of Int, Float and Bool expressions. Their semantics on
// every evaluator (CPU, interval, CUDA C, derivatives) are in opTable.

func (x Int) bin(o op, y Int) Int  { return Int{mk(o, kInt, x.node(), y.node())} }
func (x Int) un(o op) Int          { return Int{mk(o, kInt, x.node())} }
func (x Int) cmp(o op, y Int) Bool { return Bool{mk(o, kBool, x.node(), y.node())} }
func (x Float) bin(o op, y Float) Float {
	return Float{mk(o, kFloat, x.node(), y.node())}
}
func (x Float) un(o op) Float          { return Float{mk(o, kFloat, x.node())} }
func (x Float) cmp(o op, y Float) Bool { return Bool{mk(o, kBool, x.node(), y.node())} }

// Add returns x + y.
func (x Int) Add(y Int) Int { return x.bin(opAdd, y) }

// Sub returns x - y.
func (x Int) Sub(y Int) Int { return x.bin(opSub, y) }

// Mul returns x * y.
func (x Int) Mul(y Int) Int { return x.bin(opMul, y) }

// Div returns x // y as Python and PyTorch define it: the quotient rounded
// toward negative infinity (-7 // 2 == -4). x // 0 is 0.
func (x Int) Div(y Int) Int { return x.bin(opDiv, y) }

// Mod returns x % y as Python and PyTorch define it: x - y*(x // y), which
// has the sign of y (-7 % 2 == 1, 7 % -2 == -1). x % 0 is 0.
func (x Int) Mod(y Int) Int { return x.bin(opMod, y) }

// TruncDiv returns x / y rounded toward zero, as in Go and C (-7 / 2 == -3,
// torch.div(x, y, rounding_mode="trunc")). x / 0 is 0.
func (x Int) TruncDiv(y Int) Int { return x.bin(opTruncDiv, y) }

// TruncMod returns x % y with the sign of x, as in Go and C (-7 % 2 == -1,
// torch.fmod). x % 0 is 0.
func (x Int) TruncMod(y Int) Int { return x.bin(opTruncMod, y) }

// Neg returns -x.
func (x Int) Neg() Int { return x.un(opNeg) }

// Abs returns |x|.
func (x Int) Abs() Int { return x.un(opAbs) }

// Min returns min(x, y).
func (x Int) Min(y Int) Int { return x.bin(opMin, y) }

// Max returns max(x, y).
func (x Int) Max(y Int) Int { return x.bin(opMax, y) }

// Clamp returns min(max(x, lo), hi).
func (x Int) Clamp(lo, hi Int) Int { return x.Max(lo).Min(hi) }

// BitAnd returns x & y (two's complement).
func (x Int) BitAnd(y Int) Int { return x.bin(opBitAnd, y) }

// BitOr returns x | y.
func (x Int) BitOr(y Int) Int { return x.bin(opBitOr, y) }

// BitXor returns x ^ y.
func (x Int) BitXor(y Int) Int { return x.bin(opBitXor, y) }

// Shl returns x << s. The count is clamped into [0, 63] (CUDA: [0, 31]; the
// two agree while values stay within int32), so a negative count shifts by
// 0; bits shifted out are lost.
func (x Int) Shl(s Int) Int { return x.bin(opShl, s) }

// Shr returns x >> s, arithmetic (it rounds toward negative infinity, like
// Python's and PyTorch's >>), with the count clamped like Shl's.
func (x Int) Shr(s Int) Int { return x.bin(opShr, s) }

// Float converts x to a float expression.
func (x Int) Float() Float { return Float{mk(opToFloat, kFloat, x.node())} }

// Lt returns x < y.
func (x Int) Lt(y Int) Bool { return x.cmp(opLt, y) }

// Le returns x <= y.
func (x Int) Le(y Int) Bool { return x.cmp(opLe, y) }

// Gt returns x > y.
func (x Int) Gt(y Int) Bool { return x.cmp(opGt, y) }

// Ge returns x >= y.
func (x Int) Ge(y Int) Bool { return x.cmp(opGe, y) }

// Eq returns x == y.
func (x Int) Eq(y Int) Bool { return x.cmp(opEq, y) }

// Ne returns x != y.
func (x Int) Ne(y Int) Bool { return x.cmp(opNe, y) }

// Add returns x + y.
func (x Float) Add(y Float) Float { return x.bin(opAdd, y) }

// Sub returns x - y.
func (x Float) Sub(y Float) Float { return x.bin(opSub, y) }

// Mul returns x * y.
func (x Float) Mul(y Float) Float { return x.bin(opMul, y) }

// Div returns x / y (IEEE: x / 0 is ±Inf, 0 / 0 is NaN).
// Gradient: (1/y, -x/y²).
func (x Float) Div(y Float) Float { return x.bin(opDiv, y) }

// Neg returns -x.
func (x Float) Neg() Float { return x.un(opNeg) }

// Abs returns |x|. Gradient: sign(x), 0 at 0.
func (x Float) Abs() Float { return x.un(opAbs) }

// Min returns min(x, y); a NaN operand is ignored (C's fminf).
func (x Float) Min(y Float) Float { return x.bin(opMin, y) }

// Max returns max(x, y); a NaN operand is ignored (C's fmaxf).
func (x Float) Max(y Float) Float { return x.bin(opMax, y) }

// Exp returns e^x. Gradient: e^x.
func (x Float) Exp() Float { return x.un(opExp) }

// Tanh returns tanh(x). Gradient: 1 - tanh²(x).
func (x Float) Tanh() Float { return x.un(opTanh) }

// Log returns the natural logarithm ln x (IEEE: ln 0 = -Inf, ln x = NaN for
// x < 0). Gradient: 1/x.
func (x Float) Log() Float { return x.un(opLog) }

// Sqrt returns √x (IEEE: NaN for x < 0). Gradient: 1/(2√x), +Inf at 0.
func (x Float) Sqrt() Float { return x.un(opSqrt) }

// Pow returns x^y with C's pow semantics (a negative base with a
// non-integer exponent gives NaN; x^0 = 1). Gradient, as in PyTorch:
// y·x^(y-1) (0 where y == 0) and x^y·ln x (0 where x == 0 and y >= 0).
func (x Float) Pow(y Float) Float { return x.bin(opPow, y) }

// Sigmoid returns 1 / (1 + e^-x). Gradient: σ(x)(1 - σ(x)).
func (x Float) Sigmoid() Float { return x.un(opSigmoid) }

// Floor returns the largest integer <= x, as a float. Its gradient is 0
// (as in PyTorch): no gradient flows through it.
func (x Float) Floor() Float { return x.un(opFloor) }

// Ceil returns the least integer >= x, as a float; gradient 0 like Floor.
func (x Float) Ceil() Float { return x.un(opCeil) }

// Int converts x to an int expression like PyTorch's .int(): truncated
// toward zero, saturated to the int32 range, NaN giving 0. No gradient
// flows through it.
func (x Float) Int() Int { return Int{mk(opToInt, kInt, x.node())} }

// Lt returns x < y (false when either is NaN; likewise Le, Gt, Ge, Eq).
func (x Float) Lt(y Float) Bool { return x.cmp(opLt, y) }

// Le returns x <= y.
func (x Float) Le(y Float) Bool { return x.cmp(opLe, y) }

// Gt returns x > y.
func (x Float) Gt(y Float) Bool { return x.cmp(opGt, y) }

// Ge returns x >= y.
func (x Float) Ge(y Float) Bool { return x.cmp(opGe, y) }

// Eq returns x == y.
func (x Float) Eq(y Float) Bool { return x.cmp(opEq, y) }

// Ne returns x != y (true when either is NaN).
func (x Float) Ne(y Float) Bool { return x.cmp(opNe, y) }

// And returns x && y.
func (x Bool) And(y Bool) Bool { return Bool{mk(opAnd, kBool, x.node(), y.node())} }

// Or returns x || y.
func (x Bool) Or(y Bool) Bool { return Bool{mk(opOr, kBool, x.node(), y.node())} }

// Not returns !x.
func (x Bool) Not() Bool { return Bool{mk(opNot, kBool, x.node())} }
