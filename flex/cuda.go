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
__device__ __forceinline__ int flex_tdiv(int a, int b) { return b == 0 ? 0 : (b == -1 ? (int)(0u - (unsigned)a) : a / b); }
__device__ __forceinline__ int flex_tmod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_fdiv(int a, int b) { return flex_tdiv(a, b) - ((b != 0 && b != -1 && a % b != 0 && (a < 0) != (b < 0)) ? 1 : 0); }
__device__ __forceinline__ int flex_fmod(int a, int b) { int r = flex_tmod(a, b); return (r != 0 && (r < 0) != (b < 0)) ? r + b : r; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
__device__ __forceinline__ int flex_shl(int a, int s) { return (int)((unsigned)a << (s < 0 ? 0 : (s > 31 ? 31 : s))); }
__device__ __forceinline__ int flex_shr(int a, int s) { return a >> (s < 0 ? 0 : (s > 31 ? 31 : s)); }
__device__ __forceinline__ int flex_f2i(float x) { return x != x ? 0 : (x >= 2147483648.0f ? 2147483647 : (x <= -2147483648.0f ? (-2147483647 - 1) : (int)x)); }
__device__ __forceinline__ float flex_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
#endif
`

// cudaHelperNames are the helpers' names, reserved for parameters.
var cudaHelperNames = map[string]bool{"flex_clamp": true, "flex_tdiv": true, "flex_tmod": true, "flex_fdiv": true,
	"flex_fmod": true, "flex_abs": true, "flex_shl": true, "flex_shr": true, "flex_f2i": true, "flex_sigmoid": true,
	"flex_checked": true, "flex_check_word": true}

// CUDA returns m as CUDA C: a helper block and
//
//	__device__ __forceinline__ bool fn(int b, int h, int q, int kv, <params>)
//
// returning whether the pair is allowed.
func (m *MaskProgram) CUDA(fn string, opts ...CUDAOption) string {
	return cudaForward("mask", m.name, m.Hash(), m.root, m.plan, "bool", "int b, int h, int q, int kv", fn, cudaConf(false, opts))
}

// CUDA returns s as CUDA C:
//
//	__device__ __forceinline__ float fn(float score, int b, int h, int q, int kv, <params>)
//
// returning the modified score.
func (s *ScoreProgram) CUDA(fn string, opts ...CUDAOption) string {
	return cudaForward("score", s.name, s.Hash(), s.root, s.plan, "float", "float score, int b, int h, int q, int kv", fn, cudaConf(true, opts))
}

func cudaConf(score bool, opts []CUDAOption) *cudaConfig {
	c := &cudaConfig{score: score}
	for _, o := range opts {
		o(c)
	}
	return c
}

// cudaPrelude writes the helper blocks.
func cudaPrelude(sb *strings.Builder, c *cudaConfig) {
	sb.WriteString(cudaHelpers)
	if c.checked {
		sb.WriteString(cudaCheckHelpers)
	}
}

// cudaForward prints a program (what: mask or score) as a __device__
// function fn returning ret, with the index parameters idx followed by the
// program's params.
func cudaForward(what, name, hash string, root *node, p *plan, ret, idx, fn string, c *cudaConfig) string {
	checkName(fn)
	var sb strings.Builder
	fmt.Fprintf(&sb, "// flex %s program %q, structural hash %s\n// %s\n", what, name, hash, oneLine(infix(root)))
	cudaPrelude(&sb, c)
	fmt.Fprintf(&sb, "__device__ __forceinline__ %s %s(%s%s) {\n", ret, fn, idx, cudaParams(p, false))
	cudaBody(&sb, p, c)
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
func (s *ScoreProgram) CUDABackward(fn string, opts ...CUDAOption) string {
	checkName(fn)
	c := cudaConf(true, opts)
	p := s.plan
	var sb strings.Builder
	fmt.Fprintf(&sb, "// flex score program %q (backward), structural hash %s\n// %s\n", s.name, s.Hash(), oneLine(infix(s.root)))
	cudaPrelude(&sb, c)
	fmt.Fprintf(&sb, "__device__ __forceinline__ float %s(float score, float g, int b, int h, int q, int kv%s) {\n", fn, cudaParams(p, true))
	cudaBody(&sb, p, c)
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
			fmt.Fprintf(&sb, "  if (a%d != 0.0f) atomicAdd(&%s_grad[%s], a%d);\n", i, pn.name, cudaOffset(pn, nil), i)
		case opSelect:
			add(a[1], fmt.Sprintf("t%d ? a%d : 0.0f", a[0], i))
			add(a[2], fmt.Sprintf("t%d ? 0.0f : a%d", a[0], i))
		default:
			y := ""
			if len(a) > 1 {
				y = fmt.Sprintf("t%d", a[1])
			}
			dx, dy := opTable[pn.op].cdf(fmt.Sprintf("a%d", i), fmt.Sprintf("t%d", a[0]), y, fmt.Sprintf("t%d", i))
			if dx != "" {
				add(a[0], dx)
			}
			if dy != "" {
				add(a[1], dy)
			}
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
// In the checked mode (c non-nil and checked) each index is tested first.
func cudaOffset(pn *pnode, c *cudaConfig) string {
	off := ""
	for d, x := range pn.args {
		idx := fmt.Sprintf("flex_clamp(t%d, %s_d%d)", x, pn.name, d)
		if c != nil && c.checked {
			idx = fmt.Sprintf("flex_clamp(flex_checked(t%d, %s_d%d, %#xull), %s_d%d)", x, pn.name, d, cudaCheckTag(pn.param, d, c.score), pn.name, d)
		}
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
func cudaBody(sb *strings.Builder, p *plan, c *cudaConfig) {
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
			e = itoa(pn.ival)
		case opFConst:
			e = cudaFloat(pn.fval)
		case opIScalar, opFScalar:
			e = pn.name
		case opITensor, opFTensor:
			e = fmt.Sprintf("%s[%s]", pn.name, cudaOffset(pn, c))
		case opToFloat:
			e = fmt.Sprintf("(float)%s", t(0))
		case opSelect:
			e = fmt.Sprintf("%s ? %s : %s", t(0), t(1), t(2))
		case opToInt:
			e = fmt.Sprintf("flex_f2i(%s)", t(0))
		case opNot:
			e = "!" + t(0)
		default:
			e = cudaOp(p, pn, t)
		}
		fmt.Fprintf(sb, "  const %s t%d = %s;\n", ty[pn.kind], i, e)
	}
}

// cudaOp prints an arithmetic, comparison or logic node from its op's
// table entry; t(j) names operand j.
func cudaOp(p *plan, pn *pnode, t func(j int) string) string {
	info := &opTable[pn.op]
	if info.class == clsCmp || info.class == clsLogic {
		return fmt.Sprintf("%s %s %s", t(0), info.infix, t(1))
	}
	if pn.kind == kFloat {
		if len(pn.args) == 1 {
			return fmt.Sprintf(info.cf, t(0))
		}
		return fmt.Sprintf(info.cf, t(0), t(1))
	}
	if len(pn.args) == 1 {
		return fmt.Sprintf(info.ci, t(0))
	}
	if c := &p.nodes[pn.args[1]]; info.ciK != nil && c.op == opConst {
		if s, ok := info.ciK(t(0), c.ival); ok {
			return s
		}
	}
	return fmt.Sprintf(info.ci, t(0), t(1))
}
