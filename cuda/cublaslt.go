package cuda

import (
	"fmt"
	"unsafe"
)

// DataType is a cudaDataType.
type DataType int32

// Data types of matrices and scalars.
const (
	R32F    DataType = 0
	R64F    DataType = 1
	R16F    DataType = 2
	R16BF   DataType = 14
	R8FE4M3 DataType = 28 // CUDA_R_8F_E4M3 (OCP E4M3FN)
	R8FE5M2 DataType = 29 // CUDA_R_8F_E5M2
)

// ComputeType is a cublasComputeType_t.
type ComputeType int32

// Compute (accumulation) types.
const (
	Compute16F         ComputeType = 64
	Compute32F         ComputeType = 68
	Compute32FFast16BF ComputeType = 75
	Compute32FFastTF32 ComputeType = 77
)

// Attribute numbers of cuBLASLt descriptors (cublasLt.h).
const (
	matmulDescComputeType = 0
	matmulDescScaleType   = 1
	matmulDescTransA      = 3
	matmulDescTransB      = 4
	matmulDescAScalePtr   = 17 // CUBLASLT_MATMUL_DESC_A_SCALE_POINTER
	matmulDescBScalePtr   = 18 // CUBLASLT_MATMUL_DESC_B_SCALE_POINTER
	matmulDescAScaleMode  = 31 // CUBLASLT_MATMUL_DESC_A_SCALE_MODE
	matmulDescBScaleMode  = 32 // CUBLASLT_MATMUL_DESC_B_SCALE_MODE
	matmulDescFastAccum   = 25 // CUBLASLT_MATMUL_DESC_FAST_ACCUM
	layoutBatchCount      = 5
	layoutStridedBatch    = 6
	prefMaxWorkspaceBytes = 1
	prefReductionSchemes  = 3
)

// Reduction schemes of split-K algorithms (cublasLtReductionScheme_t), as
// bits of a preference mask: in place, in the compute type (fp32 partial
// sums), or in the output type (partial sums rounded to, e.g., bf16).
const (
	ReductionInPlace     uint32 = 1
	ReductionComputeType uint32 = 2
	ReductionOutputType  uint32 = 4
)

// Handles of cuBLASLt objects.
type (
	CublasLt         uintptr // cublasLtHandle_t
	MatmulDesc       uintptr // cublasLtMatmulDesc_t
	MatrixLayout     uintptr // cublasLtMatrixLayout_t
	MatmulPreference uintptr // cublasLtMatmulPreference_t
)

// MatmulAlgo is a cublasLtMatmulAlgo_t (opaque, 64 bytes).
type MatmulAlgo struct{ data [8]uint64 }

// Words returns the algorithm's 64 bytes as words (a signature of it).
func (a MatmulAlgo) Words() []uint64 { return a.data[:] }

// HeuristicResult is a cublasLtMatmulHeuristicResult_t.
type HeuristicResult struct {
	Algo          MatmulAlgo
	WorkspaceSize uint64
	State         int32 // cublasStatus_t; 0 when the entry is usable
	WavesCount    float32
	_             [4]int32
}

var cublasStatusNames = map[int32]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// lt calls a cuBLASLt function and converts its cublasStatus_t.
//
//go:uintptrescapes
func lt(p *proc, args ...uintptr) error {
	code, err := p.status(args...)
	if err != nil {
		return err
	}
	return cublasError(p.name, code)
}

func cublasError(call string, code int32) error {
	if code == 0 {
		return nil
	}
	e := &Error{Call: call, Lib: "cublasLt", Code: int(code), Name: cublasStatusNames[code]}
	if s, err := pLtStatusName.invoke(uintptr(code)); err == nil && s != 0 {
		e.Name = cString(s)
	}
	if s, err := pLtStatusString.invoke(uintptr(code)); err == nil && s != 0 {
		e.Desc = cString(s)
	}
	if e.Name == "" {
		e.Name = fmt.Sprintf("cublasStatus %d", code)
	}
	return e
}

// CublasLtVersion returns cuBLASLt's version as 10000*major + 100*minor + patch.
func CublasLtVersion() (int, error) {
	v, err := pLtGetVersion.invoke()
	return int(v), err
}

// CublasLtCreate creates a cuBLASLt handle for the current context.
func CublasLtCreate() (CublasLt, error) {
	var h uintptr
	err := lt(pLtCreate, uintptr(unsafe.Pointer(&h)))
	return CublasLt(h), err
}

// Destroy releases h.
func (h CublasLt) Destroy() error { return lt(pLtDestroy, uintptr(h)) }

// MatmulDescCreate creates an operation descriptor.
func MatmulDescCreate(compute ComputeType, scale DataType) (MatmulDesc, error) {
	var d uintptr
	err := lt(pLtDescCreate, uintptr(unsafe.Pointer(&d)), uintptr(compute), uintptr(scale))
	return MatmulDesc(d), err
}

// SetTranspose sets whether A and B enter the product transposed.
func (d MatmulDesc) SetTranspose(transA, transB bool) error {
	ta, tb := boolOp(transA), boolOp(transB)
	if err := lt(pLtDescSetAttr, uintptr(d), matmulDescTransA, uintptr(unsafe.Pointer(&ta)), 4); err != nil {
		return err
	}
	return lt(pLtDescSetAttr, uintptr(d), matmulDescTransB, uintptr(unsafe.Pointer(&tb)), 4)
}

func boolOp(t bool) int32 {
	if t {
		return 1 // CUBLAS_OP_T
	}
	return 0 // CUBLAS_OP_N
}

// MatrixScale is a cublasLtMatmulMatrixScale_t: how the scale of an FP8
// input is laid out.
type MatrixScale int32

// Scale modes of FP8 inputs (cuBLAS 12.9 and later; CUDA 13's cuBLASLt).
const (
	// ScaleScalar32F: one float32 for the whole matrix (the default).
	ScaleScalar32F MatrixScale = 0
	// ScaleOuterVec32F: float32 vectors, M for A and N for B (cuBLASLt's
	// column-major M and N): D[i][j] = alpha·sA[i]·sB[j]·Σ_l A[i][l]B[l][j]
	// + beta·C[i][j]. Both A and B must use it.
	ScaleOuterVec32F MatrixScale = 3
	// ScaleVec128x32F: one float32 per 128 elements along K (1x128 blocks).
	ScaleVec128x32F MatrixScale = 4
	// ScaleBlock128x128x32F: one float32 per 128x128 block.
	ScaleBlock128x128x32F MatrixScale = 5
)

// SetScales sets the scale mode of A and B and their device pointers
// (float32 scalars or vectors as mode says). A zero pointer means scale 1
// in ScaleScalar32F.
func (d MatmulDesc) SetScales(mode MatrixScale, a, b DevicePtr) error {
	m := int32(mode)
	for _, attr := range []uintptr{matmulDescAScaleMode, matmulDescBScaleMode} {
		if err := lt(pLtDescSetAttr, uintptr(d), attr, uintptr(unsafe.Pointer(&m)), 4); err != nil {
			return err
		}
	}
	return d.SetScalePointers(a, b)
}

// SetScalePointers sets the device pointers of A's and B's scales, in the
// mode set before (SetScales). A matmul reads them when it is queued, so a
// plan's descriptor can take new scales before each call.
func (d MatmulDesc) SetScalePointers(a, b DevicePtr) error {
	pa, pb := uint64(a), uint64(b)
	if err := lt(pLtDescSetAttr, uintptr(d), matmulDescAScalePtr, uintptr(unsafe.Pointer(&pa)), 8); err != nil {
		return err
	}
	return lt(pLtDescSetAttr, uintptr(d), matmulDescBScalePtr, uintptr(unsafe.Pointer(&pb)), 8)
}

// SetFastAccum sets whether an FP8 product accumulates fast: on, the
// tensor cores' partial sums are not promoted to fp32 every few steps
// along K (faster, less accurate); off, cuBLASLt's default.
func (d MatmulDesc) SetFastAccum(on bool) error {
	var v int8
	if on {
		v = 1
	}
	return lt(pLtDescSetAttr, uintptr(d), matmulDescFastAccum, uintptr(unsafe.Pointer(&v)), 1)
}

// Destroy releases d.
func (d MatmulDesc) Destroy() error { return lt(pLtDescDestroy, uintptr(d)) }

// MatrixLayoutCreate describes a column-major rows x cols matrix with
// leading dimension ld (elements).
func MatrixLayoutCreate(t DataType, rows, cols uint64, ld int64) (MatrixLayout, error) {
	var l uintptr
	err := lt(pLtLayoutCreate, uintptr(unsafe.Pointer(&l)), uintptr(t), uintptr(rows), uintptr(cols), uintptr(ld))
	return MatrixLayout(l), err
}

// SetBatch makes l a strided batch of count matrices, stride elements apart.
func (l MatrixLayout) SetBatch(count int32, stride int64) error {
	if err := lt(pLtLayoutSetAttr, uintptr(l), layoutBatchCount, uintptr(unsafe.Pointer(&count)), 4); err != nil {
		return err
	}
	return lt(pLtLayoutSetAttr, uintptr(l), layoutStridedBatch, uintptr(unsafe.Pointer(&stride)), 8)
}

// Destroy releases l.
func (l MatrixLayout) Destroy() error { return lt(pLtLayoutDestroy, uintptr(l)) }

// MatmulPreferenceCreate creates a heuristic-search preference.
func MatmulPreferenceCreate() (MatmulPreference, error) {
	var p uintptr
	err := lt(pLtPrefCreate, uintptr(unsafe.Pointer(&p)))
	return MatmulPreference(p), err
}

// SetMaxWorkspace limits the workspace an algorithm may need.
func (p MatmulPreference) SetMaxWorkspace(bytes uint64) error {
	return lt(pLtPrefSetAttr, uintptr(p), prefMaxWorkspaceBytes, uintptr(unsafe.Pointer(&bytes)), 8)
}

// SetReductionSchemes allows the heuristic only algorithms that reduce
// split-K partial sums with one of the schemes of mask (Reduction* bits;
// algorithms that do not split K are always allowed).
func (p MatmulPreference) SetReductionSchemes(mask uint32) error {
	return lt(pLtPrefSetAttr, uintptr(p), prefReductionSchemes, uintptr(unsafe.Pointer(&mask)), 4)
}

// Destroy releases p.
func (p MatmulPreference) Destroy() error { return lt(pLtPrefDestroy, uintptr(p)) }

// Heuristics asks cuBLASLt for up to n algorithms for the operation, best
// first; only entries with State 0 are returned.
func (h CublasLt) Heuristics(desc MatmulDesc, a, b, c, d MatrixLayout, pref MatmulPreference, n int) ([]HeuristicResult, error) {
	res := make([]HeuristicResult, n)
	var got int32
	if err := lt(pLtAlgoGetHeuristic, uintptr(h), uintptr(desc), uintptr(a), uintptr(b), uintptr(c), uintptr(d),
		uintptr(pref), uintptr(n), uintptr(unsafe.Pointer(&res[0])), uintptr(unsafe.Pointer(&got))); err != nil {
		return nil, err
	}
	out := res[:0]
	for _, r := range res[:got] {
		if r.State == 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// Matmul computes D = alpha*op(A)*op(B) + beta*C on s. alpha and beta point
// to host scalars of the descriptor's scale type.
func (h CublasLt) Matmul(desc MatmulDesc, alpha unsafe.Pointer, a DevicePtr, al MatrixLayout, b DevicePtr, bl MatrixLayout,
	beta unsafe.Pointer, c DevicePtr, cl MatrixLayout, d DevicePtr, dl MatrixLayout,
	algo *MatmulAlgo, workspace DevicePtr, workspaceSize uint64, s Stream) error {
	return lt(pLtMatmul, uintptr(h), uintptr(desc), uintptr(alpha), uintptr(a), uintptr(al), uintptr(b), uintptr(bl),
		uintptr(beta), uintptr(c), uintptr(cl), uintptr(d), uintptr(dl), uintptr(unsafe.Pointer(algo)),
		uintptr(workspace), uintptr(workspaceSize), uintptr(s))
}
