package gpu

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"dflash/cuda"
	"dflash/dtype"
)

// GemmSpec describes a row-major matrix product
//
//	C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b],   b = 0..Batch-1
//
// with op(A) of shape M x K, op(B) K x N and C M x N. A is stored M x K
// (K x M when TransA), B K x N (N x K when TransB), all row-major with row
// strides LDA, LDB, LDC (0: the packed row length) and batch strides
// StrideA, StrideB, StrideC in elements (0: packed one after another).
// Inputs are In, C is Out (0: same as In), each dtype.BF16, F16 or F32;
// products accumulate in fp32 (TF32 tensor cores for f32 inputs when TF32
// is set).
//
// In may also be dtype.F8E4M3 (see GemmFP8): then Out is BF16 (the
// default), F16 or F32, Scale says how the inputs are scaled, and the
// product must be a linear layer's, C = X·Wᵀ: A (X) M x K not transposed,
// B (W) stored N x K with TransB, which is the "TN" form FP8 tensor cores
// need on Hopper; K, LDA and LDB multiples of 16 and LDC·Out.Size() of 16
// bytes (FP8 operands aligned to 16 bytes), no batch, no TF32.
type GemmSpec struct {
	M, N, K                   int
	TransA, TransB            bool
	LDA, LDB, LDC             int
	Batch                     int
	StrideA, StrideB, StrideC int64
	In, Out                   dtype.DType
	TF32                      bool
	Scale                     GemmScale
	// FastAccum, for FP8 inputs only, is cuBLASLt's fast accumulation:
	// the tensor cores' partial sums are not promoted to fp32 every few
	// steps along K, which is faster and less accurate (the forward
	// products of FP8 training recipes run so, and the FP8 target's by
	// default: DFLASH_FP8_FAST_ACCUM).
	FastAccum bool
}

// GemmScale is how the FP8 inputs of a GEMM are scaled.
type GemmScale uint8

const (
	// ScaleNone: inputs that are not FP8.
	ScaleNone GemmScale = iota
	// ScaleTensor: one float32 scale each for A and B (the default of FP8
	// inputs): out = alpha·sa·sb·op(A)·op(B) + beta·C.
	ScaleTensor
	// ScaleRowsCols: float32 vectors, sa one per row of op(A) (M, per
	// token), sb one per column of op(B) (N, per output channel):
	// out[i][j] = alpha·sa[i]·sb[j]·Σ_p op(A)[i][p]·op(B)[p][j] + beta·C[i][j]
	// (cuBLASLt's outer-vector scaling).
	ScaleRowsCols
)

func (g GemmScale) String() string {
	switch g {
	case ScaleNone:
		return "none"
	case ScaleTensor:
		return "tensor"
	case ScaleRowsCols:
		return "rows-cols"
	}
	return fmt.Sprintf("GemmScale(%d)", uint8(g))
}

// normalized fills defaults and panics on impossible shapes.
func (s GemmSpec) normalized() GemmSpec {
	if s.M <= 0 || s.N <= 0 || s.K <= 0 {
		panic(fmt.Sprintf("gpu: Gemm with M=%d N=%d K=%d", s.M, s.N, s.K))
	}
	if s.In == dtype.Invalid {
		panic("gpu: GemmSpec.In not set")
	}
	if s.In == dtype.F8E4M3 {
		if s.Out == dtype.Invalid {
			s.Out = dtype.BF16
		}
		if s.Scale == ScaleNone {
			s.Scale = ScaleTensor
		}
	} else if s.Scale != ScaleNone || s.FastAccum {
		panic(fmt.Sprintf("gpu: Gemm of %v with %v scales (fast accumulation %v): only FP8 inputs are scaled and accumulate fast", s.In, s.Scale, s.FastAccum))
	}
	if s.Out == dtype.Invalid {
		s.Out = s.In
	}
	for _, t := range []dtype.DType{s.In, s.Out} {
		if t != dtype.BF16 && t != dtype.F16 && t != dtype.F32 && !(t == dtype.F8E4M3 && t == s.In) {
			panic(fmt.Sprintf("gpu: Gemm of %v: want bf16, f16 or f32 (or f8e4m3 inputs)", t))
		}
	}
	aRows, aCols := s.M, s.K
	if s.TransA {
		aRows, aCols = s.K, s.M
	}
	bRows, bCols := s.K, s.N
	if s.TransB {
		bRows, bCols = s.N, s.K
	}
	fix := func(ld *int, cols int, name string) {
		if *ld == 0 {
			*ld = cols
		}
		if *ld < cols {
			panic(fmt.Sprintf("gpu: Gemm %s=%d below the row length %d", name, *ld, cols))
		}
	}
	fix(&s.LDA, aCols, "LDA")
	fix(&s.LDB, bCols, "LDB")
	fix(&s.LDC, s.N, "LDC")
	if s.Batch <= 1 {
		s.Batch, s.StrideA, s.StrideB, s.StrideC = 1, 0, 0, 0
	} else {
		if s.StrideA == 0 {
			s.StrideA = int64(aRows) * int64(s.LDA)
		}
		if s.StrideB == 0 {
			s.StrideB = int64(bRows) * int64(s.LDB)
		}
		if s.StrideC == 0 {
			s.StrideC = int64(s.M) * int64(s.LDC)
		}
	}
	if s.In == dtype.F8E4M3 {
		s.checkFP8()
	}
	return s
}

// checkFP8 panics on what cuBLASLt's FP8 kernels do not take in a
// normalized FP8 spec.
func (s GemmSpec) checkFP8() {
	if s.Scale != ScaleTensor && s.Scale != ScaleRowsCols {
		panic(fmt.Sprintf("gpu: FP8 Gemm with %v scales", s.Scale))
	}
	fail := func(why string) { panic(fmt.Sprintf("gpu: FP8 Gemm %dx%dx%d: %s", s.M, s.N, s.K, why)) }
	switch {
	case s.Out != dtype.BF16 && s.Out != dtype.F16 && s.Out != dtype.F32:
		fail(fmt.Sprintf("output %v, want bf16, f16 or f32", s.Out))
	case s.TransA || !s.TransB:
		fail("want A not transposed and B transposed (C = X·Wᵀ, cuBLASLt's TN)")
	case s.Batch > 1:
		fail("batched")
	case s.TF32:
		fail("TF32 set")
	case s.K%16 != 0 || s.LDA%16 != 0 || s.LDB%16 != 0:
		fail(fmt.Sprintf("K=%d LDA=%d LDB=%d, want multiples of 16", s.K, s.LDA, s.LDB))
	case s.LDC*s.Out.Size()%16 != 0:
		fail(fmt.Sprintf("LDC=%d %v elements, want a multiple of 16 bytes", s.LDC, s.Out))
	}
}

// colMajor is the column-major problem cuBLASLt solves for a row-major spec:
// C^T = op(B)^T op(A)^T, so cuBLASLt's "A" is our B and its "B" our A.
type colMajor struct {
	transA, transB bool
	aRows, aCols   uint64 // stored matrix of cuBLASLt's A (our B)
	bRows, bCols   uint64 // stored matrix of cuBLASLt's B (our A)
	cRows, cCols   uint64
	lda, ldb, ldc  int64
	strideA        int64 // batch strides of cuBLASLt's A, B, C
	strideB        int64
	strideC        int64
}

// toColMajor maps a normalized row-major spec to cuBLASLt's view. A
// row-major r x c matrix with row stride ld is a column-major c x r matrix
// with leading dimension ld.
func (s GemmSpec) toColMajor() colMajor {
	cm := colMajor{transA: s.TransB, transB: s.TransA, ldc: int64(s.LDC), lda: int64(s.LDB), ldb: int64(s.LDA),
		strideA: s.StrideB, strideB: s.StrideA, strideC: s.StrideC}
	if s.TransB { // B stored N x K row-major = K x N column-major, transposed
		cm.aRows, cm.aCols = uint64(s.K), uint64(s.N)
	} else { // B stored K x N row-major = N x K column-major
		cm.aRows, cm.aCols = uint64(s.N), uint64(s.K)
	}
	if s.TransA { // A stored K x M row-major = M x K column-major, transposed
		cm.bRows, cm.bCols = uint64(s.M), uint64(s.K)
	} else { // A stored M x K row-major = K x M column-major
		cm.bRows, cm.bCols = uint64(s.K), uint64(s.M)
	}
	cm.cRows, cm.cCols = uint64(s.N), uint64(s.M)
	return cm
}

// GemmWorkspace is the cuBLASLt workspace a device keeps unless
// SetGemmWorkspace says otherwise (32 MiB, the size recommended for Hopper).
const GemmWorkspace = 32 << 20

type blasState struct {
	h      cuda.CublasLt
	pref   cuda.MatmulPreference
	ws     Buffer
	wsSize uint64
	plans  map[GemmSpec]*gemmPlan
}

type gemmPlan struct {
	desc       cuda.MatmulDesc
	a, b, c    cuda.MatrixLayout
	candidates []cuda.HeuristicResult // best first, per the heuristic
	algo       cuda.HeuristicResult   // the one in use
	tuned      bool                   // SetGemmTuning's choice is made
}

func (d *Device) blasInit() (*blasState, error) {
	if d.blas != nil {
		return d.blas, nil
	}
	h, err := cuda.CublasLtCreate()
	if err != nil {
		return nil, err
	}
	bs := &blasState{h: h, plans: map[GemmSpec]*gemmPlan{}, wsSize: uint64(cmp.Or(d.gemmWS, GemmWorkspace))}
	bs.pref, err = d.gemmPreference(bs.wsSize)
	if err == nil {
		bs.ws, err = d.alloc.Alloc(int64(bs.wsSize))
	}
	if err != nil {
		if bs.pref != 0 {
			err = errors.Join(err, bs.pref.Destroy())
		}
		return nil, errors.Join(err, h.Destroy())
	}
	d.blas = bs
	return bs, nil
}

// gemmPreference returns the heuristic preference of the device's GEMMs
// with a workspace of the given bytes.
func (d *Device) gemmPreference(workspace uint64) (cuda.MatmulPreference, error) {
	pref, err := cuda.MatmulPreferenceCreate()
	if err != nil {
		return 0, err
	}
	err = pref.SetMaxWorkspace(workspace)
	if err == nil {
		// Split-K partial sums are added in fp32 (or in place), never in
		// the output type: a bf16 product would otherwise round once per
		// split (TestGPUGemm saw 5 roundings' error on a 100x257x31 one).
		// Deterministic GEMMs leave out the in-place (atomic) reduction.
		mask := cuda.ReductionInPlace | cuda.ReductionComputeType
		if d.detGemm {
			mask = cuda.ReductionComputeType
		}
		err = pref.SetReductionSchemes(mask)
	}
	if err != nil {
		return 0, errors.Join(err, pref.Destroy())
	}
	return pref, nil
}

func (bs *blasState) close(d *Device) error {
	var errs []error
	for _, p := range bs.plans {
		errs = append(errs, p.destroy())
	}
	d.alloc.Free(bs.ws)
	errs = append(errs, bs.pref.Destroy(), bs.h.Destroy())
	return errors.Join(errs...)
}

func (p *gemmPlan) destroy() error {
	var errs []error
	for _, l := range []cuda.MatrixLayout{p.a, p.b, p.c} {
		if l != 0 {
			errs = append(errs, l.Destroy())
		}
	}
	if p.desc != 0 {
		errs = append(errs, p.desc.Destroy())
	}
	return errors.Join(errs...)
}

// plan returns the cached plan for a normalized spec, making it on first use.
func (d *Device) plan(bs *blasState, s GemmSpec) (*gemmPlan, error) {
	if p := bs.plans[s]; p != nil {
		return p, nil
	}
	cm := s.toColMajor()
	compute := cuda.Compute32F
	if s.In == dtype.F32 && s.TF32 {
		compute = cuda.Compute32FFastTF32
	}
	p := &gemmPlan{}
	var err error
	fail := func(e error) (*gemmPlan, error) {
		p.destroy()
		return nil, fmt.Errorf("gpu %d: gemm plan %+v: %w", d.info.Ordinal, s, e)
	}
	if p.desc, err = cuda.MatmulDescCreate(compute, cuda.R32F); err != nil {
		return fail(err)
	}
	if err = p.desc.SetTranspose(cm.transA, cm.transB); err != nil {
		return fail(err)
	}
	if s.Scale != ScaleNone { // the pointers come with each call (gemm)
		// A null pointer is scale 1 for scalars, but no vector: the
		// heuristic refuses vector scales without pointers, so the plan
		// is made on the workspace's address (never read: each call sets
		// its own).
		mode, at := cuda.ScaleScalar32F, cuda.DevicePtr(0)
		if s.Scale == ScaleRowsCols {
			mode, at = cuda.ScaleOuterVec32F, bs.ws.Ptr
		}
		if err = p.desc.SetScales(mode, at, at); err != nil {
			return fail(err)
		}
		if err = p.desc.SetFastAccum(s.FastAccum); err != nil {
			return fail(err)
		}
	}
	if p.a, err = cuda.MatrixLayoutCreate(cuda.BlasType(s.In), cm.aRows, cm.aCols, cm.lda); err != nil {
		return fail(err)
	}
	if p.b, err = cuda.MatrixLayoutCreate(cuda.BlasType(s.In), cm.bRows, cm.bCols, cm.ldb); err != nil {
		return fail(err)
	}
	if p.c, err = cuda.MatrixLayoutCreate(cuda.BlasType(s.Out), cm.cRows, cm.cCols, cm.ldc); err != nil {
		return fail(err)
	}
	if s.Batch > 1 {
		for _, lb := range []struct {
			l      cuda.MatrixLayout
			stride int64
		}{{p.a, cm.strideA}, {p.b, cm.strideB}, {p.c, cm.strideC}} {
			if err = lb.l.SetBatch(int32(s.Batch), lb.stride); err != nil {
				return fail(err)
			}
		}
	}
	if p.candidates, err = bs.h.Heuristics(p.desc, p.a, p.b, p.c, p.c, bs.pref, gemmCandidates); err != nil {
		return fail(err)
	}
	if len(p.candidates) == 0 {
		return fail(fmt.Errorf("cuBLASLt has no algorithm for this product with a %d-byte workspace", bs.wsSize))
	}
	p.algo = p.candidates[0]
	bs.plans[s] = p
	return p, nil
}

// SetDeterministicGemm makes the device's GEMMs reproducible bit for bit
// from run to run: algorithms that split K may add their partial sums only
// in the compute type, not in place with atomics. It must come before the
// device's first GEMM.
func (d *Device) SetDeterministicGemm() error {
	if d.blas != nil {
		return fmt.Errorf("gpu %d: SetDeterministicGemm after the first GEMM", d.info.Ordinal)
	}
	d.detGemm = true
	return nil
}

// SetGemmWorkspace sets the bytes of the device's cuBLASLt workspace
// (GemmWorkspace unless set): the heuristic offers only algorithms that fit
// in it. It must come before the device's first GEMM, unless it sets the
// size already in use.
func (d *Device) SetGemmWorkspace(bytes int64) error {
	if d.blas != nil && uint64(bytes) != d.blas.wsSize {
		return fmt.Errorf("gpu %d: SetGemmWorkspace after the first GEMM", d.info.Ordinal)
	}
	if bytes <= 0 {
		return fmt.Errorf("gpu %d: GEMM workspace of %d bytes", d.info.Ordinal, bytes)
	}
	d.gemmWS = bytes
	return nil
}

// Gemm queues the product described by spec on s (the default stream when
// nil). The first call for a spec asks cuBLASLt's heuristic for its
// algorithm; later calls reuse the plan. With SetGemmTuning, the first call
// on the default stream outside a capture or a Replay dry run times the
// heuristic's candidates (or reads the choice on disk) first. FP8 specs
// go through GemmFP8.
func (d *Device) Gemm(s *Stream, spec GemmSpec, alpha float32, a, b cuda.DevicePtr, beta float32, c cuda.DevicePtr) error {
	return d.GemmTo(s, spec, alpha, a, b, beta, c, c)
}

// GemmTo is Gemm with the result in out instead of c:
// out = alpha·op(A)·op(B) + beta·C, out laid out as C (a residual add in
// the product's epilogue when beta is 1). out is c or does not overlap it.
func (d *Device) GemmTo(s *Stream, spec GemmSpec, alpha float32, a, b cuda.DevicePtr, beta float32, c, out cuda.DevicePtr) error {
	if spec.In == dtype.F8E4M3 {
		panic("gpu: GemmTo of FP8 inputs: use GemmFP8, which takes their scales")
	}
	return d.gemm("Gemm", s, spec, alpha, a, 0, b, 0, beta, c, out)
}

// GemmFP8 is GemmTo for E4M3 inputs (spec.In dtype.F8E4M3) with their
// float32 scales in device memory, sa for A and sb for B: one each
// (ScaleTensor) or sa per row of A and sb per row of the stored B, that is
// per output column (ScaleRowsCols):
//
//	out[i][j] = alpha·sa[i]·sb[j]·Σ_p A[i][p]·B[j][p] + beta·C[i][j]
//
// with fp32 accumulation (cuBLASLt's default, not its fast FP8
// accumulation) and one rounding to Out. The plan is made as Gemm's; the
// scale pointers are set on it at each call.
func (d *Device) GemmFP8(s *Stream, spec GemmSpec, alpha float32, a, sa, b, sb cuda.DevicePtr, beta float32, c, out cuda.DevicePtr) error {
	if spec.In != dtype.F8E4M3 {
		panic(fmt.Sprintf("gpu: GemmFP8 of %v inputs", spec.In))
	}
	if sa == 0 || sb == 0 {
		panic("gpu: GemmFP8 without scales")
	}
	return d.gemm("GemmFP8", s, spec, alpha, a, sa, b, sb, beta, c, out)
}

// gemm queues out = alpha·op(A)·op(B) + beta·C for Gemm and GemmFP8; sa
// and sb are the FP8 scales (0 for other inputs).
func (d *Device) gemm(call string, s *Stream, spec GemmSpec, alpha float32, a, sa, b, sb cuda.DevicePtr, beta float32, c, out cuda.DevicePtr) error {
	spec, bs, p, err := d.planned(call, spec)
	if err != nil {
		return err
	}
	// cuBLASLt's A is our B: its A scale is sb, its B scale sa.
	setScales := func() error { return nil }
	if spec.Scale != ScaleNone {
		setScales = func() error { return p.desc.SetScalePointers(sb, sa) }
		if err := setScales(); err != nil { // tuning below runs on them
			return err
		}
	}
	// Deterministic GEMMs keep the heuristic's first: a choice by timing
	// could differ between machines and runs.
	if d.tune != nil && !d.detGemm && !p.tuned && d.rec == nil && !d.capturing && d.stream(s) == d.main {
		if err := d.tunePlan(bs, p, spec, alpha, a, b, beta, c, out); err != nil {
			return err
		}
	}
	h := d.stream(s).h
	if d.rec != nil {
		algo := p.algo.Algo // as planned now, whatever tuning does later
		words := append([]uint64{uint64(p.desc), uint64(a), uint64(b), uint64(c), uint64(out), uint64(math.Float32bits(alpha)),
			uint64(math.Float32bits(beta)), uint64(h)}, algo.Words()...)
		if spec.Scale != ScaleNone {
			words = append(words, uint64(sa), uint64(sb))
		}
		d.rec.other(func() error {
			if err := setScales(); err != nil {
				return err
			}
			d.launched()
			return bs.h.Matmul(p.desc, unsafe.Pointer(&alpha), b, p.a, a, p.b, unsafe.Pointer(&beta), c, p.c, out, p.c,
				&algo, bs.ws.Ptr, bs.wsSize, h)
		}, 'g', words...)
		return nil
	}
	d.launched()
	return bs.h.Matmul(p.desc, unsafe.Pointer(&alpha), b, p.a, a, p.b, unsafe.Pointer(&beta), c, p.c, out, p.c,
		&p.algo.Algo, bs.ws.Ptr, bs.wsSize, h)
}

// GemmAlgorithms returns how many heuristic candidates the plan for spec has
// and the index of the one in use (after TuneGemm, the fastest measured).
func (d *Device) GemmAlgorithms(spec GemmSpec) (candidates, inUse int, err error) {
	_, _, p, err := d.planned("GemmAlgorithms", spec)
	if err != nil {
		return 0, 0, err
	}
	for i, c := range p.candidates {
		if c.Algo == p.algo.Algo {
			inUse = i
		}
	}
	return len(p.candidates), inUse, nil
}

// planned checks the call's thread and returns spec normalized, the
// device's cuBLASLt state and spec's plan (made on first use).
func (d *Device) planned(call string, spec GemmSpec) (GemmSpec, *blasState, *gemmPlan, error) {
	if err := d.check(call); err != nil {
		return spec, nil, nil, err
	}
	spec = spec.normalized()
	bs, err := d.blasInit()
	if err != nil {
		return spec, nil, nil, err
	}
	p, err := d.plan(bs, spec)
	return spec, bs, p, err
}
