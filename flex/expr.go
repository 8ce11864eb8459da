package flex

import (
	"fmt"
	"math"
	"strings"
)

// kind is the type of an expression.
type kind uint8

const (
	kInt kind = iota
	kFloat
	kBool
)

func (k kind) String() string {
	switch k {
	case kInt:
		return "int"
	case kFloat:
		return "float"
	}
	return "bool"
}

// node is one immutable expression node. Nodes form a DAG; programs are
// canonicalised (common subexpressions merged) when they are compiled.
type node struct {
	op   op
	kind kind
	args []*node
	ival int64   // opConst
	fval float64 // opFConst
	name string  // scalars and tensors
}

// Int is an integer-valued expression (64-bit on the CPU; programs must keep
// their values within int32 so that the CUDA code, which uses int, agrees).
type Int struct{ n *node }

// Float is a floating-point expression (float64 on the CPU, float on CUDA).
type Float struct{ n *node }

// Bool is a boolean expression.
type Bool struct{ n *node }

func (x Int) node() *node {
	if x.n == nil {
		panic("flex: use of a zero Int expression (build expressions with flex.Q, flex.Const, ...)")
	}
	return x.n
}

func (x Float) node() *node {
	if x.n == nil {
		panic("flex: use of a zero Float expression (build expressions with flex.Score, flex.F, ...)")
	}
	return x.n
}

func (x Bool) node() *node {
	if x.n == nil {
		panic("flex: use of a zero Bool expression (build expressions with comparisons)")
	}
	return x.n
}

func mk(o op, k kind, args ...*node) *node { return &node{op: o, kind: k, args: args} }

// B is the batch index.
func B() Int { return Int{mk(opB, kInt)} }

// H is the query head index.
func H() Int { return Int{mk(opH, kInt)} }

// Q is the query position.
func Q() Int { return Int{mk(opQ, kInt)} }

// KV is the key/value position.
func KV() Int { return Int{mk(opKV, kInt)} }

// Score is the attention score q·k·scale that a score program modifies. It
// may appear only in score programs.
func Score() Float { return Float{mk(opScore, kFloat)} }

// Const is an integer constant. Constants are structural: they are baked into
// generated kernels and take part in the program hash.
func Const(v int) Int { return Int{&node{op: opConst, kind: kInt, ival: int64(v)}} }

// F is a float constant; like Const it is structural.
func F(v float64) Float {
	if math.IsNaN(v) {
		panic("flex: F(NaN)")
	}
	return Float{&node{op: opFConst, kind: kFloat, fval: v}}
}

// IntScalar is a named run-time integer (for example a context length). Its
// value comes from Args.Ints at run time and is not part of the program hash.
func IntScalar(name string) Int {
	checkName(name)
	return Int{&node{op: opIScalar, kind: kInt, name: name}}
}

// FloatScalar is a named run-time float, read from Args.Floats.
func FloatScalar(name string) Float {
	checkName(name)
	return Float{&node{op: opFScalar, kind: kFloat, name: name}}
}

// reservedNames may not name parameters or generated functions: the index
// variables and locals of generated code, and C/CUDA words they could meet.
var reservedNames = map[string]bool{"b": true, "h": true, "q": true, "kv": true, "score": true, "g": true,
	"int": true, "float": true, "bool": true, "const": true, "return": true, "if": true, "else": true,
	"for": true, "while": true, "do": true, "true": true, "false": true, "min": true, "max": true,
	"char": true, "void": true, "double": true, "long": true, "short": true, "unsigned": true, "signed": true,
	"auto": true, "static": true, "struct": true, "union": true, "switch": true, "case": true, "break": true,
	"continue": true, "default": true, "goto": true, "sizeof": true, "volatile": true, "register": true,
	"extern": true, "inline": true, "restrict": true, "enum": true, "typedef": true, "INFINITY": true, "NAN": true}

func checkName(name string) {
	if name == "" {
		panic("flex: empty parameter name")
	}
	if reservedNames[name] || cudaHelperNames[name] || strings.HasPrefix(name, "__") ||
		(len(name) > 1 && (name[0] == 't' || name[0] == 'a') && strings.Trim(name[1:], "0123456789") == "") {
		panic(fmt.Sprintf("flex: name %q is reserved (index variables, generated locals t<N>/a<N>, the CUDA helpers flex_*, C keywords)", name))
	}
	for i, r := range name {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			panic(fmt.Sprintf("flex: parameter name %q is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", name))
		}
	}
}

// IntTensorRef names an integer tensor of a fixed rank that programs read by index.
type IntTensorRef struct {
	Name string
	Rank int
}

// FloatTensorRef names a float tensor of a fixed rank that programs read by index.
type FloatTensorRef struct {
	Name string
	Rank int
}

// IntTensorParam declares an int tensor parameter; its data comes from
// Args.IntTensors at run time. Reads clamp each index into its dimension
// ([0, dim-1]), on the CPU and in CUDA alike, so an out-of-range index reads
// the first or last entry; the checked mode (Args.Check, DFLASH_FLEX_CHECK=1)
// reports such reads with the tensor's name and the index instead.
func IntTensorParam(name string, rank int) IntTensorRef {
	checkTensor(name, rank)
	return IntTensorRef{name, rank}
}

// FloatTensorParam declares a float tensor parameter; its data comes from
// Args.FloatTensors at run time. Score programs get its gradient in Backward
// (a clamped read adds its gradient to the entry it read). Indices clamp as
// IntTensorParam's do, and the checked mode reports out-of-range reads.
func FloatTensorParam(name string, rank int) FloatTensorRef {
	checkTensor(name, rank)
	return FloatTensorRef{name, rank}
}

func checkTensor(name string, rank int) {
	checkName(name)
	if rank < 1 {
		panic(fmt.Sprintf("flex: tensor %q: rank %d < 1", name, rank))
	}
}

// At reads t[idx...]. Each index is clamped into [0, dim-1] of its dimension,
// so reads never fail; programs guard with Select where clamping is not
// wanted, and the checked mode reports reads that would be clamped.
func (t IntTensorRef) At(idx ...Int) Int { return Int{tensorRead(opITensor, t.Name, t.Rank, idx)} }

// At reads t[idx...] with the same clamping as IntTensorRef.At.
func (t FloatTensorRef) At(idx ...Int) Float {
	return Float{tensorRead(opFTensor, t.Name, t.Rank, idx)}
}

// tensorRead returns the node of a read (opITensor or opFTensor) of the
// tensor name of rank rank at idx.
func tensorRead(o op, name string, rank int, idx []Int) *node {
	k := kInt
	if o == opFTensor {
		k = kFloat
	}
	if len(idx) != rank {
		panic(fmt.Sprintf("flex: %s tensor %q has rank %d, indexed with %d indices", k, name, rank, len(idx)))
	}
	args := make([]*node, len(idx))
	for i, x := range idx {
		args[i] = x.node()
	}
	return &node{op: o, kind: k, name: name, args: args}
}

// Select returns a where c holds and b elsewhere (for Int expressions).
func Select(c Bool, a, b Int) Int { return Int{mk(opSelect, kInt, c.node(), a.node(), b.node())} }

// SelectF returns a where c holds and b elsewhere (for Float expressions).
func SelectF(c Bool, a, b Float) Float {
	return Float{mk(opSelect, kFloat, c.node(), a.node(), b.node())}
}

// SelectB returns a where c holds and b elsewhere (for Bool expressions).
func SelectB(c Bool, a, b Bool) Bool { return Bool{mk(opSelect, kBool, c.node(), a.node(), b.node())} }
