package tensorcuda

import (
	"fmt"
	"slices"
	"strings"
)

// kind is the C type of a kernel parameter as the launch passes it.
type kind uint8

const (
	kPtr kind = iota + 1 // any device pointer
	kI32                 // int
	kI64                 // long long
	kF32                 // float
	kF64                 // double
)

var kindNames = map[string]kind{"p": kPtr, "i32": kI32, "i64": kI64, "f32": kF32, "f64": kF64}

func (k kind) String() string {
	for s, v := range kindNames {
		if v == k {
			return s
		}
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

type param struct {
	name string
	kind kind
}

// kernel is one extern "C" kernel of a kernels/op_*.cu file and its
// parameter list, in order.
type kernel struct {
	file, name string
	params     []param
}

// def declares kernel name of file with parameters "name:kind ..." (kinds
// p, i32, i64, f32, f64).
func def(file, name, sig string) *kernel {
	k := &kernel{file: file, name: name}
	for _, f := range strings.Fields(sig) {
		n, ks, ok := strings.Cut(f, ":")
		kd, known := kindNames[ks]
		if !ok || !known {
			panic(fmt.Sprintf("tensorcuda: kernel %s: bad parameter %q", name, f))
		}
		k.params = append(k.params, param{n, kd})
	}
	allKernels = append(allKernels, k)
	return k
}

// allKernels lists every declared kernel (filled by def).
var allKernels []*kernel

// kernelFiles returns the files of allKernels, each once, in order.
func kernelFiles() []string {
	var files []string
	for _, k := range allKernels {
		if !slices.Contains(files, k.file) {
			files = append(files, k.file)
		}
	}
	return files
}

// The kernels, with their parameter lists as the .cu files declare them.
var (
	kGather     = def("op_embed.cu", "op_gather", "table:p ids:p out:p n:i32 dim:i32 rows:i32")
	kScatterAdd = def("op_embed.cu", "op_scatter_add", "dout:p ids:p dtable:p n:i32 dim:i32 rows:i32")

	kRMSNorm        = def("op_rmsnorm.cu", "op_rmsnorm_fwd", "x:p w:p y:p rstd:p rows:i32 dim:i32 eps:f32")
	kRMSNormE4M3    = def("op_rmsnorm.cu", "op_rmsnorm_e4m3", "x:p w:p codes:p scales:p rstd:p rows:i32 dim:i32 eps:f32")
	kRMSNormDX      = def("op_rmsnorm.cu", "op_rmsnorm_bwd_dx", "x:p w:p rstd:p dy:p dx:p rows:i32 dim:i32 accumulate:i32")
	kRMSNormSmall   = def("op_rmsnorm.cu", "op_rmsnorm_fwd_small", "x:p w:p y:p rstd:p rows:i32 dim:i32 eps:f32 lanes:i32")
	kRMSNormDXSmall = def("op_rmsnorm.cu", "op_rmsnorm_bwd_dx_small", "x:p w:p rstd:p dy:p dx:p rows:i32 dim:i32 lanes:i32 accumulate:i32")
	kRMSNormDW      = def("op_rmsnorm.cu", "op_rmsnorm_bwd_dw", "x:p rstd:p dy:p partial:p rows:i32 dim:i32 rows_per_chunk:i32 vec:i32")
	kRMSNormBwd     = def("op_rmsnorm.cu", "op_rmsnorm_bwd", "x:p w:p rstd:p dy:p dx:p partial:p rows:i32 dim:i32 rows_per_chunk:i32 accumulate:i32")

	kAddRows = def("op_rows.cu", "op_add_rows", "y:p v:p total:i64 n:i32")
	kSumRows = def("op_rows.cu", "op_sum_rows", "y:p partial:p rows:i32 n:i32 rows_per_chunk:i32")
	kColSum  = def("op_rows.cu", "op_colsum", "partial:p v:p chunks:i32 n:i32")

	kNormRoPE   = def("op_norm_rope.cu", "op_norm_rope_fwd", "x:p w:p cos:p sin:p y:p rstd:p batch:i32 length:i32 heads:i32 half:i32 x_stride:i32 eps:f32 lanes:i32")
	kNormRoPEDX = def("op_norm_rope.cu", "op_norm_rope_bwd_dx", "x:p w:p rstd:p cos:p sin:p dy:p dx:p batch:i32 length:i32 heads:i32 half:i32 x_stride:i32 lanes:i32 accumulate:i32")
	kNormRoPEDW = def("op_norm_rope.cu", "op_norm_rope_bwd_dw", "x:p rstd:p cos:p sin:p dy:p partial:p batch:i32 length:i32 heads:i32 half:i32 x_stride:i32 rows_per_chunk:i32 vec:i32")

	kRoPE = def("op_rope.cu", "op_rope", "x:p cos:p sin:p y:p rows:i32 heads:i32 half:i32 inverse:i32 accumulate:i32")

	kSwiGLU           = def("op_swiglu.cu", "op_swiglu_fwd", "gate:p up:p out:p n:i64")
	kSwiGLUBwd        = def("op_swiglu.cu", "op_swiglu_bwd", "gate:p up:p dout:p dgate:p dup:p n:i64 accumulate:i32")
	kSwiGLUPacked     = def("op_swiglu.cu", "op_swiglu_packed_fwd", "y2:p out:p rows:i64 cols:i32")
	kSwiGLUPackedBwd  = def("op_swiglu.cu", "op_swiglu_packed_bwd", "y2:p dout:p dy2:p rows:i64 cols:i32 accumulate:i32")
	kSwiGLUPackedE4M3 = def("op_swiglu.cu", "op_swiglu_packed_e4m3", "y2:p codes:p scales:p rows:i32 cols:i32")

	kAdd         = def("op_ew.cu", "op_add", "a:p b:p out:p n:i64")
	kAxpy        = def("op_ew.cu", "op_axpy", "alpha:f32 x:p y:p n:i64")
	kScale       = def("op_ew.cu", "op_scale", "alpha:f32 x:p n:i64")
	kAxpyBy      = def("op_ew.cu", "op_axpy_by", "alpha:f32 s:p x:p y:p n:i64")
	kAxpyToF32   = def("op_ew.cu", "op_axpy_to_f32", "alpha:f32 s:p x:p y:p n:i64")
	kAxpyFromF32 = def("op_ew.cu", "op_axpy_from_f32", "alpha:f32 s:p x:p y:p n:i64")
	kFill        = def("op_ew.cu", "op_fill", "x:p v:f32 n:i64")

	kSumSq = def("op_norm.cu", "op_sumsq", "x:p n:i64 partial:p")

	kCopy2D      = def("op_copy.cu", "op_copy2d", "src:p src_stride:i64 src_off:i64 dst:p dst_stride:i64 dst_off:i64 rows:i32 cols:i32 accumulate:i32")
	kTranspose12 = def("op_copy.cu", "op_transpose12", "src:p dst:p na:i32 nb:i32 nc:i32 nd:i32 accumulate:i32")

	kXent = def("op_xent.cu", "op_softmax_xent", "logits:p rows:i32 vocab:i32 targets:p scale:p loss:p argmax:p")

	kArgmax = def("op_argmax.cu", "op_argmax_rows", "x:p rows:i32 cols:i32 out:p")

	kQuantE4M3 = def("op_fp8.cu", "op_quant_rows_e4m3", "x:p rows:i32 cols:i32 codes:p scales:p")

	kSkinnyGemm = def("op_skinny.cu", "op_skinny_gemm", "x:p ldx:i32 w:p ldw:i32 c:p y:p ldc:i32 m:i32 n:i32 k:i32 alpha:f32 beta:f32")

	kCacheRows     = def("op_decode.cu", "op_cache_rows", "src:p cache:p heads:i32 n:i32 head_dim:i32 heads_inner:i32 max_len:i32 at:p")
	kDecodeAttn    = def("op_decode.cu", "op_decode_attn", "q:p k:p v:p part_o:p part_ml:p heads:i32 n:i32 head_dim:i32 kv_heads:i32 max_len:i32 at:p causal:i32 scale:f32 kps:i32")
	kDecodeAttnMMA = def("op_decode.cu", "op_decode_attn_mma", "q:p k:p v:p part_o:p part_ml:p heads:i32 n:i32 head_dim:i32 kv_heads:i32 max_len:i32 at:p causal:i32 scale:f32 kps:i32")
	kDecodeCombine = def("op_decode.cu", "op_decode_combine", "part_o:p part_ml:p out:p rows:i32 head_dim:i32 splits:i32")

	kAdamW = def("op_adamw.cu", "op_adamw", "p:p g:p m:p v:p p16:p seg:p b1:f64 b2:f64 eps:f64 step_size:f64 bc2_sqrt:f64 shrink:f64")
)
