package cuda

import (
	"fmt"

	"dflash/dtype"
)

// The one place that ties dtype.DType to the enums of the CUDA libraries.
var (
	blasTypes = map[dtype.DType]DataType{
		dtype.F64: R64F, dtype.F32: R32F, dtype.BF16: R16BF, dtype.F16: R16F,
		dtype.F8E4M3: R8FE4M3, dtype.F8E5M2: R8FE5M2,
	}
	ncclTypes = map[dtype.DType]NCCLDataType{
		dtype.F64: NCCLFloat64, dtype.F32: NCCLFloat32, dtype.BF16: NCCLBfloat16, dtype.F16: NCCLFloat16,
		dtype.I64: NCCLInt64, dtype.I32: NCCLInt32, dtype.I8: NCCLInt8,
		dtype.U64: NCCLUint64, dtype.U32: NCCLUint32, dtype.U8: NCCLUint8,
	}
	tensorMapTypes = map[dtype.DType]TensorMapDataType{
		dtype.BF16: TensorMapBFloat16, dtype.F16: TensorMapFloat16,
	}
)

// BlasType returns the cudaDataType of t for cuBLASLt. It panics for a type
// without one (a programming error: callers pass the types they support).
func BlasType(t dtype.DType) DataType { return lookup(blasTypes, t, "cudaDataType") }

// NCCLType returns the ncclDataType_t of t. It panics for a type NCCL does
// not reduce.
func NCCLType(t dtype.DType) NCCLDataType { return lookup(ncclTypes, t, "ncclDataType_t") }

// TensorMapType returns the CUtensorMapDataType of t (the 16-bit floats the
// attention kernels load through TMA). It panics for other types.
func TensorMapType(t dtype.DType) TensorMapDataType {
	return lookup(tensorMapTypes, t, "CUtensorMapDataType")
}

func lookup[V any](m map[dtype.DType]V, t dtype.DType, what string) V {
	v, ok := m[t]
	if !ok {
		panic(fmt.Sprintf("cuda: no %s for %v", what, t))
	}
	return v
}
