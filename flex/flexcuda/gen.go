package flexcuda

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"dflash/dtype"
	"dflash/kernels"
)

// Spec is the static part of a flex attention kernel.
type Spec struct {
	HeadDim   int    // 64, 128 or 256
	Group     int    // query heads per kv head
	BlockQ    int    // BlockMask q block (forward CTA tile), 64 or 128
	BlockKV   int    // BlockMask kv block, 128
	MaskHash  string // structural hash of the mask program
	ScoreHash string // structural hash of the score program; "" for identity
	FwdV4     bool   // forward v4: 32 q rows per warp (D <= 128, q block 128), heavy q blocks first
	FwdV5     bool   // forward v5 (with FwdV4): P packed right after exp2, softmax steps of 32 kv columns
	FwdV6     bool   // forward v6: Hopper warpgroup MMA (wgmma, sm_90a), 64 q rows per warpgroup
	FwdV7     bool   // forward v7: v6's products, warp specialised: a TMA producer warpgroup, consumers taking turns
	BwdV4     bool   // backward v4: heavy kv blocks first; GQA: one CTA per query head, dK/dV by fp32 atomics
	BwdV6     bool   // backward v6: v4's grid with dK, dV and dQ on wgmma (sm_90a; head dim 256: two CTAs per kv block); atomic dQ only
	// DType is the storage type of Q, K, V, Out and the gradients:
	// dtype.BF16 (also when zero) or dtype.F16.
	DType dtype.DType
	// Deterministic selects the backward without atomics: dQ by the
	// q-parallel pass flex_bwd_dq; with GQA, dK/dV summed over the group
	// inside one CTA (BwdV4 false) or per query head into fp32 slices added
	// in a fixed order (BwdV4).
	Deterministic bool
}

// storage returns s.DType, BF16 when zero.
func (s Spec) storage() dtype.DType {
	if s.DType == dtype.Invalid {
		return dtype.BF16
	}
	return s.DType
}

// fwdMT is the number of 16-row tiles each forward warp owns.
func (s Spec) fwdMT() int {
	if s.FwdV4 && s.HeadDim <= 128 && s.BlockQ == 128 {
		return 2
	}
	return 1
}

// fwdThreads is the forward kernel's block size.
func (s Spec) fwdThreads() int {
	switch {
	case s.FwdV6:
		return s.BlockQ / 64 * 128 // one warpgroup per 64 q rows
	case s.FwdV7:
		return s.BlockQ/64*128 + 128 // and the producer
	}
	return s.BlockQ / (16 * s.fwdMT()) * 32
}

// fwdTemplate is the forward kernel's template file.
func (s Spec) fwdTemplate() string {
	switch {
	case s.FwdV6:
		return "flex_fwd_wg.cu"
	case s.FwdV7:
		return "flex_fwd_ws.cu"
	}
	return "flex_fwd.cu"
}

// fwdHeavyFirst reports whether the forward grid is (heads x batch, q
// blocks), heaviest q blocks first (v4 and later).
func (s Spec) fwdHeavyFirst() bool { return s.FwdV4 || s.FwdV6 || s.FwdV7 }

// bwdSplit reports whether the backward runs one CTA per query head.
func (s Spec) bwdSplit() bool { return (s.BwdV4 || s.BwdV6) && s.Group > 1 }

// bwdHeavyFirst reports whether the backward grid puts the kv blocks of all
// heads in the fastest dimension (v4 and later).
func (s Spec) bwdHeavyFirst() bool { return s.BwdV4 || s.BwdV6 }

// bwdVariant is the backward kernel version: 3, 4 or 6.
func (s Spec) bwdVariant() int {
	switch {
	case s.BwdV6:
		return 6
	case s.BwdV4:
		return 4
	}
	return 3
}

// splitMode is FLEX_BWD_SPLIT: 0 no split, 1 atomics, 2 per-head slices.
func (s Spec) splitMode() int {
	switch {
	case !s.bwdSplit():
		return 0
	case s.Deterministic:
		return 2
	}
	return 1
}

// fwdWgmma reports whether the forward uses Hopper warpgroup MMA (sm_90a).
func (s Spec) fwdWgmma() bool { return s.FwdV6 || s.FwdV7 }

// fwdTiles returns the v6/v7 forward's kv rows per tile (FLEX_WG_BN) and
// v7's K and V stages (FLEX_WS_ST): head dim 64 has room for four.
func (s Spec) fwdTiles() (bn, stages int) {
	bn, stages = 128, 2
	switch s.HeadDim {
	case 64:
		stages = 4
	case 256:
		bn = 64
	}
	return bn, stages
}

// fwdVariant is the forward kernel version: 3 to 7.
func (s Spec) fwdVariant() int {
	switch {
	case s.FwdV7:
		return 7
	case s.FwdV6:
		return 6
	case s.FwdV5:
		return 5
	case s.FwdV4:
		return 4
	}
	return 3
}

// Key returns a short name of s for logs and the kernel cache's family
// budget; two specs with equal keys generate equal sources.
func (s Spec) Key() string {
	dt := s.storage().String()
	det := ""
	if s.Deterministic {
		det = "det"
	}
	return fmt.Sprintf("flex/d%d/%s/g%d/q%dkv%d/m%s/s%s/f%db%d%s", s.HeadDim, dt, s.Group, s.BlockQ, s.BlockKV, short(s.MaskHash), short(s.ScoreHash),
		s.fwdVariant(), s.bwdVariant(), det)
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
	if s.FwdV5 && !s.FwdV4 {
		return fmt.Errorf("flexcuda: forward v5 builds on v4 (FwdV4 must be set)")
	}
	if (s.FwdV6 || s.FwdV7) && s.FwdV4 || s.FwdV6 && s.FwdV7 {
		return fmt.Errorf("flexcuda: forward v6 and v7 (wgmma) exclude each other and v4/v5")
	}
	if s.BwdV6 && (s.BwdV4 || s.Deterministic) {
		return fmt.Errorf("flexcuda: backward v6 (wgmma) has atomic dQ only: not with v4 or Deterministic")
	}
	if s.BlockKV != 128 {
		return fmt.Errorf("flexcuda: kv block %d not supported (128)", s.BlockKV)
	}
	return nil
}

var programBlock = regexp.MustCompile(`(?s)// @flex-program-begin.*?// @flex-program-end`)

// Source returns the complete NVRTC source of template file name
// ("flex_fwd.cu", "flex_fwd_wg.cu" or "flex_bwd.cu") for s and p, with the common header
// inlined.
func Source(name string, s Spec, p Program) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// generated by dflash/flex/flexcuda for %s\n", s.Key())
	fmt.Fprintf(&b, "#define FLEX_D %d\n#define FLEX_FP16 %d\n#define FLEX_GROUP %d\n", s.HeadDim, b2i(s.storage() == dtype.F16), s.Group)
	fmt.Fprintf(&b, "#define FLEX_BQ %d\n#define FLEX_BKV %d\n#define FLEX_HAS_SCORE %d\n", s.BlockQ, s.BlockKV, b2i(p.HasScore))
	fmt.Fprintf(&b, "#define FLEX_FWD_MT %d\n#define FLEX_FWD_ORDER %d\n", s.fwdMT(), b2i(s.FwdV4))
	if s.FwdV5 {
		b.WriteString("#define FLEX_FWD_PACKP 1\n#define FLEX_FWD_BNC 32\n")
	}
	fmt.Fprintf(&b, "#define FLEX_BWD_ORDER %d\n#define FLEX_BWD_SPLIT %d\n", b2i(s.bwdHeavyFirst()), s.splitMode())
	if s.BwdV6 {
		b.WriteString("#define FLEX_BWD_WG 1\n")
	}
	if s.FwdV7 {
		_, st := s.fwdTiles()
		fmt.Fprintf(&b, "#define FLEX_WS_ST %d\n", st)
	}
	b.WriteString(extraDefines())
	fmt.Fprintf(&b, "#define FLEX_DQ_ATOMIC %d\n", b2i(!s.Deterministic))
	return splice(name, b.String(), p)
}

// splice returns template name with defines in front, flex_common.cuh inlined
// and its default program block replaced by p.
func splice(name, defines string, p Program) (string, error) {
	common, err := kernels.Flex.ReadFile("flex_common.cuh")
	if err != nil {
		return "", fmt.Errorf("flexcuda: %w", err)
	}
	body, err := kernels.Flex.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("flexcuda: %w", err)
	}
	if !programBlock.Match(common) {
		return "", fmt.Errorf("flexcuda: flex_common.cuh lacks the program markers")
	}
	prog := "#define FLEX_PROGRAM_DEFINED\n" + p.CUDA + "\n"
	c := programBlock.ReplaceAllLiteralString(string(common), prog)
	inc := `#include "flex_common.cuh"`
	if !strings.Contains(string(body), inc) {
		return "", fmt.Errorf("flexcuda: %s does not include flex_common.cuh", name)
	}
	text := strings.Replace(string(body), inc, c, 1)
	// Headers of one template (flex_bwd_dq.cuh, flex_bwd_wg.cuh, flex_wgmma.cuh, flex_fwd_wg.cuh) are inlined too:
	// NVRTC gets one self-contained source.
	for _, h := range []string{"flex_bwd_dq.cuh", "flex_bwd_wg.cuh", "flex_wgmma.cuh", "flex_fwd_wg.cuh"} {
		hinc := `#include "` + h + `"`
		if !strings.Contains(text, hinc) {
			continue
		}
		hb, err := kernels.Flex.ReadFile(h)
		if err != nil {
			return "", fmt.Errorf("flexcuda: %w", err)
		}
		text = strings.Replace(text, hinc, string(hb), 1)
	}
	var b strings.Builder
	b.WriteString(defines)
	b.WriteString(slotDefines(p.Slots))
	b.WriteString(text)
	return b.String(), nil
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// tuningKnobs are the template switches that DFLASH_FLEX_DEFINES may set
// for kernel experiments (none changes a kernel's resources).
var tuningKnobs = map[string]bool{"FLEX_WS_PP": true, "FLEX_BWD_TWO_PATHS": true, "FLEX_BWD_DQ_COLS": true}

// extraDefines returns the #defines of DFLASH_FLEX_DEFINES ("NAME=value,
// ..."), for measuring a template switch side by side without a rebuild. The
// source changes, so the kernel cache keeps the variants apart. Names
// outside tuningKnobs are ignored with a warning on stderr.
func extraDefines() string {
	env := os.Getenv("DFLASH_FLEX_DEFINES")
	if env == "" {
		return ""
	}
	var b strings.Builder
	for _, kv := range strings.Split(env, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(kv), "=")
		if _, err := strconv.Atoi(val); !tuningKnobs[name] || err != nil {
			fmt.Fprintf(os.Stderr, "flexcuda: DFLASH_FLEX_DEFINES: %q is not NAME=integer with NAME a tuning switch of the kernels (%v); ignored\n", kv, tuningKnobs)
			continue
		}
		fmt.Fprintf(&b, "#define %s %s\n", name, val)
	}
	return b.String()
}
