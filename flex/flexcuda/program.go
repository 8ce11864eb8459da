package flexcuda

import (
	"fmt"
	"strings"

	"dflash/flex"
)

// argLayout places the run-time parameters of a mask and a score program in
// the kernels' FlexArgs slots (8 bytes each, see flex_common.cuh): first one
// slot per tensor holding its device pointer, then the 32-bit words (int
// scalars, tensor dimensions, float scalars as float bits) two per slot, low
// word first; in the backward, one more slot per float tensor of the score
// program for its gradient's pointer. The layout depends on parameter names,
// kinds and ranks only (structure), never on values.
type argLayout struct {
	params []flex.Param   // union of the programs' parameters, sorted by name
	ptr    map[string]int // tensor -> pointer slot
	word   map[string]int // scalar -> word; tensor -> word of dimension 0
	grads  []string       // float tensors of the score program, in order
	gslot  map[string]int // float tensor -> gradient slot (backward)
	kinds  map[string]flex.Param
	nptr   int
	nwords int
}

// newLayout lays out the union of the given parameter lists. Two programs
// may share a parameter only with the same kind and rank.
func newLayout(mask, score []flex.Param) (*argLayout, error) {
	l := &argLayout{ptr: map[string]int{}, word: map[string]int{}, gslot: map[string]int{}, kinds: map[string]flex.Param{}}
	for _, ps := range [][]flex.Param{mask, score} {
		for _, p := range ps {
			if old, ok := l.kinds[p.Name]; ok {
				if old != p {
					return nil, fmt.Errorf("flexcuda: parameter %q is a %s of rank %d in one program and a %s of rank %d in the other", p.Name, old.Kind, old.Rank, p.Kind, p.Rank)
				}
				continue
			}
			l.kinds[p.Name] = p
			l.params = append(l.params, p)
		}
	}
	sortParams(l.params)
	for _, p := range l.params {
		if p.Kind == flex.ParamIntTensor || p.Kind == flex.ParamFloatTensor {
			l.ptr[p.Name] = l.nptr
			l.nptr++
		}
	}
	for _, p := range l.params {
		l.word[p.Name] = l.nwords
		if p.Kind == flex.ParamIntTensor || p.Kind == flex.ParamFloatTensor {
			l.nwords += p.Rank
		} else {
			l.nwords++
		}
	}
	for _, p := range score {
		if p.Kind == flex.ParamFloatTensor {
			l.gslot[p.Name] = l.slots(false) + len(l.grads)
			l.grads = append(l.grads, p.Name)
		}
	}
	return l, nil
}

func sortParams(ps []flex.Param) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].Name < ps[j-1].Name; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// slots returns the number of FlexArgs slots of the forward (bwd false) or
// backward kernels.
func (l *argLayout) slots(bwd bool) int {
	n := l.nptr + (l.nwords+1)/2
	if bwd {
		n += len(l.grads)
	}
	return n
}

// wordExpr is the C expression of word w as an int.
func (l *argLayout) wordExpr(w int) string {
	s := l.nptr + w/2
	if w%2 == 0 {
		return fmt.Sprintf("flex_lo(A, %d)", s)
	}
	return fmt.Sprintf("flex_hi(A, %d)", s)
}

// callArgs returns the arguments, after the index variables, of a printed
// program function with parameters ps (flex's order: per parameter its value,
// or pointer then dimensions), each read from A.
func (l *argLayout) callArgs(ps []flex.Param) string {
	var b strings.Builder
	for _, p := range ps {
		w := l.word[p.Name]
		switch p.Kind {
		case flex.ParamIntScalar:
			fmt.Fprintf(&b, ", %s", l.wordExpr(w))
		case flex.ParamFloatScalar:
			fmt.Fprintf(&b, ", __int_as_float(%s)", l.wordExpr(w))
		case flex.ParamIntTensor, flex.ParamFloatTensor:
			ty := "int"
			if p.Kind == flex.ParamFloatTensor {
				ty = "float"
			}
			fmt.Fprintf(&b, ", (const %s *)A.s[%d]", ty, l.ptr[p.Name])
			for d := 0; d < p.Rank; d++ {
				fmt.Fprintf(&b, ", %s", l.wordExpr(w+d))
			}
		}
	}
	return b.String()
}

// defines returns the #defines of the slot parameters for n slots.
func slotDefines(n int) string {
	if n == 0 {
		return "#define FLEX_NARGS 0\n"
	}
	var ps, vs []string
	for i := 0; i < n; i++ {
		ps = append(ps, fmt.Sprintf("unsigned long long fa%d", i))
		vs = append(vs, fmt.Sprintf("fa%d", i))
	}
	return fmt.Sprintf("#define FLEX_NARGS %d\n#define FLEX_ARG_PARAMS , %s\n#define FLEX_ARG_VALUES %s\n",
		n, strings.Join(ps, ", "), strings.Join(vs, ", "))
}

// Program is the CUDA C of a mask and a score program as the templates call
// them:
//
//	bool  flex_mask(const FlexArgs &A, int b, int h, int q, int kv)
//	float flex_score(const FlexArgs &A, float s, int b, int h, int q, int kv)
//	float flex_score_grad(const FlexArgs &A, float s, float g, int b, int h, int q, int kv)
//
// wrapping the functions flex prints, with their parameters read from
// FlexArgs slots.
type Program struct {
	CUDA     string // the functions, after "#define FLEX_PROGRAM_DEFINED"
	HasScore bool   // false when the score program is the identity
	Slots    int    // FlexArgs slots the kernels take
}

// program generates the Program of mask and score (nil: identity) for the
// forward (bwd false) or the backward kernels; opts are flex's printing
// options (flex.Checked).
func (l *argLayout) program(mask *flex.MaskProgram, score *flex.ScoreProgram, bwd bool, opts ...flex.CUDAOption) Program {
	var b strings.Builder
	b.WriteString(mask.CUDA("flex_user_mask", opts...))
	fmt.Fprintf(&b, "__device__ __forceinline__ bool flex_mask(const FlexArgs &A, int b, int h, int q, int kv) {\n  return flex_user_mask(b, h, q, kv%s);\n}\n",
		l.callArgs(mask.Params()))
	if score == nil {
		b.WriteString("__device__ __forceinline__ float flex_score(const FlexArgs &A, float s, int b, int h, int q, int kv) { return s; }\n")
		b.WriteString("__device__ __forceinline__ float flex_score_grad(const FlexArgs &A, float s, float g, int b, int h, int q, int kv) { return g; }\n")
		return Program{CUDA: b.String(), Slots: l.slots(bwd)}
	}
	ps := score.Params()
	b.WriteString(score.CUDA("flex_user_score", opts...))
	fmt.Fprintf(&b, "__device__ __forceinline__ float flex_score(const FlexArgs &A, float s, int b, int h, int q, int kv) {\n  return flex_user_score(s, b, h, q, kv%s);\n}\n",
		l.callArgs(ps))
	if bwd {
		b.WriteString(score.CUDABackward("flex_user_score_grad", opts...))
		var g strings.Builder
		for _, p := range ps {
			if p.Kind == flex.ParamFloatTensor {
				fmt.Fprintf(&g, ", (float *)A.s[%d]", l.gslot[p.Name])
			}
		}
		fmt.Fprintf(&b, "__device__ __forceinline__ float flex_score_grad(const FlexArgs &A, float s, float g, int b, int h, int q, int kv) {\n  return flex_user_score_grad(s, g, b, h, q, kv%s%s);\n}\n",
			l.callArgs(ps), g.String())
	} else {
		b.WriteString("__device__ __forceinline__ float flex_score_grad(const FlexArgs &A, float s, float g, int b, int h, int q, int kv) { return g; }\n")
	}
	return Program{CUDA: b.String(), HasScore: true, Slots: l.slots(bwd)}
}
