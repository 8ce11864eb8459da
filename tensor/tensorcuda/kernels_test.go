package tensorcuda

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/ceil"
	"dflash/kernels"
)

// These tests need no GPU and compile nothing: they check that the kernel
// sources declare exactly the kernels and parameter lists the launchers pass.

var kernelDecl = regexp.MustCompile(`extern "C" __global__ void (\w+)\(([^)]*)\)`)

// parseKernels returns the extern "C" kernels of a source and their
// parameters, with kinds read from the C types.
func parseKernels(t *testing.T, file, src string) map[string][]param {
	t.Helper()
	out := map[string][]param{}
	for _, m := range kernelDecl.FindAllStringSubmatch(src, -1) {
		var ps []param
		for _, a := range strings.Split(m[2], ",") {
			f := strings.Fields(strings.NewReplacer("*", " * ").Replace(a))
			var typ []string
			ptr := false
			for _, w := range f[:len(f)-1] {
				switch w {
				case "const", "__restrict__":
				case "*":
					ptr = true
				default:
					typ = append(typ, w)
				}
			}
			var k kind
			switch ty := strings.Join(typ, " "); {
			case ptr:
				k = kPtr
			case ty == "int":
				k = kI32
			case ty == "long long":
				k = kI64
			case ty == "float":
				k = kF32
			case ty == "double":
				k = kF64
			default:
				t.Errorf("%s: %s: parameter %q has type %q that launches cannot pass", file, m[1], a, ty)
			}
			ps = append(ps, param{f[len(f)-1], k})
		}
		out[m[1]] = ps
	}
	return out
}

func TestKernelSignatures(t *testing.T) {
	declared := map[string]*kernel{}
	for _, k := range allKernels {
		if declared[k.name] != nil {
			t.Errorf("kernel %s declared twice", k.name)
		}
		declared[k.name] = k
	}
	seen := map[string]bool{}
	for _, file := range kernels.Names() {
		if !strings.HasPrefix(file, "op_") {
			continue
		}
		src := Source(file)
		if regexp.MustCompile(`(?m)^\s*#include`).MatchString(src) {
			t.Errorf("%s still includes a header after splicing op_common.cuh", file)
		}
		for name, ps := range parseKernels(t, file, src) {
			seen[name] = true
			k := declared[name]
			if k == nil {
				t.Errorf("%s: kernel %s has no launcher declaration in kernels.go", file, name)
				continue
			}
			if k.file != file {
				t.Errorf("kernel %s is declared in %s but defined in %s", name, k.file, file)
			}
			if len(ps) != len(k.params) {
				t.Errorf("%s: %s has %d parameters %v, kernels.go declares %d %v", file, name, len(ps), ps, len(k.params), k.params)
				continue
			}
			for i := range ps {
				if ps[i] != k.params[i] {
					t.Errorf("%s: %s parameter %d is %s %s, kernels.go declares %s %s", file, name, i, ps[i].name, ps[i].kind, k.params[i].name, k.params[i].kind)
				}
			}
		}
	}
	for name, k := range declared {
		if !seen[name] {
			t.Errorf("kernel %s declared for %s is not defined there", name, k.file)
		}
	}
}

// fakeRun records launches instead of making them.
type fakeRun struct {
	launched map[string]int
	gemms    []gpu.GemmSpec
	gemmCD   [][2]gpu.Buffer // each product's C and D
	gemmBeta []float32
	last     struct {
		k           *kernel
		grid, block cuda.Dim3
		args        int
	}
	shapes map[string][2]cuda.Dim3 // each kernel's last grid and block
}

func (f *fakeRun) launch(k *kernel, grid, block cuda.Dim3, args *cuda.Args) error {
	f.launched[k.name]++
	f.last.k, f.last.grid, f.last.block, f.last.args = k, grid, block, args.Len()
	f.shapes[k.name] = [2]cuda.Dim3{grid, block}
	return nil
}

func (f *fakeRun) gemm(spec gpu.GemmSpec, alpha float32, a, b gpu.Buffer, beta float32, c, d gpu.Buffer) error {
	f.launched["gemm"]++
	f.gemms = append(f.gemms, spec)
	f.gemmCD, f.gemmBeta = append(f.gemmCD, [2]gpu.Buffer{c, d}), append(f.gemmBeta, beta)
	return nil
}

func (f *fakeRun) gemmFP8(spec gpu.GemmSpec, alpha float32, a, sa, b, sb gpu.Buffer, beta float32, c, d gpu.Buffer) error {
	f.launched["gemmFP8"]++
	f.gemms = append(f.gemms, spec)
	f.gemmCD, f.gemmBeta = append(f.gemmCD, [2]gpu.Buffer{c, d}), append(f.gemmBeta, beta)
	return nil
}

func fakeOps(dt dtype.DType) (*Ops, *fakeRun) {
	f := &fakeRun{launched: map[string]int{}, shapes: map[string][2]cuda.Dim3{}}
	return &Ops{dt: dt, sms: 132, run: f}, f
}

// TestLaunchersMatchKernels calls every launcher (the argument checks panic
// on a mismatch with the declared parameter list) and checks that every
// declared kernel is launched by some launcher.
func TestLaunchersMatchKernels(t *testing.T) {
	big := gpu.Buffer{Ptr: 0x10000, Size: 1 << 40}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			o, f := fakeOps(dt)
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(o.Gather(big, 100, 33, big, 7, big))
			if f.last.grid.X != 7 {
				t.Errorf("Gather grid %v, want one block per id", f.last.grid)
			}
			must(o.ScatterAdd(big, 7, 33, big, big, 100))
			must(o.RMSNorm(big, big, 9, 5000, 1e-6, big, big))
			if f.last.grid.X != 9 {
				t.Errorf("RMSNorm of dim 5000: grid %v, want one block per row", f.last.grid)
			}
			// dim 128: 16 vectors of bf16, 32 of fp32, one per lane; 393216
			// rows of 16 or 32 lanes fill the grid's cap many times over.
			must(o.RMSNorm(big, big, 393216, 128, 1e-6, big, big))
			if want := uint32(o.sms * wavesPerSM); f.last.grid.X != want || f.launched["op_rmsnorm_fwd_small"] != 1 {
				t.Errorf("RMSNorm of dim 128: grid %v, launched %v, want op_rmsnorm_fwd_small on %d blocks", f.last.grid, f.launched, want)
			}
			must(o.RMSNorm(big, big, 9, 65, 1e-6, big, big))
			if want := uint32(ceil.Div(9*o.normLanes(65), threads)); f.last.grid.X != want {
				t.Errorf("RMSNorm of 9 rows of dim 65: grid %v, want %d blocks", f.last.grid, want)
			}
			must(o.RMSNormBackward(big, big, big, big, 1000, 5000, big, gpu.Buffer{}, gpu.Buffer{}, true))
			if f.last.grid.X != 1000 || f.launched["op_rmsnorm_bwd_dx"] != 1 {
				t.Errorf("RMSNormBackward dx of dim 5000: grid %v, want op_rmsnorm_bwd_dx on one block per row", f.last.grid)
			}
			must(o.RMSNormBackward(big, big, big, big, 1000, 4096, big, big, big, true)) // fused
			must(o.RMSNormBackward(big, big, big, big, 1000, 65, big, big, big, true))
			per, nc := chunks(1000, 65)
			if f.last.grid.X != uint32(ceil.Div(65, colSumCols)) || per*nc < 1000 {
				t.Errorf("colsum grid %v, chunks %d×%d", f.last.grid, nc, per)
			}
			must(o.RoPE(big, 5, 3, 8, big, big, big, true, true))
			// Qwen3-8B queries: 393216 head rows of 64 pairs, 8 (bf16) or 16
			// (fp32) lanes each, fill the grid's cap.
			must(o.NormRoPE(big, big, 4, 3072, 32, 128, 32*128, 1e-6, big, big, big, big))
			if want := uint32(o.sms * wavesPerSM); f.last.grid.X != want || o.pairLanes(64) != 64/int(16/o.es()) {
				t.Errorf("NormRoPE of 393216 head rows: grid %v, %d lanes", f.last.grid, o.pairLanes(64))
			}
			must(o.NormRoPE(big, gpu.Buffer{}, 2, 3, 4, 8, 32, 1e-6, big, big, big, gpu.Buffer{}))
			must(o.NormRoPEBackward(gpu.Buffer{}, gpu.Buffer{}, gpu.Buffer{}, big, big, big, 2, 3, 4, 8, 32, big, gpu.Buffer{}, gpu.Buffer{}, false))
			must(o.NormRoPEBackward(big, big, big, big, big, big, 2, 3, 4, 4096, 4*4096, big, big, big, true))
			if f.last.grid.X != uint32(ceil.Div(4096, colSumCols)) || f.launched["op_norm_rope_bwd_dw"] != 1 {
				t.Errorf("NormRoPEBackward dw: colsum grid %v, launched %v", f.last.grid, f.launched)
			}
			must(o.SwiGLU(big, big, big, 1001))
			must(o.SwiGLUBackward(big, big, big, big, gpu.Buffer{}, 1001, true))
			must(o.SwiGLUPacked(big, big, 3, 7))
			must(o.SwiGLUPackedBackward(big, big, big, 3, 7, true))
			must(o.Add(big, big, big, 77))
			must(o.Axpy(2, big, big, 77))
			must(o.Scale(2, big, 77))
			must(o.AxpyBy(2, big, big, big, 77))
			must(o.AxpyToF32(2, gpu.Buffer{}, big, big, 77))
			must(o.AxpyFromF32(2, big, big, big, 77))
			must(o.Fill(big, 3, 77))
			nb, err := o.SumSquares(big, 1<<30, big)
			must(err)
			if nb != o.MaxSumBlocks() || int(f.last.grid.X) != nb {
				t.Errorf("SumSquares of 2^30 elements: %d blocks, grid %v, want the most, %d", nb, f.last.grid, o.MaxSumBlocks())
			}
			must(o.AddRows(big, 3, 7, big))
			must(o.SumRows(big, 3, 7, big, big))
			must(o.Copy2D(4, 3, big, 5, 1, big, 9, 6, true))
			must(o.Copy2D(1, 50331648, big, 50331648, 0, big, 50331648, 0, false))
			if want := uint32(o.sms * wavesPerSM); f.last.grid.X != want {
				t.Errorf("Copy2D of one row of 50331648: grid %v, want %d blocks (the whole device)", f.last.grid, want)
			}
			must(o.Transpose12(2, 3, 4, 5, big, big, false))
			must(o.SoftmaxXent(big, 3, 151936, big, big, big, big))
			if f.last.grid.X != 3 || f.last.block.X != xentThreads {
				t.Errorf("SoftmaxXent grid %v block %v", f.last.grid, f.last.block)
			}
			must(o.ArgmaxRows(big, 16, 151936, big))
			if f.last.grid.X != 16 || f.last.block.X != argmaxThreads {
				t.Errorf("ArgmaxRows grid %v block %v", f.last.grid, f.last.block)
			}
			l, err := NewAdamWLayout([]AdamWSegment{{0, 10, true}, {10, 5000, false}}, 5000)
			must(err)
			must(o.AdamW(l, big, big, big, big, big, gpu.Buffer{}, AdamWStep{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, StepSize: 1e-2, BC2Sqrt: 0.2236, Shrink: 1}))
			if f.last.grid.Y != 2 || f.last.grid.X != uint32(ceil.Div(4990, threads)) {
				t.Errorf("AdamW grid %v, want %d×2", f.last.grid, ceil.Div(4990, threads))
			}
			must(o.CacheRows(big, 8, 16, 128, true, big, 4096, 100, big))
			// Qwen3-8B's verification: 32 query heads over 8 kv heads, 16
			// rows (4 chunks of 16 group rows per kv head), 4097 keys split
			// so that the grid holds about decBlocksPerSM blocks per SM; the
			// grid is the span's (8192), which covers any length up to it.
			// bf16 runs the tensor-core kernel, whose warps each get a tile.
			mma := dt == dtype.BF16
			if o.decodeMMA(big, big, big) != mma {
				t.Errorf("DecodeAttention on tensor cores: %v", !mma)
			}
			g := o.decodeGrid(32, 16, 8, 8192, mma)
			must(o.DecodeAttention(big, 32, 16, 128, big, big, 8, 8200, 4097, big, true, 0.088, big, big, g, big))
			kern, tile, least := "op_decode_attn", decTile, 1
			if mma {
				kern, tile, least = "op_decode_attn_mma", decMMATile, decWarps
			}
			if f.launched[kern] != 1 || g.chunks != 4 || g.kps%tile != 0 || (g.splits-1)*g.kps >= 8192 || g.splits*g.kps < 8192 ||
				g.splits*8*4 < decBlocksPerSM*o.sms && g.kps > tile*least || g.kps < tile*least {
				t.Errorf("DecodeAttention grid %+v over %d SMs", g, o.sms)
			}
			if g1 := o.decodeGrid(4, 1, 4, 1, mma); g1.splits != 1 || g1.chunks != 1 {
				t.Errorf("DecodeAttention of one key: grid %+v", g1)
			}
			sms := o.sms
			o.sms = 8192 // a GPU that would take more splits than op_decode_combine merges
			if g := o.decodeGrid(1, 1, 1, 1<<20, mma); g.splits > decMaxSplits || g.splits*g.kps < 1<<20 || g.kps%tile != 0 {
				t.Errorf("DecodeAttention over 2²⁰ keys on %d SMs: grid %+v", o.sms, g)
			}
			o.sms = sms
			if mma { // operands off 16 bytes: the CUDA-core kernel in bf16 too
				odd := gpu.Buffer{Ptr: big.Ptr + 2, Size: big.Size - 2}
				g := o.decodeGrid(32, 16, 8, 8192, o.decodeMMA(big, odd, big))
				must(o.DecodeAttention(big, 32, 16, 128, odd, big, 8, 8200, 4097, big, true, 0.088, big, big, g, big))
				if f.launched["op_decode_attn"] != 1 || g.mma {
					t.Errorf("DecodeAttention of an unaligned k: grid %+v, launched %v", g, f.launched)
				}
			}
			// Decoding's products: 16 rows against Qwen3-8B's o_proj (128
			// blocks of 32 columns, k of 128 chunks: 8 warps) and 1 row
			// against down_proj (k of 384 chunks: 16 warps) run
			// op_skinny_gemm in bf16; gate_up (768 blocks, more than two
			// per SM), 17 rows, a transposed A or fp32 storage run cuBLASLt.
			gemms := len(f.gemms)
			must(o.Gemm(false, true, 16, 4096, 4096, 1, big, 4096, big, 4096, 0, big, 4096))
			skinny := dt == dtype.BF16
			if skinny && (f.launched["op_skinny_gemm"] != 1 || f.last.grid.X != 128 || f.last.block.X != 32*skMinWarps || len(f.gemms) != gemms) ||
				!skinny && len(f.gemms) != gemms+1 {
				t.Errorf("Gemm of 16 rows: launched %v, grid %v, block %v, %d cuBLASLt products", f.launched, f.last.grid, f.last.block, len(f.gemms)-gemms)
			}
			if skinny {
				must(o.GemmAdd(false, true, 1, 4096, 12288, 1, big, 12288, big, 12288, big, big, 4096))
				if f.launched["op_skinny_gemm"] != 2 || f.last.grid.X != 128 || f.last.block.X != 32*skMaxWarps {
					t.Errorf("GemmAdd of 1 row: grid %v, block %v", f.last.grid, f.last.block)
				}
			}
			gemms = len(f.gemms)
			must(o.Gemm(false, true, 1, 24576, 4096, 1, big, 4096, big, 4096, 0, big, 24576))
			must(o.Gemm(false, true, 17, 4096, 4096, 1, big, 4096, big, 4096, 0, big, 4096))
			must(o.Gemm(true, true, 16, 4096, 4096, 1, big, 16, big, 4096, 0, big, 4096))
			if len(f.gemms) != gemms+3 {
				t.Errorf("Gemm of 768 blocks, of 17 rows and of a transposed A: %d cuBLASLt products, want 3", len(f.gemms)-gemms)
			}
			must(o.QuantizeRowsE4M3(big, 16, 4096, big, big))
			if f.last.grid.X != 16 {
				t.Errorf("QuantizeRowsE4M3 grid %v, want one block per row", f.last.grid)
			}
			must(o.LinearFP8(big, 16, FP8Weight{Codes: big, Scales: big, Out: 1024, In: 4096}, big, big, 0, big, big))
			if g := f.gemms[len(f.gemms)-1]; f.launched["gemmFP8"] != 1 || g.M != 16 || g.N != 1024 || g.K != 4096 || !g.TransB ||
				g.Out != dt || g.Scale != gpu.ScaleRowsCols || f.last.grid.X != 16 {
				t.Errorf("LinearFP8: product %+v, quantization grid %v", g, f.last.grid)
			}
			must(o.RMSNormE4M3(big, big, 16, 4096, 1e-6, big, big, big, gpu.Buffer{}))
			if f.last.k != kRMSNormE4M3 || f.last.grid.X != 16 {
				t.Errorf("RMSNormE4M3 of rows of 4096: kernel %s grid %v, want op_rmsnorm_e4m3, one block per row", f.last.k.name, f.last.grid)
			}
			must(o.RMSNormE4M3(big, big, 16, 256, 1e-6, big, big, big, big))
			if f.last.k != kQuantE4M3 {
				t.Errorf("RMSNormE4M3 of rows of 256: last kernel %s, want the stage's quantization", f.last.k.name)
			}
			must(o.SwiGLUPackedE4M3(big, 16, 12288, big, big))
			if f.last.grid.X != 16 {
				t.Errorf("SwiGLUPackedE4M3 grid %v, want one block per row", f.last.grid)
			}
			for _, k := range allKernels {
				if f.launched[k.name] == 0 && (k != kSkinnyGemm && k != kDecodeAttnMMA || dt == dtype.BF16) { // bf16's alone
					t.Errorf("no launcher launched %s", k.name)
				}
			}
		})
	}
}

func TestLauncherChecksBufferSizes(t *testing.T) {
	o, _ := fakeOps(dtype.BF16)
	big := gpu.Buffer{Ptr: 0x10000, Size: 1 << 40}
	for _, c := range []struct {
		name, want string
		f          func()
	}{
		{"gather out", "Gather: out holds 100 bytes, needs 462", func() { _ = o.Gather(big, 10, 33, big, 7, gpu.Buffer{Ptr: 1, Size: 100}) }},
		{"scatter fp32 table", "ScatterAdd: dtable", func() { _ = o.ScatterAdd(big, 7, 33, big, gpu.Buffer{Ptr: 1, Size: 2 * 33 * 10}, 10) }},
		{"rmsnorm scratch", "RMSNormBackward: scratch", func() {
			_ = o.RMSNormBackward(big, big, big, big, 100, 8, gpu.Buffer{}, big, gpu.Buffer{Ptr: 1, Size: 4}, true)
		}},
		{"null input", "SwiGLU: gate is a null buffer", func() { _ = o.SwiGLU(gpu.Buffer{}, big, big, 3) }},
		{"axpy-by scalar", "AxpyBy: s is a null buffer", func() { _ = o.AxpyBy(1, gpu.Buffer{}, big, big, 3) }},
		// 5 fp32 elements: 20 bytes; 5 bf16 ones would fit.
		{"axpy to f32", "AxpyToF32: y holds 10 bytes, needs 20", func() { _ = o.AxpyToF32(1, gpu.Buffer{}, big, gpu.Buffer{Ptr: 1, Size: 10}, 5) }},
		{"axpy from f32", "AxpyFromF32: x holds 10 bytes, needs 20", func() { _ = o.AxpyFromF32(1, gpu.Buffer{}, gpu.Buffer{Ptr: 1, Size: 10}, big, 5) }},
		{"norm-rope rstd", "NormRoPE: rstd is a null buffer", func() {
			_ = o.NormRoPE(big, big, 2, 3, 4, 8, 32, 1e-6, big, big, big, gpu.Buffer{})
		}},
		{"norm-rope rows", "2147483648 head rows", func() {
			_ = o.NormRoPE(big, big, 1<<16, 1<<12, 8, 8, 64, 1e-6, big, big, big, big)
		}},
		{"norm-rope dw without w", "dw without a weight", func() {
			_ = o.NormRoPEBackward(big, gpu.Buffer{}, big, big, big, big, 2, 3, 4, 8, 32, big, big, big, true)
		}},
		{"norm-rope cos", "NormRoPEBackward: cos holds 10 bytes", func() {
			_ = o.NormRoPEBackward(big, big, big, gpu.Buffer{Ptr: 1, Size: 10}, big, big, 2, 3, 4, 8, 32, big, gpu.Buffer{}, gpu.Buffer{}, true)
		}},
		{"copy strides", "Copy2D: block of 3 cols", func() { _ = o.Copy2D(2, 3, big, 2, 0, big, 3, 0, false) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(r.(string), c.want) {
					t.Fatalf("panic %v, want one containing %q", r, c.want)
				}
			}()
			c.f()
		})
	}
}

func TestNormLanes(t *testing.T) {
	for _, c := range []struct {
		dim, bf16, f32 int
	}{
		{1, 1, 1}, {7, 1, 2}, {8, 1, 2}, {9, 2, 4}, {64, 8, 16}, {100, 16, 32}, {128, 16, 32},
		{256, 32, 32}, {1000, 32, 32}, {smallNormDim, 32, 32}, {smallNormDim + 1, 0, 0}, {4096, 0, 0},
	} {
		for _, w := range []struct {
			dt   dtype.DType
			want int
		}{{dtype.BF16, c.bf16}, {dtype.F32, c.f32}} {
			o, _ := fakeOps(w.dt)
			if got := o.normLanes(c.dim); got != w.want {
				t.Errorf("%v dim %d: %d lanes per row, want %d", w.dt, c.dim, got, w.want)
			}
		}
	}
}

// TestRowBlocks checks the blocks of the kernels that hold a row
// (rowThreads): the fewest whole warps holding the row at rowVecs vectors a
// thread, at most threads (rows past that and rows that are not whole
// vectors take the kernels' loops at threads), RMSNorm's and RMSNormE4M3's
// the same (their sums agree only so), and SwiGLU's E4M3 rows at threads.
func TestRowBlocks(t *testing.T) {
	big := gpu.Buffer{Ptr: 0x10000, Size: 1 << 40}
	for _, c := range []struct {
		dt   dtype.DType
		dim  int
		want int
	}{
		{dtype.BF16, 4096, 64}, {dtype.BF16, 2056, 64}, {dtype.BF16, 12288, 192}, {dtype.BF16, 16384, 256},
		{dtype.BF16, 20480, 256}, {dtype.BF16, 1030, 256}, {dtype.F32, 4096, 128}, {dtype.F32, 20480, 256},
		{dtype.F32, 1030, 256},
	} {
		name := fmt.Sprintf("%v dim %d", c.dt, c.dim)
		o, f := fakeOps(c.dt)
		if err := o.RMSNorm(big, big, 3, c.dim, 1e-6, big, big); err != nil {
			t.Fatal(err)
		}
		if err := o.RMSNormE4M3(big, big, 3, c.dim, 1e-6, big, big, big, gpu.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if err := o.QuantizeRowsE4M3(big, 3, c.dim, big, big); err != nil {
			t.Fatal(err)
		}
		if err := o.SwiGLUPackedE4M3(big, 3, c.dim, big, big); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"op_rmsnorm_fwd", "op_rmsnorm_e4m3", "op_quant_rows_e4m3"} {
			if s := f.shapes[k]; s[0] != cuda.Dim(3, 1, 1) || s[1] != cuda.Dim(uint32(c.want), 1, 1) {
				t.Errorf("%s: %s grid %v block %v, want 3 rows of %d threads", name, k, s[0], s[1], c.want)
			}
		}
		if s := f.shapes["op_swiglu_packed_e4m3"]; s[1] != cuda.Dim(threads, 1, 1) {
			t.Errorf("%s: op_swiglu_packed_e4m3 block %v, want %d threads", name, s[1], threads)
		}
		// A block under threads holds its row.
		if v := 16 / int(c.dt.Size()); c.want < threads && (c.dim%v != 0 || rowVecs*c.want < c.dim/v || c.want%32 != 0) {
			t.Errorf("%s: a block of %d threads does not hold a row", name, c.want)
		}
	}
}

func TestChunks(t *testing.T) {
	for _, cols := range []int{10, 128, 2048, 4096, 1 << 14, 151936} {
		most, fmost := max(maxChunks, chunkThreads/cols), max(maxChunks, normChunkElems/cols)
		for _, rows := range []int{1, 7, 16, 17, 33, 1000, 2048, 2049, 16384, 32768, 1 << 20} {
			per, n := chunks(rows, cols)
			if per*n < rows || per*(n-1) >= rows || n > most || per < minChunkRows {
				t.Errorf("rows %d, cols %d: %d chunks of %d (at most %d chunks)", rows, cols, n, per, most)
			}
			// With rows enough, at least half the chunks allowed (per rounds up).
			if rows >= minChunkRows*most && 2*n < most {
				t.Errorf("rows %d, cols %d: %d chunks, %d threads for the first stage", rows, cols, n, n*cols)
			}
			fper, fn := normChunks(rows, cols)
			if fper*fn < rows || fper*(fn-1) >= rows || fn > fmost || fper < minChunkRows {
				t.Errorf("rows %d, cols %d: fused: %d chunks of %d (at most %d chunks)", rows, cols, fn, fper, fmost)
			}
			if rows >= minChunkRows*fmost && 2*fn < fmost {
				t.Errorf("rows %d, cols %d: fused: %d chunks of %d elements", rows, cols, fn, cols)
			}
			// Scratch for either chunking, at most 8 MiB more than chunks' own.
			got := ColumnScratch(rows, cols)
			if got < int64(n*cols*4) || got < int64(fn*cols*4) || got > max(int64(n*cols*4), 8<<20) {
				t.Errorf("rows %d, cols %d: scratch %d for %d and %d chunks", rows, cols, got, n, fn)
			}
		}
	}
	if _, n := normChunks(32768, 4096); n != 512 {
		t.Errorf("the 8B drafter's norms: %d fused chunks, want 512", n)
	}
}

// TestRMSNormBackwardPaths checks the launcher's choice among the fused
// kernel, the dx kernels and the dw kernel's vector and scalar paths (told
// apart by their grids), and their shapes.
func TestRMSNormBackwardPaths(t *testing.T) {
	big, none := gpu.Buffer{Ptr: 0x10000, Size: 1 << 40}, gpu.Buffer{}
	odd := gpu.Buffer{Ptr: 0x10002, Size: 1 << 40}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F32} {
		v := 16 / int(dt.Size())
		for _, c := range []struct {
			rows, dim int
			x, dx, dw gpu.Buffer
			want      []string // kernels launched, besides op_colsum
			block     [2]int   // op_rmsnorm_bwd's in bf16 and fp32 (0: not launched)
		}{
			// 512 or 1024 vectors, 2 a thread.
			{32768, 4096, big, big, big, []string{"op_rmsnorm_bwd"}, [2]int{256, 512}},
			// 625 or 1250 vectors: 313 or 625 threads, in whole warps.
			{3, 5000, big, big, big, []string{"op_rmsnorm_bwd"}, [2]int{320, 640}},
			{9, 1032, big, big, big, []string{"op_rmsnorm_bwd"}, [2]int{96, 160}},
			{32768, 4096, big, none, big, []string{"op_rmsnorm_bwd_dw"}, [2]int{}},
			{32768, 4096, big, big, none, []string{"op_rmsnorm_bwd_dx"}, [2]int{}},
			{32768, 4096, odd, big, big, []string{"op_rmsnorm_bwd_dx", "op_rmsnorm_bwd_dw"}, [2]int{}},
			{300, 1000, big, big, big, []string{"op_rmsnorm_bwd_dx_small", "op_rmsnorm_bwd_dw"}, [2]int{}},
			{7, 1030, big, big, big, []string{"op_rmsnorm_bwd_dx", "op_rmsnorm_bwd_dw"}, [2]int{}},
			{7, 1 << 15, big, big, big, []string{"op_rmsnorm_bwd_dx", "op_rmsnorm_bwd_dw"}, [2]int{}}, // over 1024 threads
		} {
			block := c.block[0]
			if dt == dtype.F32 {
				block = c.block[1]
			}
			name := fmt.Sprintf("%v rows %d dim %d x %#x dx %v dw %v", dt, c.rows, c.dim, c.x.Ptr, c.dx.Ptr != 0, c.dw.Ptr != 0)
			o, f := fakeOps(dt)
			if err := o.RMSNormBackward(c.x, big, big, big, c.rows, c.dim, c.dx, c.dw, big, false); err != nil {
				t.Fatal(err)
			}
			want := map[string]int{}
			for _, k := range c.want {
				want[k]++
			}
			if c.dw.Ptr != 0 {
				want["op_colsum"]++
			}
			if !maps.Equal(f.launched, want) {
				t.Errorf("%s: launched %v, want %v", name, f.launched, want)
				continue
			}
			if block > 0 {
				_, nc := normChunks(c.rows, c.dim)
				if s := f.shapes["op_rmsnorm_bwd"]; s[0] != cuda.Dim(uint32(nc), 1, 1) || s[1] != cuda.Dim(uint32(block), 1, 1) {
					t.Errorf("%s: op_rmsnorm_bwd grid %v block %v, want %d chunks of %d threads", name, s[0], s[1], nc, block)
				}
			}
			if s, ok := f.shapes["op_rmsnorm_bwd_dw"]; ok {
				_, nc := chunks(c.rows, c.dim)
				bx := ceil.Div(c.dim, threads) // the scalar path: a column a thread
				if c.x.Ptr%16 == 0 && c.dim%v == 0 {
					bx = ceil.Div(c.dim/v, threads) // the vector path: a vector a thread
					if c.dim > smallNormDim {
						_, nc = normChunks(c.rows, c.dim)
					}
				}
				if s[0] != cuda.Dim(uint32(bx), uint32(nc), 1) {
					t.Errorf("%s: op_rmsnorm_bwd_dw grid %v, want %d×%d", name, s[0], bx, nc)
				}
			}
		}
	}
}

func TestAdamWLayoutErrors(t *testing.T) {
	for _, c := range []struct {
		segs  []AdamWSegment
		total int64
	}{
		{nil, 10},
		{[]AdamWSegment{{0, 5, true}, {4, 8, false}}, 10},
		{[]AdamWSegment{{0, 0, true}}, 10},
		{[]AdamWSegment{{0, 11, true}}, 10},
	} {
		if _, err := NewAdamWLayout(c.segs, c.total); err == nil {
			t.Errorf("segments %v over %d accepted", c.segs, c.total)
		}
	}
}

func TestNewRejectsDType(t *testing.T) {
	if _, err := New(nil, nil, dtype.F16); err == nil || !strings.Contains(err.Error(), "f16") {
		t.Fatalf("New with f16 storage: %v", err)
	}
}

// requiredMacro matches a kernel source's demand for a compile option:
// #ifndef X followed by an #error.
var requiredMacro = regexp.MustCompile(`(?m)^#ifndef (\w+)\n#error `)

// TestOpMacrosSupplied checks, for every op kernel file as NVRTC gets it
// (op_common.cuh spliced in), that each macro it requires (#ifndef X,
// #error) is among the -D options compileOptions passes in both storage
// dtypes, that no source #defines one of them itself (a second copy of the
// value), and that scripts/gpu-ops.sh builds the files with the same block
// shapes.
func TestOpMacrosSupplied(t *testing.T) {
	supplied := func(dt dtype.DType) map[string]string {
		m := map[string]string{}
		for _, o := range compileOptions(dt) {
			if d, ok := strings.CutPrefix(o, "-D"); ok {
				name, val, _ := strings.Cut(d, "=")
				m[name] = val
			}
		}
		return m
	}
	files := map[string]bool{}
	for _, k := range allKernels {
		files[k.file] = true
	}
	for f := range files {
		src := Source(f)
		req := requiredMacro.FindAllStringSubmatch(src, -1)
		if f == "op_rmsnorm.cu" && len(req) < 3 {
			t.Errorf("%s requires %d macros, want OP_BF16, OP_DW_THREADS and OP_NORM_VECS at least", f, len(req))
		}
		for _, m := range req {
			for _, dt := range []dtype.DType{dtype.F32, dtype.BF16} {
				if _, ok := supplied(dt)[m[1]]; !ok {
					t.Errorf("%s requires %s, which compileOptions(%v) does not pass", f, m[1], dt)
				}
			}
			if regexp.MustCompile(`(?m)^\s*#define ` + m[1] + `\b`).MatchString(src) {
				t.Errorf("%s #defines %s, which the launcher passes", f, m[1])
			}
		}
	}
	script, err := os.ReadFile(filepath.Join("..", "..", "scripts", "gpu-ops.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range blockShapes {
		want = append(want, fmt.Sprintf("-D%s=%d", d.name, d.value))
	}
	if line := `shapes="` + strings.Join(want, " ") + `"`; !strings.Contains(string(script), "\n"+line+"\n") {
		t.Errorf("scripts/gpu-ops.sh lacks the line %s", line)
	}
}
