package flex

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// CUDA code generation. A program prints as a __device__ function whose
// parameters, after the index variables, are its Params in order:
//
//	int scalar    ->  int NAME
//	float scalar  ->  float NAME
//	int tensor    ->  const int* __restrict__ NAME, int NAME_d0, ..., int NAME_d{rank-1}
//	float tensor  ->  const float* __restrict__ NAME, int NAME_d0, ...
//
// Tensors are row-major with the given dimensions; reads clamp each index
// into [0, NAME_dk - 1] and integer division and remainder by zero give 0,
// as on the CPU. Ints are 32-bit: programs keep their values within int32.
// The output depends only on the program (and the function name), so it can
// be part of a kernel cache key.

const cudaHelpers = `#ifndef FLEX_HELPERS
#define FLEX_HELPERS
__device__ __forceinline__ int flex_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
__device__ __forceinline__ int flex_div(int a, int b) { return b == 0 ? 0 : (b == -1 ? -a : a / b); }
__device__ __forceinline__ int flex_mod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
#endif
`

// CUDA returns m as CUDA C: a helper block and
//
//	__device__ __forceinline__ bool fn(int b, int h, int q, int kv, <params>)
//
// returning whether the pair is allowed.
func (m *MaskProgram) CUDA(fn string) string {
	return cudaForward("mask", m.name, m.Hash(), m.root, m.plan, "bool", "int b, int h, int q, int kv", fn)
}

// CUDA returns s as CUDA C:
//
//	__device__ __forceinline__ float fn(float score, int b, int h, int q, int kv, <params>)
//
// returning the modified score.
func (s *ScoreProgram) CUDA(fn string) string {
	return cudaForward("score", s.name, s.Hash(), s.root, s.plan, "float", "float score, int b, int h, int q, int kv", fn)
}

// cudaForward prints a program (what: mask or score) as a __device__
// function fn returning ret, with the index parameters idx followed by the
// program's params.
func cudaForward(what, name, hash string, root *node, p *plan, ret, idx, fn string) string {
	checkName(fn)
	var sb strings.Builder
	fmt.Fprintf(&sb, "// flex %s program %q, structural hash %s\n// %s\n", what, name, hash, oneLine(infix(root)))
	sb.WriteString(cudaHelpers)
	fmt.Fprintf(&sb, "__device__ __forceinline__ %s %s(%s%s) {\n", ret, fn, idx, cudaParams(p, false))
	cudaBody(&sb, p)
	fmt.Fprintf(&sb, "  return t%d;\n}\n", p.root)
	return sb.String()
}

// CUDABackward returns the reverse-mode derivative of s as CUDA C:
//
//	__device__ __forceinline__ float fn(float score, float g, int b, int h, int q, int kv, <params>, <grads>)
//
// returning g · ∂score'/∂score, where g is the upstream gradient of the
// modified score; for each float tensor NAME the grads add a parameter
// float* __restrict__ NAME_grad (same layout as NAME) into which it
// atomically adds g · ∂score'/∂NAME.
func (s *ScoreProgram) CUDABackward(fn string) string {
	checkName(fn)
	p := s.plan
	var sb strings.Builder
	fmt.Fprintf(&sb, "// flex score program %q (backward), structural hash %s\n// %s\n", s.name, s.Hash(), oneLine(infix(s.root)))
	sb.WriteString(cudaHelpers)
	fmt.Fprintf(&sb, "__device__ __forceinline__ float %s(float score, float g, int b, int h, int q, int kv%s) {\n", fn, cudaParams(p, true))
	cudaBody(&sb, p)
	for i := range p.nodes {
		if p.nodes[i].grad && p.nodes[i].kind == kFloat {
			fmt.Fprintf(&sb, "  float a%d = 0.0f;\n", i)
		}
	}
	if p.nodes[p.root].grad {
		fmt.Fprintf(&sb, "  a%d = g;\n", p.root)
	}
	dScore := "0.0f"
	for i := len(p.nodes) - 1; i >= 0; i-- {
		pn := &p.nodes[i]
		if !pn.grad || pn.kind != kFloat {
			continue
		}
		a := pn.args
		add := func(j int, expr string) {
			if p.nodes[j].grad && p.nodes[j].kind == kFloat {
				fmt.Fprintf(&sb, "  a%d += %s;\n", j, expr)
			}
		}
		switch pn.op {
		case opScore:
			dScore = fmt.Sprintf("a%d", i)
		case opFTensor:
			fmt.Fprintf(&sb, "  if (a%d != 0.0f) atomicAdd(&%s_grad[%s], a%d);\n", i, pn.name, cudaOffset(pn), i)
		case opSelect:
			add(a[1], fmt.Sprintf("t%d ? a%d : 0.0f", a[0], i))
			add(a[2], fmt.Sprintf("t%d ? 0.0f : a%d", a[0], i))
		case opAdd:
			add(a[0], fmt.Sprintf("a%d", i))
			add(a[1], fmt.Sprintf("a%d", i))
		case opSub:
			add(a[0], fmt.Sprintf("a%d", i))
			add(a[1], fmt.Sprintf("-a%d", i))
		case opMul:
			add(a[0], fmt.Sprintf("a%d * t%d", i, a[1]))
			add(a[1], fmt.Sprintf("a%d * t%d", i, a[0]))
		case opDiv:
			add(a[0], fmt.Sprintf("a%d / t%d", i, a[1]))
			add(a[1], fmt.Sprintf("-a%d * t%d / (t%d * t%d)", i, a[0], a[1], a[1]))
		case opNeg:
			add(a[0], fmt.Sprintf("-a%d", i))
		case opAbs:
			add(a[0], fmt.Sprintf("t%d > 0.0f ? a%d : (t%d < 0.0f ? -a%d : 0.0f)", a[0], i, a[0], i))
		case opMin:
			c := fmt.Sprintf("(t%d < t%d || t%d != t%d)", a[0], a[1], a[1], a[1])
			add(a[0], fmt.Sprintf("%s ? a%d : 0.0f", c, i))
			add(a[1], fmt.Sprintf("%s ? 0.0f : a%d", c, i))
		case opMax:
			c := fmt.Sprintf("(t%d > t%d || t%d != t%d)", a[0], a[1], a[1], a[1])
			add(a[0], fmt.Sprintf("%s ? a%d : 0.0f", c, i))
			add(a[1], fmt.Sprintf("%s ? 0.0f : a%d", c, i))
		case opExp:
			add(a[0], fmt.Sprintf("a%d * t%d", i, i))
		case opTanh:
			add(a[0], fmt.Sprintf("a%d * (1.0f - t%d * t%d)", i, i, i))
		}
	}
	fmt.Fprintf(&sb, "  return %s;\n}\n", dScore)
	return sb.String()
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func cudaParams(p *plan, grads bool) string {
	var sb strings.Builder
	for _, prm := range p.params {
		switch prm.Kind {
		case ParamIntScalar:
			fmt.Fprintf(&sb, ", int %s", prm.Name)
		case ParamFloatScalar:
			fmt.Fprintf(&sb, ", float %s", prm.Name)
		case ParamIntTensor, ParamFloatTensor:
			ty := "int"
			if prm.Kind == ParamFloatTensor {
				ty = "float"
			}
			fmt.Fprintf(&sb, ", const %s* __restrict__ %s", ty, prm.Name)
			for d := 0; d < prm.Rank; d++ {
				fmt.Fprintf(&sb, ", int %s_d%d", prm.Name, d)
			}
		}
	}
	if grads {
		for _, prm := range p.params {
			if prm.Kind == ParamFloatTensor {
				fmt.Fprintf(&sb, ", float* __restrict__ %s_grad", prm.Name)
			}
		}
	}
	return sb.String()
}

// cudaOffset returns the row-major offset expression of a tensor read.
func cudaOffset(pn *pnode) string {
	off := ""
	for d, x := range pn.args {
		idx := fmt.Sprintf("flex_clamp(t%d, %s_d%d)", x, pn.name, d)
		if d == 0 {
			off = idx
		} else {
			off = fmt.Sprintf("(%s) * %s_d%d + %s", off, pn.name, d, idx)
		}
	}
	return off
}

func cudaFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "INFINITY"
	case math.IsInf(v, -1):
		return "(-INFINITY)"
	}
	s := strconv.FormatFloat(float64(float32(v)), 'g', 9, 32)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return "(" + s + "f)"
}

// cudaBody writes one const temporary per plan node, t<index>.
func cudaBody(sb *strings.Builder, p *plan) {
	ty := [...]string{kInt: "int", kFloat: "float", kBool: "bool"}
	for i := range p.nodes {
		pn := &p.nodes[i]
		a := pn.args
		t := func(j int) string { return fmt.Sprintf("t%d", a[j]) }
		var e string
		switch pn.op {
		case opB, opH, opQ, opKV, opScore:
			e = pn.op.String()
		case opConst:
			e = strconv.FormatInt(pn.ival, 10)
			if pn.ival < 0 {
				e = "(" + e + ")"
			}
		case opFConst:
			e = cudaFloat(pn.fval)
		case opIScalar, opFScalar:
			e = pn.name
		case opITensor, opFTensor:
			e = fmt.Sprintf("%s[%s]", pn.name, cudaOffset(pn))
		case opToFloat:
			e = fmt.Sprintf("(float)%s", t(0))
		case opSelect:
			e = fmt.Sprintf("%s ? %s : %s", t(0), t(1), t(2))
		case opNot:
			e = "!" + t(0)
		case opNeg:
			e = "-" + t(0)
		case opDiv, opMod:
			c := p.nodes[a[1]]
			if pn.kind == kInt && !(c.op == opConst && c.ival != 0 && c.ival != -1) {
				e = fmt.Sprintf("flex_%s(%s, %s)", pn.op, t(0), t(1))
			} else {
				e = fmt.Sprintf("%s %s %s", t(0), infixOps[pn.op], t(1))
			}
		case opAbs:
			if pn.kind == kInt {
				e = fmt.Sprintf("flex_abs(%s)", t(0))
			} else {
				e = fmt.Sprintf("fabsf(%s)", t(0))
			}
		case opMin, opMax:
			if pn.kind == kInt {
				e = fmt.Sprintf("%s(%s, %s)", pn.op, t(0), t(1))
			} else {
				e = fmt.Sprintf("f%sf(%s, %s)", pn.op, t(0), t(1))
			}
		case opExp:
			e = fmt.Sprintf("expf(%s)", t(0))
		case opTanh:
			e = fmt.Sprintf("tanhf(%s)", t(0))
		default:
			e = fmt.Sprintf("%s %s %s", t(0), infixOps[pn.op], t(1))
		}
		fmt.Fprintf(sb, "  const %s t%d = %s;\n", ty[pn.kind], i, e)
	}
}
