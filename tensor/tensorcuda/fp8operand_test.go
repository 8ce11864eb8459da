package tensorcuda

import (
	"slices"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/tensor"
)

// TestFP8Operands checks on the fake device what AllocOperand hands out and
// how the ops take it: for an FP8 weight an FP8 activation of its row
// length (bf16 for another weight, or with QuantizeInProducers off), which
// RMSNorm of long rows and SwiGLUPacked write in one kernel each, the
// product then reading it with no quantization of its own; given back, its
// one allocation (codes and scales) is the next one's of the same size.
func TestFP8Operands(t *testing.T) {
	b, bfRun, f32Run, _ := fakeBackend()
	const rows, out, in = 8, 16, 2048
	arena, err := b.AllocParamsFP8(out*in+in, []tensor.Segment{{Off: 0, Len: out * in, Cols: in}})
	if err != nil {
		t.Fatal(err)
	}
	w, norm := arena.Slice(0, out*in), arena.Slice(out*in, out*in+in)
	op := b.AllocOperand(rows, in, w).(Buf)
	if op.dt != dtype.F8E4M3 || op.cols != in || op.n != rows*in || op.scales == 0 {
		t.Fatalf("AllocOperand for the FP8 weight: %v, rows of %d, scales at %#x", op, op.cols, uint64(op.scales))
	}
	if got := b.AllocOperand(rows, in, norm).(Buf); got.dt != dtype.BF16 {
		t.Errorf("AllocOperand for a bf16 weight: %v", got)
	}
	launches(bfRun, f32Run)
	x, rstd := b.AllocOut(rows*in), b.AllocStatOut(rows)
	b.RMSNorm(x, norm, in, 1e-6, op, rstd)
	y := b.AllocOut(rows * out)
	b.Gemm(false, true, rows, out, in, 1, op, in, w, in, 0, y, out)
	if got, want := launches(bfRun, f32Run), []string{"bf16:gemmFP8", "bf16:gemm f8e4m3->bf16", "bf16:op_rmsnorm_e4m3"}; !slices.Equal(got, sorted(want)) {
		t.Errorf("RMSNorm into the FP8 operand, then its product: launched %v, want %v", got, sorted(want))
	}
	y2 := b.AllocOut(rows * 2 * in)
	act := b.AllocOperand(rows, in, w)
	b.SwiGLUPacked(y2, in, act)
	b.GemmAdd(false, true, rows, out, in, 1, act, in, w, in, y, y, out)
	if got, want := launches(bfRun, f32Run), []string{"bf16:gemmFP8", "bf16:gemm f8e4m3->bf16", "bf16:op_swiglu_packed_e4m3"}; !slices.Equal(got, sorted(want)) {
		t.Errorf("SwiGLUPacked into the FP8 operand, then its product: launched %v, want %v", got, sorted(want))
	}
	b.FreeStep(act)
	if again := b.AllocOperand(rows, in, w).(Buf); again.ptr != act.(Buf).ptr {
		t.Errorf("an FP8 operand after one of its size was given back: at %#x, want %#x", uint64(again.ptr), uint64(act.(Buf).ptr))
	}
	b.QuantizeInProducers(false)
	plain := b.AllocOperand(rows, in, w)
	if plain.(Buf).dt != dtype.BF16 {
		t.Fatalf("AllocOperand with QuantizeInProducers off: %v", plain)
	}
	b.RMSNorm(x, norm, in, 1e-6, plain, rstd)
	b.Gemm(false, true, rows, out, in, 1, plain, in, w, in, 0, y, out)
	if got := strings.Join(launches(bfRun, f32Run), " "); !strings.Contains(got, "op_rmsnorm_fwd") || !strings.Contains(got, "op_quant_rows_e4m3") {
		t.Errorf("with QuantizeInProducers off: launched %s, want RMSNorm, then the product's quantization", got)
	}
	if msg := panicText(func() { b.Download(op, make([]float32, op.n)) }); msg == "" {
		t.Error("Download of an FP8 operand did not panic")
	}
}

func sorted(s []string) []string { slices.Sort(s); return s }
