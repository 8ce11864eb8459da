package stepbench

import (
	"fmt"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// opCounter is the CPU backend with step memory (as a GPU's: gradients
// are released and handed on, as in training) that counts, phase by phase
// (tensor.Profiler), the calls of the ops that move whole activations:
// adds, copies, GEMMs. Its profile's MS are 0; Op is the op and its size.
type opCounter struct {
	*backendtest.StepCPU
	phase string
	calls map[[2]string]int // (phase, op and size) → calls
}

func (c *opCounter) StartProfile()            { c.calls, c.phase = map[[2]string]int{}, "" }
func (c *opCounter) ProfilePhase(name string) { c.phase = name }

func (c *opCounter) StopProfile() ([]tensor.OpTime, error) {
	var ts []tensor.OpTime
	for k, n := range c.calls {
		ts = append(ts, tensor.OpTime{Phase: k[0], Op: k[1], Calls: n})
	}
	tensor.SortOpTimes(ts)
	c.calls = nil
	return ts, nil
}

func (c *opCounter) count(op string, rows, cols int) {
	if c.calls != nil {
		c.calls[[2]string{c.phase, fmt.Sprintf("%s %dx%d", op, rows, cols)}]++
	}
}

func (c *opCounter) Add(a, b, out tensor.Storage[float32]) {
	c.count("Add", 1, out.Len())
	c.StepCPU.Add(a, b, out)
}

func (c *opCounter) Axpy(alpha float32, x, y tensor.Storage[float32]) {
	c.count("Axpy", 1, y.Len())
	c.StepCPU.Axpy(alpha, x, y)
}

func (c *opCounter) Copy2D(rows, cols int, src tensor.Storage[float32], srcStride, srcOff int, dst tensor.Storage[float32], dstStride, dstOff int, accumulate bool) {
	c.count("Copy2D", rows, cols)
	c.StepCPU.Copy2D(rows, cols, src, srcStride, srcOff, dst, dstStride, dstOff, accumulate)
}

// countGemm counts a GEMM of an m×k by k×n product.
func (c *opCounter) countGemm(op string, m, n, k int) {
	if c.calls != nil {
		c.calls[[2]string{c.phase, fmt.Sprintf("%s %dx%dx%d", op, m, n, k)}]++
	}
}

func (c *opCounter) Gemm(ta, tb bool, m, n, k int, alpha float32, a tensor.Storage[float32], lda int, b tensor.Storage[float32], ldb int, beta float32, out tensor.Storage[float32], ldc int) {
	c.countGemm("Gemm", m, n, k)
	c.StepCPU.Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, out, ldc)
}

func (c *opCounter) GemmAdd(ta, tb bool, m, n, k int, alpha float32, a tensor.Storage[float32], lda int, b tensor.Storage[float32], ldb int, cs, d tensor.Storage[float32], ldc int) {
	c.countGemm("GemmAdd", m, n, k)
	c.StepCPU.GemmAdd(ta, tb, m, n, k, alpha, a, lda, b, ldb, cs, d, ldc)
}

// TestStepOpCounts runs a training step of a tiny target and drafter (as
// bench step does, gradients released) on a backend that counts adds,
// copies and GEMMs by phase, and checks that the residual stream's adds
// are in the GEMMs' epilogues (no Add of a whole hidden state in either
// forward pass) and that the backward pass copies no whole hidden-state
// gradient (the residual's gradient is handed on, not copied). Each
// drafter layer projects its block rows to Q, K and V in one GEMM over
// Span(Q, K, V) and its context rows to K and V in one over Span(K, V):
// forward, dX and dW one GEMM each (2, 2 and 2 a layer, where the three and
// two projections apart took 5, 5 and 5).
func TestStepOpCounts(t *testing.T) {
	o := tinyOptions()
	o.Seed = testseed.Seed(t)
	dc := drafterConfig(o)
	oc := &opCounter{StepCPU: backendtest.NewStepCPU(1)}
	s, err := newStepper(o, dc, CPUEnv(oc))
	if err != nil {
		t.Fatal(err)
	}
	oc.StartProfile()
	if _, err := s.step(); err != nil {
		t.Fatal(err)
	}
	ts, _ := oc.StopProfile()
	var lines []string
	hidden := fmt.Sprintf("x%d", o.Target.HiddenSize*dc.BlockSize*o.Anchors*o.Batch) // 1×(blocks·B·H)
	for _, op := range ts {
		lines = append(lines, fmt.Sprintf("%-16s %-22s %d", op.Phase, op.Op, op.Calls))
		if strings.HasPrefix(op.Op, "Add ") && op.Phase != "optimizer" {
			t.Errorf("%s: %d calls of %s: a residual add outside a GEMM", op.Phase, op.Calls, op.Op)
		}
		if op.Phase == "backward" && strings.HasPrefix(op.Op, "Copy2D 1") && strings.HasSuffix(op.Op, hidden) {
			t.Errorf("backward: %d calls of %s: a drafter hidden-state gradient copied", op.Calls, op.Op)
		}
	}
	t.Logf("ops by phase (phase, op rows x cols [x depth], calls):\n%s", strings.Join(lines, "\n"))
	calls := map[string]int{}
	for _, op := range ts {
		calls[op.Phase+" "+op.Op] += op.Calls
	}
	H, kv := dc.HiddenSize, dc.NumKVHeads*dc.HeadDim
	qkv, block, ctx := dc.NumHeads*dc.HeadDim+2*kv, o.Batch*o.Anchors*o.BlockSize, o.Batch*o.SeqLen
	for _, w := range []struct {
		phase   string
		m, n, k int
	}{
		{"drafter_forward", block, qkv, H}, {"drafter_forward", ctx, 2 * kv, H}, // the products
		{"backward", block, H, qkv}, {"backward", ctx, H, 2 * kv}, // dX
		{"backward", qkv, H, block}, {"backward", 2 * kv, H, ctx}, // dW
	} {
		key := fmt.Sprintf("%s Gemm %dx%dx%d", w.phase, w.m, w.n, w.k)
		if calls[key] != dc.NumLayers {
			t.Errorf("%s: %d calls, want one a drafter layer (%d)", key, calls[key], dc.NumLayers)
		}
	}
}
