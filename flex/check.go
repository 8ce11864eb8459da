package flex

import (
	"fmt"
	"sync"

	"dflash/internal/switches"
)

// IndexError reports a tensor read outside the tensor's shape, found in
// the checked mode. Outside it such reads are clamped into range.
type IndexError struct {
	Program string  // "mask NAME" or "score NAME"
	Tensor  string  // the tensor parameter's name
	Index   []int64 // the index, one entry per dimension (CUDA: only Dim's entry is known)
	Dim     int     // the first dimension out of range
	Shape   []int   // the tensor's shape (nil when not known)
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("flex: %s reads tensor %q at index %v, outside its shape %v in dimension %d (checked mode, %s; without it the index is clamped)",
		e.Program, e.Tensor, e.Index, e.Shape, e.Dim, switches.FlexCheck.Name)
}

// indexCheck records the first out-of-range read of a frame's tensors.
type indexCheck struct {
	what string
	mu   sync.Mutex
	err  *IndexError
}

// checkedMode reports whether a call with a is in the checked mode:
// Args.Check, or DFLASH_FLEX_CHECK on for every call.
func checkedMode(a *Args) (bool, error) {
	on, err := switches.FlexCheck.Value()
	return (a != nil && a.Check) || on, err
}

// at checks the index idx[args[d]][k] (vector) of tensor t.
func (c *indexCheck) at(t *boundTensor, idx [][]int64, args []int, k int) {
	for d, x := range args {
		if v := idx[x][k]; v < 0 || v >= int64(t.shape[d]) {
			full := make([]int64, len(args))
			for e, y := range args {
				full[e] = idx[y][k]
			}
			c.report(t, full, d)
			return
		}
	}
}

// scalar checks the index idx[args[d]] of tensor t.
func (c *indexCheck) scalar(t *boundTensor, idx []int64, args []int) {
	for d, x := range args {
		if v := idx[x]; v < 0 || v >= int64(t.shape[d]) {
			full := make([]int64, len(args))
			for e, y := range args {
				full[e] = idx[y]
			}
			c.report(t, full, d)
			return
		}
	}
}

func (c *indexCheck) report(t *boundTensor, idx []int64, d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = &IndexError{Program: c.what, Tensor: t.name, Index: idx, Dim: d, Shape: t.shape}
	}
}

// checkErr returns the first violation recorded in f, or nil.
func checkErr(f *frame) error {
	if f == nil || f.check == nil {
		return nil
	}
	f.check.mu.Lock()
	defer f.check.mu.Unlock()
	if f.check.err == nil {
		return nil
	}
	return f.check.err
}

// checkAllPairs evaluates the mask at every pair of bm (checked mode), so
// that every tensor read it makes is checked, and returns the first
// out-of-range read.
func checkAllPairs(bm *BlockMask) error {
	ev := bm.rows.newEval(bm.frame)
	buf := make([]bool, bm.BlockKV)
	d := bm.Dims
	for b := 0; b < bm.MaskBatch; b++ {
		for h := 0; h < bm.MaskHeads; h++ {
			ev.setBH(b, h)
			for q := 0; q < d.LenQ; q++ {
				ev.setRow(q)
				for k0 := 0; k0 < d.LenKV; k0 += bm.BlockKV {
					ev.mask(k0, min(bm.BlockKV, d.LenKV-k0), buf)
				}
			}
		}
	}
	return checkErr(bm.frame)
}

// CUDAOption changes how programs print as CUDA C.
type CUDAOption func(*cudaConfig)

type cudaConfig struct {
	checked bool
	score   bool // printing a score program (its reads are tagged as such)
}

// Checked prints the checked mode into the generated code: every tensor
// index is tested against its dimension before it is clamped, and the first
// out-of-range read of a launch is recorded in the device word
//
//	__device__ unsigned long long flex_check_word;
//
// (atomicCAS from 0) as bits 63-48: the tensor's position in the program's
// Params plus one, bit 47: set for the score program, bits 39-32: the
// dimension, bits 31-0: the index (int32). The host zeroes the word before
// a launch and reads it after; CheckWordError decodes it. Without Checked
// the code has no test at all.
func Checked() CUDAOption { return func(c *cudaConfig) { c.checked = true } }

const cudaCheckHelpers = `#ifndef FLEX_CHECK_WORD
#define FLEX_CHECK_WORD
__device__ unsigned long long flex_check_word;
__device__ __forceinline__ int flex_checked(int i, int n, unsigned long long tag) {
  if (i < 0 || i >= n) atomicCAS(&flex_check_word, 0ull, tag | (unsigned long long)(unsigned)i);
  return i;
}
#endif
`

// cudaCheckTag is the constant part of the check word of dimension d of
// the tensor at position param of the program's Params.
func cudaCheckTag(param, d int, score bool) uint64 {
	t := uint64(param+1)<<48 | uint64(d)<<32
	if score {
		t |= 1 << 47
	}
	return t
}

// CheckWordError decodes flex_check_word (see Checked) of a launch of mask
// and score (nil when the launch had none): nil for 0, otherwise an
// *IndexError naming the tensor, the dimension and the index.
func CheckWordError(w uint64, mask *MaskProgram, score *ScoreProgram) error {
	if w == 0 {
		return nil
	}
	param, d, idx := int(w>>48)-1, int(w>>32&0xff), int64(int32(uint32(w)))
	var ps []Param
	what := ""
	if w&(1<<47) != 0 && score != nil {
		ps, what = score.Params(), "score "+score.name
	} else if w&(1<<47) == 0 && mask != nil {
		ps, what = mask.Params(), "mask "+mask.name
	}
	if param < 0 || param >= len(ps) || d >= ps[param].Rank {
		return fmt.Errorf("flex: check word %#x names no tensor read of these programs", w)
	}
	index := make([]int64, ps[param].Rank)
	index[d] = idx
	return &IndexError{Program: what + " (CUDA; only dimension " + fmt.Sprint(d) + " of the index is known)",
		Tensor: ps[param].Name, Index: index, Dim: d}
}
