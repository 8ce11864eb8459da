package tensorcuda

import (
	"strings"
	"testing"
	"time"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/tensor"
)

// TestGPUProfile times a known sequence of ops (after one unprofiled run of
// it): every op appears once per
// call under its phase and label, a GEMM carries 2mnk FLOPs per call, the
// op times are positive and together no longer than the wall time of the
// whole sequence on the device (events around all of it), and the larger
// GEMM takes longer than the smaller one. The stream's time between ops is
// reported under each phase: at least the host's 20 ms sleep on an idle
// GPU before the last op.
func TestGPUProfile(t *testing.T) {
	gputest.OnBackend(t, NewBackend, func(d *gpu.Device, b *Backend) error {
		const m, n, k = 2048, 2048, 2048
		a, w, c := b.Alloc(m*k), b.Alloc(n*k), b.Alloc(m*n)
		small := b.Alloc(256 * 256)
		rstd := b.AllocStat(m)
		norm := b.Alloc(k)
		b.Fill(norm, 1)
		start, err := d.NewEvent()
		if err != nil {
			return err
		}
		end, err := d.NewEvent()
		if err != nil {
			return err
		}
		// Once unprofiled first: a first call plans its GEMM and loads its
		// kernel, host work the GPU would wait for inside the op's events.
		b.Gemm(false, true, m, n, k, 1, a, k, w, k, 0, c, n)
		b.Gemm(false, true, 256, 256, 256, 1, a, k, w, k, 0, small, 256)
		b.RMSNorm(a, norm, k, 1e-6, c.Slice(0, m*k), rstd)
		b.StartProfile()
		if err := start.Record(nil); err != nil {
			return err
		}
		b.ProfilePhase("one")
		for range 3 {
			b.Gemm(false, true, m, n, k, 1, a, k, w, k, 0, c, n)
		}
		b.ProfilePhase("two")
		b.Gemm(false, true, 256, 256, 256, 1, a, k, w, k, 0, small, 256)
		if err := d.Synchronize(); err != nil {
			return err
		}
		const sleep = 20 * time.Millisecond
		time.Sleep(sleep)
		b.RMSNorm(a, norm, k, 1e-6, c.Slice(0, m*k), rstd)
		if err := end.Record(nil); err != nil {
			return err
		}
		ops, err := b.StopProfile()
		if err != nil {
			return err
		}
		if err := end.Synchronize(); err != nil {
			return err
		}
		wall, err := end.Since(start)
		if err != nil {
			return err
		}
		byKey := map[string]tensor.OpTime{}
		var sum float64
		for _, o := range ops {
			byKey[o.Phase+"|"+o.Op] = o
			sum += o.MS
			if o.Op == tensor.BetweenOps {
				continue
			}
			if o.MS <= 0 {
				t.Errorf("%s %s: %g ms", o.Phase, o.Op, o.MS)
			}
		}
		big, ok1 := byKey["one|Gemm NT bf16 2048x2048x2048"]
		little, ok2 := byKey["two|Gemm NT bf16 256x256x256"]
		nrm, ok3 := byKey["two|RMSNorm 2048x2048"]
		gap1, ok4 := byKey["one|"+tensor.BetweenOps]
		gap2, ok5 := byKey["two|"+tensor.BetweenOps]
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || len(ops) != 5 {
			t.Fatalf("profile %+v: want the three ops and the time between them by phase and label", ops)
		}
		// In one: from its start to the first GEMM and between the three.
		// In two: from one's last op to two's start, to its small GEMM and from
		// that to RMSNorm.
		if gap1.Calls != 3 || gap2.Calls != 3 {
			t.Errorf("between ops: %d and %d times, want 3 and 3", gap1.Calls, gap2.Calls)
		}
		if gap1.MS < 0 || gap2.MS < 0.9*float64(sleep.Milliseconds()) {
			t.Errorf("between ops: %.4f ms in one, %.4f ms in two (a %v sleep on an idle GPU)", gap1.MS, gap2.MS, sleep)
		}
		if big.Calls != 3 || little.Calls != 1 || nrm.Calls != 1 {
			t.Errorf("calls %d, %d, %d: want 3, 1, 1", big.Calls, little.Calls, nrm.Calls)
		}
		if want := 3 * 2.0 * m * n * k; big.FLOPs != want {
			t.Errorf("GEMM FLOPs %g, want %g", big.FLOPs, want)
		}
		if nrm.FLOPs != 0 {
			t.Errorf("RMSNorm FLOPs %g, want 0", nrm.FLOPs)
		}
		if big.MS/3 <= little.MS {
			t.Errorf("a 2048³ GEMM took %.4f ms, a 256³ one %.4f ms", big.MS/3, little.MS)
		}
		if ms := wall.Seconds() * 1e3; sum > ms*1.001 {
			t.Errorf("ops sum to %.4f ms, more than the %.4f ms around all of them", sum, ms)
		}
		t.Logf("profile: %s", strings.Join(func() []string {
			var s []string
			for _, o := range ops {
				s = append(s, o.Phase+" "+o.Op)
			}
			return s
		}(), "; "))
		t.Logf("2048³ GEMM %.1f TFLOP/s", big.FLOPs/big.MS/1e9)
		return nil
	})
}
