package flexcuda

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"dflash/flex"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/switches"
)

// shiftedBias is score + bias[kv + shift]: with bias of LenKV entries, the
// keys from LenKV - shift on read past its end.
func shiftedBias(shift int) *flex.ScoreProgram {
	b := flex.FloatTensorParam("bias", 1)
	return flex.NewScore("shifted_bias", flex.Score().Add(b.At(flex.KV().Add(flex.Const(shift)))))
}

// TestCheckedSource checks on the CPU that Config.Check and
// DFLASH_FLEX_CHECK=1 print the checked programs: the sources (hence the
// kernel cache keys) and Spec keys differ from the unchecked ones, declare
// flex_check_word and test the tensor's index, and still preprocess with
// every template constant defined.
func TestCheckedSource(t *testing.T) {
	t.Setenv(switches.FlexCheck.Name, "")
	for _, k := range []Kernel{Hopper, Portable} {
		cfg := Config{HeadDim: 64, Group: 2, Fwd: k, Bwd: k}
		plain, err := New(nil, flex.Causal(), shiftedBias(3), cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Check = true
		checked, err := New(nil, flex.Causal(), shiftedBias(3), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !checked.Spec().Check || plain.Spec().Check || checked.Spec().Key() == plain.Spec().Key() {
			t.Errorf("%v: Spec.Check %v / %v, keys %s / %s", k, checked.Spec().Check, plain.Spec().Check, checked.Spec().Key(), plain.Spec().Key())
		}
		pf, pb := plain.Sources()
		cf, cb := checked.Sources()
		for _, s := range []struct {
			dir          string
			plain, check string
		}{{"fwd", pf, cf}, {"bwd", pb, cb}} {
			if strings.Contains(s.plain, checkWord) || strings.Contains(s.plain, "flex_checked(") {
				t.Errorf("%v %s: the unchecked source mentions the check", k, s.dir)
			}
			if !strings.Contains(s.check, "__device__ unsigned long long "+checkWord+";") || !strings.Contains(s.check, "flex_checked(") {
				t.Errorf("%v %s: the checked source lacks %s or the index test", k, s.dir, checkWord)
			}
			if _, err := gxx(t, s.check); err != nil {
				t.Errorf("%v %s: preprocessing the checked source: %v", k, s.dir, err)
			}
		}
	}
	for env, want := range map[string]bool{"1": true, "0": false, "": false} {
		t.Setenv(switches.FlexCheck.Name, env)
		a, err := New(nil, flex.Causal(), shiftedBias(1), Config{HeadDim: 64})
		if err != nil {
			t.Fatal(err)
		}
		if a.Spec().Check != want {
			t.Errorf("%s=%q: Spec.Check %v, want %v", switches.FlexCheck.Name, env, a.Spec().Check, want)
		}
	}
	t.Setenv(switches.FlexCheck.Name, "sometimes")
	if _, err := New(nil, flex.Causal(), shiftedBias(1), Config{HeadDim: 64}); err == nil || !strings.Contains(err.Error(), `DFLASH_FLEX_CHECK="sometimes"`) {
		t.Errorf("DFLASH_FLEX_CHECK=sometimes: %v, want an error naming it", err)
	}
}

// TestGPUCheckedMode runs the checked mode on the GPU for both kernels of
// each direction: a score program reading its tensor past the end makes
// Forward and Backward return a *flex.IndexError naming the tensor and an
// index that is really out of range; the same kernels with a tensor long
// enough return no error (the word was zeroed), and unchecked kernels clamp
// silently.
func TestGPUCheckedMode(t *testing.T) {
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	r := newRand(t)
	const shift = 5
	for _, k := range []Kernel{Hopper, Portable} {
		for _, check := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/check=%v", k, check), func(t *testing.T) {
				cfg := Config{HeadDim: 64, Group: 2, Fwd: k, Bwd: k, Check: check}
				a, err := New(cache, flex.Causal(), shiftedBias(shift), cfg)
				if err != nil {
					t.Fatal(err)
				}
				bld, err := NewBuilder(cache, flex.Causal(), 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				dims := square(1, 4, 2, 150, 300, 64)(r)
				err = w.Run(func(d *gpu.Device) error {
					for _, n := range []int{dims.LenKV, dims.LenKV + shift} {
						fwd, bwd := checkedCall(t, d, a, bld, dims, n, r)
						if !check || n > dims.LenKV {
							if fwd != nil || bwd != nil {
								t.Errorf("bias of %d entries: forward %v, backward %v; want no error", n, fwd, bwd)
							}
							continue
						}
						for dir, err := range map[string]error{"forward": fwd, "backward": bwd} {
							var ie *flex.IndexError
							if !errors.As(err, &ie) {
								t.Errorf("%s: got %v, want a *flex.IndexError", dir, err)
								continue
							}
							if i := ie.Index[0]; ie.Tensor != "bias" || ie.Dim != 0 || i < int64(n) || i >= int64(n+shift) {
								t.Errorf("%s: %v: want tensor bias, dimension 0, an index in [%d, %d)", dir, err, n, n+shift)
							}
							t.Logf("%s: %v", dir, err)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// checkedCall runs a's forward and backward on random inputs of dims with
// a bias of n entries and returns their errors.
func checkedCall(t *testing.T, d *gpu.Device, a *Attention, bld *Builder, dims flex.Dims, n int, r *rand.Rand) (fwd, bwd error) {
	t.Helper()
	if _, err := a.Prepare(context.Background(), d, true); err != nil {
		t.Fatal(err)
	}
	var bufs []gpu.Buffer
	keep := func(b gpu.Buffer) gpu.Buffer { bufs = append(bufs, b); return b }
	defer func() {
		for _, b := range bufs {
			d.Free(b)
		}
	}()
	c, _, _, _, _ := testCall(t, d, a.spec.storage(), dims, r, keep)
	c.TensorGrads["bias"] = keep(devAlloc(t, d, int64(4*n)))
	args, err := UploadArgs(d, flex.NewArgs().SetFloatTensor("bias", gridValues(r, n), n))
	if err != nil {
		t.Fatal(err)
	}
	defer args.Free(d)
	c.Args = args
	if c.Mask, err = bld.Build(d, nil, dims, NewArgs(), nil); err != nil {
		t.Fatal(err)
	}
	defer c.Mask.Free(d)
	fwd = a.Forward(d, c)
	bwd = a.Backward(d, c)
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return fwd, bwd
}

// TestGPUCheckedMatchesReference runs checked kernels whose tensor reads
// are all in range through the GPU conformance cases: no error, and the
// same results as the CPU float64 reference.
func TestGPUCheckedMatchesReference(t *testing.T) {
	var cs []attnCase
	for _, k := range []Kernel{Hopper, Portable} {
		cs = append(cs, attnCase{fmt.Sprintf("checked/tensors/g2/d128/%v", k), flex.Causal(), tensorScore(),
			Config{HeadDim: 128, Group: 2, Fwd: k, Bwd: k, Check: true}, square(1, 4, 2, 150, 300, 128), tensorScoreArgs})
	}
	runGPUCases(t, cs, nil)
}
