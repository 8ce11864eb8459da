package flexcuda

import (
	"fmt"
	"regexp"
	"strings"

	"dflash/dtype"
	"dflash/kernels"
)

// Kernel chooses the kernel of one direction (forward or backward) of an
// attention.
type Kernel uint8

const (
	// KernelAuto, the zero value, lets New choose: DFLASH_FLEX_FWD or
	// DFLASH_FLEX_BWD when not auto ("hopper" or "portable"), else Hopper unless
	// Config.Arch names an architecture other than sm_90, where Portable.
	// The deterministic backward is Portable.
	KernelAuto Kernel = iota
	// Portable is the mma.sync kernel, for any GPU from sm_80:
	// kernels/flex_fwd.cu forward, kernels/flex_bwd.cu backward (with
	// Deterministic, plus the dQ pass of flex_bwd_dq.cuh).
	Portable
	// Hopper is the warpgroup-MMA kernel (wgmma, sm_90a only): the
	// warp-specialised forward kernels/flex_fwd_ws.cu (a TMA producer
	// warpgroup, two consumers taking turns on the tensor cores) and the
	// backward kernels/flex_bwd_wg.cuh (at head dim 256 two CTAs per kv
	// block, one per half of the head dimension).
	Hopper
)

var kernelNames = [...]string{KernelAuto: "auto", Portable: "portable", Hopper: "hopper"}

func (k Kernel) String() string {
	if int(k) < len(kernelNames) {
		return kernelNames[k]
	}
	return fmt.Sprintf("Kernel(%d)", k)
}

// ParseKernel returns the Kernel named s: "hopper" or "portable".
func ParseKernel(s string) (Kernel, error) {
	switch s {
	case "hopper":
		return Hopper, nil
	case "portable":
		return Portable, nil
	}
	return KernelAuto, fmt.Errorf("flexcuda: kernel %q: want hopper or portable", s)
}

// Spec is the static part of a flex attention kernel.
type Spec struct {
	HeadDim   int    // 64, 128 or 256
	Group     int    // query heads per kv head
	BlockQ    int    // BlockMask q block (forward CTA tile), 64 or 128
	BlockKV   int    // BlockMask kv block, 128
	MaskHash  string // structural hash of the mask program
	ScoreHash string // structural hash of the score program; "" for identity
	Fwd, Bwd  Kernel // Portable or Hopper
	// Deterministic selects the backward without atomics (Bwd Portable):
	// dQ by the q-parallel pass flex_bwd_dq; with GQA, dK/dV per query head
	// into fp32 slices added in a fixed order.
	Deterministic bool
	// DType is the storage type of Q, K, V, Out and the gradients:
	// dtype.BF16 (also when zero) or dtype.F16.
	DType dtype.DType
	// Check prints the programs in flex's checked mode (Config.Check).
	Check bool
}

// storage returns s.DType, BF16 when zero.
func (s Spec) storage() dtype.DType {
	if s.DType == dtype.Invalid {
		return dtype.BF16
	}
	return s.DType
}

// Key returns a short name of s for logs and the kernel cache's family
// budget; two specs with equal keys generate equal sources.
func (s Spec) Key() string {
	dt := s.storage().String()
	det := ""
	if s.Deterministic {
		det = "-det"
	}
	if s.Check {
		det += "-check"
	}
	return fmt.Sprintf("flex/d%d/%s/g%d/q%dkv%d/m%s/s%s/%s-%s%s", s.HeadDim, dt, s.Group, s.BlockQ, s.BlockKV, short(s.MaskHash), short(s.ScoreHash),
		s.Fwd, s.Bwd, det)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return "id"
	}
	return h
}

// Validate reports an unsupported specialisation.
func (s Spec) Validate() error {
	switch s.HeadDim {
	case 64, 128, 256:
	default:
		return fmt.Errorf("flexcuda: head dim %d not supported (64, 128, 256)", s.HeadDim)
	}
	if st := s.storage(); st != dtype.BF16 && st != dtype.F16 {
		return fmt.Errorf("flexcuda: storage type %v not supported (bf16, f16)", st)
	}
	if s.Group < 1 {
		return fmt.Errorf("flexcuda: GQA group %d < 1", s.Group)
	}
	if s.BlockQ != 64 && s.BlockQ != 128 {
		return fmt.Errorf("flexcuda: q block %d not supported (64, 128)", s.BlockQ)
	}
	if s.BlockKV != 128 {
		return fmt.Errorf("flexcuda: kv block %d not supported (128)", s.BlockKV)
	}
	for _, k := range []struct {
		dir string
		k   Kernel
	}{{"forward", s.Fwd}, {"backward", s.Bwd}} {
		if k.k != Portable && k.k != Hopper {
			return fmt.Errorf("flexcuda: %s kernel %v: a Spec takes Portable or Hopper", k.dir, k.k)
		}
	}
	if s.Bwd == Hopper && s.Deterministic {
		return fmt.Errorf("flexcuda: the Hopper backward has atomic dQ only: Deterministic needs the portable backward")
	}
	return nil
}

// fwdTemplate is the forward kernel's template file.
func (s Spec) fwdTemplate() string {
	if s.Fwd == Hopper {
		return "flex_fwd_ws.cu"
	}
	return "flex_fwd.cu"
}

// define is one #define of a generated source.
type define struct {
	name  string
	value int
}

// defines returns the #defines of s's forward (bwd false) or backward
// kernels: the specialisation and every tile constant of their templates
// (limits.go chooses them, the one place). The templates #error when one is
// missing rather than choose one themselves. The variants that tuning
// switches once chose between are described in kernels/dev/README.md.
func (s Spec) defines(hasScore, bwd bool) []define {
	ds := []define{{"FLEX_D", s.HeadDim}, {"FLEX_FP16", b2i(s.storage() == dtype.F16)}, {"FLEX_GROUP", s.Group},
		{"FLEX_BQ", s.BlockQ}, {"FLEX_BKV", s.BlockKV}, {"FLEX_HAS_SCORE", b2i(hasScore)}, {"FLEX_BWD_HALF", b2i(s.bwdHalf())}}
	switch {
	case !bwd && s.Fwd == Hopper:
		ds = append(ds, define{"FLEX_FWD_NT", s.fwdThreads()}, define{"FLEX_WG_BN", s.fwdBN()}, define{"FLEX_WS_ST", s.fwdStages()})
	case !bwd:
		ds = append(ds, define{"FLEX_FWD_NT", s.fwdThreads()}, define{"FLEX_FWD_MT", s.fwdMT()}, define{"FLEX_FWD_BN", s.fwdBN()},
			define{"FLEX_FWD_QREGS", b2i(s.fwdQRegs())})
	default:
		ds = append(ds, define{"FLEX_BWD_WG", b2i(s.Bwd == Hopper)}, define{"FLEX_BWD_NT", s.bwdThreads()}, define{"FLEX_BMQ", s.bwdBM()},
			define{"FLEX_BWD_PRE_ROWS", s.preRows()}, define{"FLEX_BWD_SPLIT", s.splitMode()}, define{"FLEX_DQ_ATOMIC", b2i(!s.Deterministic)})
		if s.Bwd == Hopper {
			ds = append(ds, define{"FLEX_BWD_STAGES", s.bwdStages()}, define{"FLEX_BWD_DS_BUFS", s.bwdDSBufs()})
		}
		if s.Deterministic {
			ds = append(ds, define{"FLEX_DQ_NT", s.dqThreads()}, define{"FLEX_DQ_BN", s.dqBN()})
		}
	}
	return ds
}

var programBlock = regexp.MustCompile(`(?s)// @flex-program-begin.*?// @flex-program-end`)

// Source returns the complete NVRTC source of s's forward (bwd false) or
// backward kernels for the programs p, with the headers inlined.
func Source(s Spec, p Program, bwd bool) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	name := "flex_bwd.cu"
	if !bwd {
		name = s.fwdTemplate()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// generated by dflash/flex/flexcuda for %s\n", s.Key())
	for _, d := range s.defines(p.HasScore, bwd) {
		fmt.Fprintf(&b, "#define %s %d\n", d.name, d.value)
	}
	return splice(name, b.String(), p)
}

// splice returns template name with defines and p's slot parameters in
// front and its headers inlined (NVRTC gets one self-contained source), the
// default program block of flex_args.cuh replaced by p.
func splice(name, defines string, p Program) (string, error) {
	args := kernels.Source("flex_args.cuh")
	if !programBlock.MatchString(args) {
		return "", fmt.Errorf("flexcuda: flex_args.cuh lacks the program markers")
	}
	prog := "#define FLEX_PROGRAM_DEFINED\n" + p.CUDA + "\n"
	args = programBlock.ReplaceAllLiteralString(args, prog)
	seen := map[string]bool{}
	var inline func(text string) string
	inline = func(text string) string {
		return include.ReplaceAllStringFunc(text, func(line string) string {
			h := include.FindStringSubmatch(line)[1]
			if seen[h] {
				return ""
			}
			seen[h] = true
			if h == "flex_args.cuh" {
				return args
			}
			return inline(kernels.Source(h))
		})
	}
	text := inline(kernels.Source(name))
	if !seen["flex_args.cuh"] {
		return "", fmt.Errorf("flexcuda: %s does not include flex_args.cuh (directly or through flex_common.cuh)", name)
	}
	return defines + slotDefines(p.Slots) + text, nil
}

// include matches an #include of one of the kernels' headers.
var include = regexp.MustCompile(`(?m)^#include "([a-z0-9_]+\.cuh)"[^\n]*\n`)

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}
