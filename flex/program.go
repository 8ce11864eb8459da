package flex

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strings"
)

// MaskProgram is a compiled mask (b, h, q, kv) -> bool: true where query q of
// batch b and head h may attend to key kv. It is immutable and safe for
// concurrent use.
type MaskProgram struct {
	name string
	root *node
	plan *plan
	// dflashBlock is the block size of a DFlashMask program, 0 for every
	// other (a combination of one included): the structure a closed-form
	// block-mask builder needs (DFlashBlock).
	dflashBlock int
}

// ScoreProgram is a compiled score modification (score, b, h, q, kv) -> score
// applied to score = q·k·scale before the softmax. It is immutable and safe
// for concurrent use. A nil *ScoreProgram is the identity.
type ScoreProgram struct {
	name string
	root *node
	plan *plan
}

// NewMask compiles e into a mask program. name appears in messages and
// generated code comments only; it is not part of the hash.
func NewMask(name string, e Bool) *MaskProgram {
	p := buildPlan(e.node())
	if p.readsScore {
		panic(fmt.Sprintf("flex: mask program %q reads Score(); only score programs may", name))
	}
	return &MaskProgram{name: name, root: e.node(), plan: p}
}

// NewScore compiles e into a score program.
func NewScore(name string, e Float) *ScoreProgram {
	return &ScoreProgram{name: name, root: e.node(), plan: buildPlan(e.node())}
}

// Name returns the program's name.
func (m *MaskProgram) Name() string { return m.name }

// DFlashBlock returns the block size of a program made by DFlashMask, and
// false for any other program (And, Or and Not of one included, whatever
// its name), so that a backend can build its block mask in closed form.
func (m *MaskProgram) DFlashBlock() (blockSize int, ok bool) {
	return m.dflashBlock, m.dflashBlock > 0
}

// Name returns the program's name.
func (s *ScoreProgram) Name() string { return s.name }

// Expr returns the program's expression, for combining programs.
func (m *MaskProgram) Expr() Bool { return Bool{m.root} }

// Expr returns the program's expression, for composing score programs.
func (s *ScoreProgram) Expr() Float { return Float{s.root} }

// And returns the mask allowing a pair where both m and o allow it.
func (m *MaskProgram) And(o *MaskProgram) *MaskProgram {
	return NewMask(m.name+"&"+o.name, m.Expr().And(o.Expr()))
}

// Or returns the mask allowing a pair where m or o allows it.
func (m *MaskProgram) Or(o *MaskProgram) *MaskProgram {
	return NewMask(m.name+"|"+o.name, m.Expr().Or(o.Expr()))
}

// Not returns the complement of m.
func (m *MaskProgram) Not() *MaskProgram { return NewMask("!"+m.name, m.Expr().Not()) }

// Then returns the score program o(s(score)): o applied to the result of s.
func (s *ScoreProgram) Then(o *ScoreProgram) *ScoreProgram {
	return NewScore(s.name+">"+o.name, Float{substScore(o.root, s.root, map[*node]*node{})})
}

func substScore(n, repl *node, memo map[*node]*node) *node {
	if r, ok := memo[n]; ok {
		return r
	}
	var r *node
	if n.op == opScore {
		r = repl
	} else if len(n.args) == 0 {
		r = n
	} else {
		c := *n
		c.args = make([]*node, len(n.args))
		for i, a := range n.args {
			c.args[i] = substScore(a, repl, memo)
		}
		r = &c
	}
	memo[n] = r
	return r
}

// Hash returns the canonical structural hash of m (hex SHA-256): equal for
// programs with the same structure, constants, parameter names and kinds
// (commutative operands in either order), independent of the values of
// run-time scalars and tensors.
func (m *MaskProgram) Hash() string { return m.plan.hash("flex mask v1") }

// Hash returns the canonical structural hash of s; see MaskProgram.Hash.
func (s *ScoreProgram) Hash() string { return s.plan.hash("flex score v1") }

// String returns the program as an infix expression.
func (m *MaskProgram) String() string { return m.name + ": " + infix(m.root) }

// String returns the program as an infix expression.
func (s *ScoreProgram) String() string { return s.name + ": " + infix(s.root) }

// Params returns the run-time parameters the program reads, sorted by name.
func (m *MaskProgram) Params() []Param { return append([]Param(nil), m.plan.params...) }

// Params returns the run-time parameters the program reads, sorted by name.
func (s *ScoreProgram) Params() []Param { return append([]Param(nil), s.plan.params...) }

// ReadsBatch reports whether the mask depends on the batch index; when it
// does not, block masks are shared across the batch.
func (m *MaskProgram) ReadsBatch() bool { return m.plan.readsB }

// ReadsHead reports whether the mask depends on the head index; when it does
// not, block masks are shared across heads.
func (m *MaskProgram) ReadsHead() bool { return m.plan.readsH }

// ParamKind is the kind of a run-time parameter.
type ParamKind uint8

const (
	ParamIntScalar ParamKind = iota
	ParamFloatScalar
	ParamIntTensor
	ParamFloatTensor
)

func (k ParamKind) String() string {
	return [...]string{"int scalar", "float scalar", "int tensor", "float tensor"}[k]
}

// Param is one run-time parameter of a program. Rank is 0 for scalars.
type Param struct {
	Name string
	Kind ParamKind
	Rank int
}

// pnode is a node of a plan: a canonicalised DAG in topological order.
type pnode struct {
	op     op
	kind   kind
	args   []int
	ival   int64
	fval   float64
	name   string
	level  int // 0: depends on b, h and parameters only; 1: also q; 2: also kv or score
	param  int // index into plan.params for scalars and tensors
	digest [32]byte
	grad   bool // float node whose value depends on score or a float tensor
}

// plan is a program with common subexpressions merged, in topological order.
type plan struct {
	nodes      []pnode
	root       int
	params     []Param
	readsB     bool
	readsH     bool
	readsScore bool
}

func buildPlan(root *node) *plan {
	p := &plan{}
	byDigest := map[[32]byte]int{}
	memo := map[*node]int{}
	paramKinds := map[string]Param{}
	var visit func(n *node) int
	visit = func(n *node) int {
		if i, ok := memo[n]; ok {
			return i
		}
		args := make([]int, len(n.args))
		for i, a := range n.args {
			args[i] = visit(a)
		}
		pn := pnode{op: n.op, kind: n.kind, args: args, ival: n.ival, fval: n.fval, name: n.name, param: -1}
		pn.digest = digestOf(&pn, p.nodes)
		if i, ok := byDigest[pn.digest]; ok {
			memo[n] = i
			return i
		}
		switch n.op {
		case opB:
			p.readsB = true
		case opH:
			p.readsH = true
		case opQ:
			pn.level = 1
		case opKV:
			pn.level = 2
		case opScore:
			pn.level = 2
			pn.grad = true
			p.readsScore = true
		case opIScalar, opFScalar, opITensor, opFTensor:
			prm := Param{Name: n.name, Kind: paramKindOf(n.op), Rank: len(n.args)}
			if old, ok := paramKinds[n.name]; ok && old != prm {
				panic(fmt.Sprintf("flex: parameter %q used as %s of rank %d and as %s of rank %d",
					n.name, old.Kind, old.Rank, prm.Kind, prm.Rank))
			}
			paramKinds[n.name] = prm
			pn.grad = n.op == opFTensor
		}
		for _, a := range args {
			pn.level = max(pn.level, p.nodes[a].level)
			if p.nodes[a].grad && n.kind == kFloat {
				pn.grad = true
			}
		}
		if opTable[n.op].zeroGrad {
			pn.grad = false // piecewise constant: no gradient flows through
		}
		if n.op == opSelect && n.kind == kFloat {
			pn.grad = p.nodes[args[1]].grad || p.nodes[args[2]].grad
		}
		i := len(p.nodes)
		p.nodes = append(p.nodes, pn)
		byDigest[pn.digest] = i
		memo[n] = i
		return i
	}
	p.root = visit(root)
	for _, prm := range paramKinds {
		p.params = append(p.params, prm)
	}
	sort.Slice(p.params, func(i, j int) bool { return p.params[i].Name < p.params[j].Name })
	for i := range p.nodes {
		if p.nodes[i].name != "" {
			for j, prm := range p.params {
				if prm.Name == p.nodes[i].name {
					p.nodes[i].param = j
				}
			}
		}
	}
	return p
}

func paramKindOf(o op) ParamKind {
	switch o {
	case opIScalar:
		return ParamIntScalar
	case opFScalar:
		return ParamFloatScalar
	case opITensor:
		return ParamIntTensor
	}
	return ParamFloatTensor
}

// digestOf is the canonical digest of a node given its children's digests.
func digestOf(pn *pnode, nodes []pnode) [32]byte {
	var buf bytes.Buffer
	buf.WriteString(pn.op.String()) // the name, so that hashes do not depend on the enum's order
	buf.WriteByte(0)
	buf.WriteByte(byte(pn.kind))
	var w [8]byte
	switch pn.op {
	case opConst:
		binary.LittleEndian.PutUint64(w[:], uint64(pn.ival))
		buf.Write(w[:])
	case opFConst:
		v := pn.fval
		if v == 0 {
			v = 0 // fold -0 into +0
		}
		binary.LittleEndian.PutUint64(w[:], math.Float64bits(v))
		buf.Write(w[:])
	}
	buf.WriteString(pn.name)
	buf.WriteByte(0)
	ds := make([][32]byte, len(pn.args))
	for i, a := range pn.args {
		ds[i] = nodes[a].digest
	}
	if opTable[pn.op].comm {
		sort.Slice(ds, func(i, j int) bool { return bytes.Compare(ds[i][:], ds[j][:]) < 0 })
	}
	binary.LittleEndian.PutUint64(w[:], uint64(len(ds)))
	buf.Write(w[:])
	for _, d := range ds {
		buf.Write(d[:])
	}
	return sha256.Sum256(buf.Bytes())
}

func (p *plan) hash(domain string) string {
	h := sha256.New()
	h.Write([]byte(domain))
	d := p.nodes[p.root].digest
	h.Write(d[:])
	return hex.EncodeToString(h.Sum(nil))
}

func infix(n *node) string {
	switch n.op {
	case opB, opH, opQ, opKV, opScore:
		return n.op.String()
	case opConst:
		return fmt.Sprint(n.ival)
	case opFConst:
		return fmt.Sprint(n.fval)
	case opIScalar, opFScalar:
		return "$" + n.name
	case opITensor, opFTensor:
		idx := make([]string, len(n.args))
		for i, a := range n.args {
			idx[i] = infix(a)
		}
		return n.name + "[" + strings.Join(idx, ", ") + "]"
	case opSelect:
		return "(" + infix(n.args[0]) + " ? " + infix(n.args[1]) + " : " + infix(n.args[2]) + ")"
	case opNot:
		return "!" + infix(n.args[0])
	case opNeg:
		return "-" + infix(n.args[0])
	}
	if s := opTable[n.op].infix; s != "" && len(n.args) == 2 {
		return "(" + infix(n.args[0]) + " " + s + " " + infix(n.args[1]) + ")"
	}
	args := make([]string, len(n.args))
	for i, a := range n.args {
		args[i] = infix(a)
	}
	return n.op.String() + "(" + strings.Join(args, ", ") + ")"
}
