package flexcuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/flex"
	"dflash/gpu"
	"dflash/jit"
)

// Config is the static part of an attention besides its programs.
type Config struct {
	HeadDim int         // 64, 128 or 256
	Group   int         // query heads per kv head (GQA); 0 means 1
	DType   dtype.DType // storage: dtype.BF16 (also when zero) or dtype.F16
	BlockQ  int         // BlockMask q block; 0 means 128
	BlockKV int         // BlockMask kv block; 0 means 128
	// Fwd and Bwd choose the kernels (KernelAuto: see there).
	Fwd, Bwd Kernel
	// Arch is the target GPU's architecture ("sm_90", gpu.Info.Arch) when
	// known: KernelAuto then picks Hopper on sm_90 and Portable elsewhere.
	// Left empty, KernelAuto picks Hopper, and a GPU other than sm_90
	// refuses to load it with an error naming Portable.
	Arch string
	// Deterministic selects a backward without atomics, so that two calls on
	// the same inputs give bit-identical DQ, DK and DV: DQ comes from a
	// separate q-parallel pass over the kv-side block lists; with GQA, DK and
	// DV are stored per query head in fp32 slices that a second pass adds in
	// a fixed order. It needs the portable backward. Score programs whose
	// float tensors have gradients are refused (those gradients are summed
	// atomically).
	Deterministic bool
	// Check turns on the checked mode (so does flex.CheckEnv,
	// DFLASH_FLEX_CHECK=1, as on the CPU): the programs are printed with
	// flex.Checked, so that the first tensor read outside its tensor's shape
	// in a launch is recorded on the device, and Forward and Backward return
	// it as a *flex.IndexError naming the tensor and the index. Without it
	// such reads are clamped into range silently. Checking reads the record
	// back after every call, which waits for the call to finish: checked
	// mode is for debugging, not for training speed. It covers the attention
	// kernels; a Builder's mask reads stay clamped (flex.NewBlockMask checks
	// them on the CPU).
	Check bool
}

// checkMode reports whether the checked mode is on for cfg.
func checkMode(cfg Config) bool {
	v := os.Getenv(flex.CheckEnv)
	return cfg.Check || (v != "" && v != "0")
}

// resolveKernel returns k, or for KernelAuto the environment's choice in
// env, else Hopper unless arch names an architecture other than sm_90.
func resolveKernel(k Kernel, env, arch string) (Kernel, error) {
	if k != KernelAuto {
		return k, nil
	}
	if e := os.Getenv(env); e != "" {
		k, err := ParseKernel(e)
		if err != nil {
			return 0, fmt.Errorf("flexcuda: %s=%q: want hopper or portable", env, e)
		}
		return k, nil
	}
	if arch == "" || arch == "sm_90" || arch == "sm_90a" {
		return Hopper, nil
	}
	return Portable, nil
}

// Kernel parameters before the FlexArgs slots, and the most a launch takes.
const (
	fwdFixedArgs  = 18
	dkdvFixedArgs = 22
)

// dkdvArgs is the number of flex_bwd_dkdv's parameters before the slots:
// dkdvFixedArgs and the tensor maps of the producer (Q, dO) and of the bulk
// dQ adds.
func (s Spec) dkdvArgs() int {
	n := dkdvFixedArgs
	if s.bwdWS() {
		n += 2
	}
	if s.bwdDQBulk() {
		n++
	}
	return n
}

// Attention is flex attention for one mask program, one score program and
// one Config on NVIDIA GPUs: the forward and backward kernels generated
// from them, compiled through the kernel cache on first use per GPU
// architecture and loaded once per device. Everything else (batch, heads,
// lengths, block masks, scalars and tensors) is a run-time argument, so one
// Attention serves every step of a training run without recompiling.
//
// Its methods take a *gpu.Device and must run on that device's worker.
// Calls on one device use one workspace: queue them on one stream (or
// order the streams).
type Attention struct {
	spec   Spec
	mask   *flex.MaskProgram
	score  *flex.ScoreProgram
	layout *argLayout
	fwd    *module
	bwd    *module

	mu   sync.Mutex
	devs map[string]*attnDev
}

// attnDev is an Attention's state on one device.
type attnDev struct {
	fwd, pre, dkdv, conv *fn
	dq, gsum             *fn        // deterministic backward's dQ pass and group sum
	fwdWord, bwdWord     gpu.Buffer // checked mode: each module's flex_check_word
	args                 *cuda.Args
	slots                []uint64
	tmaps                [3]*cuda.TensorMap // Hopper forward: Q, K, V
	btmaps               [3]*cuda.TensorMap // Hopper backward with a producer (Spec.bwdWS): Q, DOut; dQacc (Spec.bwdDQBulk)
	dlt, dqacc           gpu.Buffer
	dkacc, dvacc         gpu.Buffer // fp32 dK, dV of the split backward (GQA)
}

// New generates the kernels of mask and score (nil: the identity) for cfg.
// Nothing is compiled until the first call on a device (or Prepare).
func New(cache *jit.Cache, mask *flex.MaskProgram, score *flex.ScoreProgram, cfg Config) (*Attention, error) {
	if cfg.Group == 0 {
		cfg.Group = 1
	}
	if cfg.BlockQ == 0 {
		cfg.BlockQ = flex.DefaultBlock
	}
	if cfg.BlockKV == 0 {
		cfg.BlockKV = flex.DefaultBlock
	}
	fk, err := resolveKernel(cfg.Fwd, "DFLASH_FLEX_FWD", cfg.Arch)
	if err != nil {
		return nil, err
	}
	bk, err := resolveKernel(cfg.Bwd, "DFLASH_FLEX_BWD", cfg.Arch)
	if err != nil {
		return nil, err
	}
	if cfg.Bwd == KernelAuto && cfg.Deterministic {
		bk = Portable // the Hopper backward has atomic dQ only
	}
	spec := Spec{HeadDim: cfg.HeadDim, DType: cfg.DType, Group: cfg.Group, BlockQ: cfg.BlockQ, BlockKV: cfg.BlockKV, MaskHash: mask.Hash(),
		Fwd: fk, Bwd: bk, Deterministic: cfg.Deterministic, Check: checkMode(cfg)}
	var sp []flex.Param
	if score != nil {
		spec.ScoreHash = score.Hash()
		sp = score.Params()
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	l, err := newLayout(mask.Params(), sp)
	if err != nil {
		return nil, err
	}
	if cfg.Deterministic && len(l.grads) > 0 {
		return nil, fmt.Errorf("flexcuda: deterministic backward: score program %s has float tensors %v whose gradients are summed with atomics; not supported",
			score, l.grads)
	}
	fixed := spec.dkdvArgs()
	if n := fixed + l.slots(true); n > cuda.MaxKernelArgs {
		return nil, fmt.Errorf("flexcuda: the programs need %d argument slots; with the backward's %d fixed parameters that is %d kernel arguments, more than the %d a launch takes (too many tensors or scalars)",
			l.slots(true), fixed, n, cuda.MaxKernelArgs)
	}
	a := &Attention{spec: spec, mask: mask, score: score, layout: l, devs: map[string]*attnDev{}}
	params := map[string]string{"head_dim": strconv.Itoa(spec.HeadDim), "dtype": spec.storage().String(),
		"group": strconv.Itoa(spec.Group), "block_q": strconv.Itoa(spec.BlockQ), "block_kv": strconv.Itoa(spec.BlockKV),
		"mask": short(spec.MaskHash), "score": short(spec.ScoreHash),
		"fwd": fk.String(), "bwd": bk.String(), "deterministic": strconv.FormatBool(cfg.Deterministic),
		"check": strconv.FormatBool(spec.Check)}
	var opts []flex.CUDAOption
	if spec.Check {
		opts = append(opts, flex.Checked())
	}
	fsrc, err := Source(spec, l.program(mask, score, false, opts...), false)
	if err != nil {
		return nil, err
	}
	bsrc, err := Source(spec, l.program(mask, score, true, opts...), true)
	if err != nil {
		return nil, err
	}
	a.fwd = newModule(cache, "flex_fwd", fsrc, params)
	a.bwd = newModule(cache, "flex_bwd", bsrc, params)
	a.fwd.wgmma, a.bwd.wgmma = spec.Fwd == Hopper, spec.Bwd == Hopper
	return a, nil
}

// Spec returns the static specialisation of a.
func (a *Attention) Spec() Spec { return a.spec }

// Sources returns the generated forward and backward sources.
func (a *Attention) Sources() (fwd, bwd string) { return a.fwd.code, a.bwd.code }

// Compile compiles (or loads from the cache's disk tier) the forward
// kernels, and the backward ones when backward is set, for arch ("sm_90"),
// without a device; several goroutines may compile different Attentions at
// once.
func (a *Attention) Compile(ctx context.Context, arch string, backward bool) error {
	if !backward {
		_, err := a.fwd.image(ctx, arch)
		return err
	}
	var bwdErr error
	done := make(chan struct{})
	go func() { // the two modules compile in parallel
		defer close(done)
		_, bwdErr = a.bwd.image(ctx, arch)
	}()
	_, err := a.fwd.image(ctx, arch)
	<-done
	return errors.Join(err, bwdErr)
}

// Prepare compiles (or loads from the cache) and loads the forward kernel,
// and the backward kernels when backward is set, on d; it reports each
// kernel's resources. Calls compile on first use anyway: Prepare is for
// warming up and for measuring.
func (a *Attention) Prepare(ctx context.Context, d *gpu.Device, backward bool) ([]KernelInfo, error) {
	st, err := a.device(ctx, d, backward)
	if err != nil {
		return nil, err
	}
	out := []KernelInfo{st.fwd.info}
	if backward {
		out = append(out, st.pre.info, st.dkdv.info)
		if st.dq != nil {
			out = append(out, st.dq.info, st.gsum.info)
		}
		out = append(out, st.conv.info)
	}
	return out, nil
}

func (a *Attention) device(ctx context.Context, d *gpu.Device, backward bool) (*attnDev, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.devs[d.LoaderID()]
	if st == nil {
		st = &attnDev{args: cuda.NewArgs(), slots: make([]uint64, a.layout.slots(true))}
		a.devs[d.LoaderID()] = st
	}
	var err error
	if st.fwd == nil {
		if st.fwd, err = a.fwd.load(ctx, d, "flex_fwd", a.spec.fwdThreads()); err != nil {
			return nil, err
		}
		if a.spec.Check {
			if st.fwdWord, err = a.fwd.global(ctx, d, checkWord); err != nil {
				return nil, err
			}
		}
	}
	if backward && st.conv == nil {
		if st.pre, err = a.bwd.load(ctx, d, "flex_bwd_pre", 256); err != nil {
			return nil, err
		}
		if st.dkdv, err = a.bwd.load(ctx, d, "flex_bwd_dkdv", a.spec.bwdThreads()); err != nil {
			return nil, err
		}
		if a.spec.Deterministic {
			if st.dq, err = a.bwd.load(ctx, d, "flex_bwd_dq", a.spec.dqThreads()); err != nil {
				return nil, err
			}
			if st.gsum, err = a.bwd.load(ctx, d, "flex_bwd_group_sum", 256); err != nil {
				return nil, err
			}
		}
		if st.conv, err = a.bwd.load(ctx, d, "flex_bwd_dq_convert", 256); err != nil {
			return nil, err
		}
		if a.spec.Check {
			if st.bwdWord, err = a.bwd.global(ctx, d, checkWord); err != nil {
				return nil, err
			}
		}
	}
	return st, nil
}

// Release frees a's workspace on d.
func (a *Attention) Release(d *gpu.Device) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st := a.devs[d.LoaderID()]; st != nil {
		for _, b := range []*gpu.Buffer{&st.dlt, &st.dqacc, &st.dkacc, &st.dvacc} {
			if b.Size > 0 {
				d.Free(*b)
				*b = gpu.Buffer{}
			}
		}
	}
}

// Call is one attention call's arguments. Q is [Batch, HeadsQ, LenQ,
// HeadDim], K and V [Batch, HeadsKV, LenKV, HeadDim], Out like Q or, with
// Dims.OutHeadsInner, [Batch, LenQ, HeadsQ, HeadDim], all in the storage
// dtype (bf16 or fp16); LSE is [Batch, HeadsQ, LenQ] float32. The backward
// reads DOut (like Out) and writes DQ (like Q), DK, DV, and for each float
// tensor the score program reads, its float32 gradient into TensorGrads.
type Call struct {
	Dims   flex.Dims
	Mask   *BlockMask
	Args   *Args
	Scale  float64     // 0 means 1/sqrt(HeadDim)
	Stream *gpu.Stream // nil: the device's default stream

	Q, K, V, Out, LSE gpu.Buffer
	DOut, DQ, DK, DV  gpu.Buffer
	TensorGrads       map[string]gpu.Buffer
}

// check panics when c does not fit a (programmer errors: shapes, buffer
// sizes, a block mask built for other dimensions).
func (a *Attention) check(c *Call, backward bool) {
	d, s := c.Dims, a.spec
	if err := d.Check(); err != nil {
		panic(err.Error())
	}
	if d.HeadDim != s.HeadDim || d.Group() != s.Group {
		panic(fmt.Sprintf("flexcuda: dims %+v (head dim %d, group %d) called on kernels for head dim %d, group %d", d, d.HeadDim, d.Group(), s.HeadDim, s.Group))
	}
	m := c.Mask
	if m == nil {
		panic("flexcuda: Call.Mask is nil")
	}
	if m.BlockQ != s.BlockQ || m.BlockKV != s.BlockKV || m.Dims.LenQ != d.LenQ || m.Dims.LenKV != d.LenKV ||
		(m.MaskBatch != 1 && m.MaskBatch != d.Batch) || (m.MaskHeads != 1 && m.MaskHeads != d.HeadsQ) {
		panic(fmt.Sprintf("flexcuda: block mask %dx%d blocks for %+v (batch %d, heads %d) does not fit dims %+v with blocks %dx%d",
			m.BlockQ, m.BlockKV, m.Dims, m.MaskBatch, m.MaskHeads, d, s.BlockQ, s.BlockKV))
	}
	qn := int64(d.Batch*d.HeadsQ*d.LenQ) * int64(d.HeadDim) * 2
	kn := int64(d.Batch*d.HeadsKV*d.LenKV) * int64(d.HeadDim) * 2
	need := map[string][2]int64{"Q": {c.Q.Size, qn}, "K": {c.K.Size, kn}, "V": {c.V.Size, kn}, "Out": {c.Out.Size, qn},
		"LSE": {c.LSE.Size, int64(d.Batch*d.HeadsQ*d.LenQ) * 4}}
	if backward {
		need["DOut"], need["DQ"] = [2]int64{c.DOut.Size, qn}, [2]int64{c.DQ.Size, qn}
		need["DK"], need["DV"] = [2]int64{c.DK.Size, kn}, [2]int64{c.DV.Size, kn}
	}
	for name, v := range need {
		if v[0] < v[1] {
			panic(fmt.Sprintf("flexcuda: Call.%s has %d bytes, dims %+v need %d", name, v[0], d, v[1]))
		}
	}
}

func (a *Attention) scale(c *Call) float32 {
	if c.Scale != 0 {
		return float32(c.Scale)
	}
	return float32(1 / math.Sqrt(float64(a.spec.HeadDim)))
}

// Forward computes Out and LSE:
//
//	Out[b,h,i] = Σ_j softmax_j(score(scale·q_i·k_j) over allowed j) v_j
//	LSE[b,h,i] = log Σ_{allowed j} exp(score(scale·q_i·k_j))
//
// visiting only the non-empty blocks of c.Mask (the mask is evaluated per
// element in partial blocks only). Rows with no allowed key get Out 0 and
// LSE -Inf. It queues the kernel on c.Stream and returns.
func (a *Attention) Forward(d *gpu.Device, c *Call) error {
	a.check(c, false)
	st, err := a.device(context.Background(), d, false)
	if err != nil {
		return err
	}
	return a.forward(d, st, c)
}

func (a *Attention) forward(d *gpu.Device, st *attnDev, c *Call) error {
	m, dm := c.Mask, c.Dims
	n := a.layout.slots(false)
	if err := a.layout.pack(st.slots[:n], c.Args, false, nil); err != nil {
		return err
	}
	args := a.shape(st.args.Reset().Ptr(c.Q.Ptr).Ptr(c.K.Ptr).Ptr(c.V.Ptr).Ptr(c.Out.Ptr).Ptr(c.LSE.Ptr).
		Ptr(m.KVNum.Ptr).Ptr(m.KVIdx.Ptr).Ptr(m.FullKVNum.Ptr).Ptr(m.FullKVIdx.Ptr), c)
	if a.spec.Fwd == Hopper {
		if err := a.tensorMaps(st, c); err != nil {
			return err
		}
		args.TensorMap(st.tmaps[0]).TensorMap(st.tmaps[1]).TensorMap(st.tmaps[2])
	}
	slotArgs(args, st.slots[:n])
	// heaviest q blocks (the last, under causal-like masks) of every head first
	grid := cuda.Dim(uint32(dm.HeadsQ*dm.Batch), uint32(m.NumQBlocks), 1)
	if err := st.fwd.launchSmem(d, c.Stream, grid, FwdResources(a.spec, m.NumKVBlocks).SharedMem, args); err != nil {
		return err
	}
	return a.checked(d, st.fwdWord, c.Stream)
}

// checkWord is the device variable of flex's checked mode (flex.Checked).
const checkWord = "flex_check_word"

// checked, in checked mode, waits for s, reads the check word w of the
// module just launched and, when a read was out of range, zeroes it and
// returns the read as flex.CheckWordError decodes it.
func (a *Attention) checked(d *gpu.Device, w gpu.Buffer, s *gpu.Stream) error {
	if !a.spec.Check {
		return nil
	}
	if s == nil {
		s = d.Stream()
	}
	if err := s.Synchronize(); err != nil {
		return fmt.Errorf("flexcuda: checked mode: %w", err)
	}
	v := make([]uint64, 1)
	if err := gpu.Download(d, v, w); err != nil {
		return fmt.Errorf("flexcuda: checked mode: read %s: %w", checkWord, err)
	}
	if v[0] == 0 {
		return nil
	}
	if err := d.Memset(w, 0, s); err != nil {
		return fmt.Errorf("flexcuda: checked mode: zero %s: %w", checkWord, err)
	}
	return flex.CheckWordError(v[0], a.mask, a.score)
}

// tensorMaps describes c's Q, K and V to the Hopper forward's copy engine: each
// a [batch*heads][len][head dim] tensor copied in boxes of 64 columns (128
// bytes, swizzled as warpgroup MMA reads them) by a tile of rows; rows past
// the length arrive as zeros.
func (a *Attention) tensorMaps(st *attnDev, c *Call) error {
	dm, bn := c.Dims, a.spec.fwdBN()
	return a.encodeMaps("Hopper forward", st.tmaps[:], c, []mapSpec{{"Q", c.Q.Ptr, dm.HeadsQ, dm.LenQ, a.spec.BlockQ},
		{"K", c.K.Ptr, dm.HeadsKV, dm.LenKV, bn}, {"V", c.V.Ptr, dm.HeadsKV, dm.LenKV, bn}})
}

// mapSpec is one tensor of encodeMaps: name (for errors), pointer, heads,
// length and the rows of a box.
type mapSpec struct {
	name      string
	p         cuda.DevicePtr
	heads     int
	len, rows int
}

// encodeMaps encodes into maps (allocating the missing) each of ts as a
// [batch*heads][len][head dim] tensor copied in boxes of 64 columns (128
// bytes, swizzled as warpgroup MMA reads them) by ts[i].rows rows; rows past
// the length arrive as zeros. kernel names the user in errors.
func (a *Attention) encodeMaps(kernel string, maps []*cuda.TensorMap, c *Call, ts []mapSpec) error {
	dm, D := c.Dims, uint64(a.spec.HeadDim)
	dt := cuda.TensorMapType(a.spec.storage())
	for i, t := range ts {
		if maps[i] == nil {
			maps[i] = cuda.NewTensorMap()
		}
		err := cuda.EncodeTiled(maps[i], dt, t.p, []uint64{D, uint64(t.len), uint64(dm.Batch * t.heads)},
			[]uint64{D * 2, uint64(t.len) * D * 2}, []uint32{64, uint32(t.rows), 1}, cuda.Swizzle128B)
		if err != nil {
			return fmt.Errorf("flexcuda: %s: Call.%s: %w", kernel, t.name, err)
		}
	}
	return nil
}

// doutMap describes c's DOut to the copy engine for the Hopper backward's
// producer (Spec.bwdWS) as a 4-D tensor: [batch][heads][lenq][head dim]
// (coordinates column, row, head, batch), or with Dims.OutHeadsInner
// [batch][lenq][heads][head dim] (column, head, row, batch), in boxes of 64
// columns (128 bytes, swizzled as warpgroup MMA reads them) by a q tile of
// rows of one head: the shared-memory tile is the same in both layouts, and
// rows past lenq arrive as zeros.
func (a *Attention) doutMap(st *attnDev, c *Call) error {
	dm, D := c.Dims, uint64(a.spec.HeadDim)
	if st.btmaps[1] == nil {
		st.btmaps[1] = cuda.NewTensorMap()
	}
	H, L, rows := uint64(dm.HeadsQ), uint64(dm.LenQ), uint32(a.spec.bwdBM())
	dims := []uint64{D, L, H, uint64(dm.Batch)}
	strides := []uint64{D * 2, L * D * 2, H * L * D * 2} // bytes, of dims 1..3
	box := []uint32{64, rows, 1, 1}
	if dm.OutHeadsInner {
		dims = []uint64{D, H, L, uint64(dm.Batch)}
		strides = []uint64{D * 2, H * D * 2, L * H * D * 2}
		box = []uint32{64, 1, rows, 1}
	}
	err := cuda.EncodeTiled(st.btmaps[1], cuda.TensorMapType(a.spec.storage()), c.DOut.Ptr, dims, strides, box, cuda.Swizzle128B)
	if err != nil {
		return fmt.Errorf("flexcuda: Hopper backward: Call.DOut: %w", err)
	}
	return nil
}

// dqMap describes the workspace dQacc ([batch*heads_q][lenq][head dim]
// fp32) to the copy engine for the Hopper backward's dQ adds
// (Spec.bwdDQBulk): boxes of 32 columns (128 bytes, swizzled as
// flex_wg_off32 stores them) by a q tile of rows; rows past lenq are not
// written.
func (a *Attention) dqMap(st *attnDev, c *Call) error {
	dm, D := c.Dims, uint64(a.spec.HeadDim)
	if st.btmaps[2] == nil {
		st.btmaps[2] = cuda.NewTensorMap()
	}
	err := cuda.EncodeTiled(st.btmaps[2], cuda.TensorMapFloat32, st.dqacc.Ptr, []uint64{D, uint64(dm.LenQ), uint64(dm.Batch * dm.HeadsQ)},
		[]uint64{D * 4, uint64(dm.LenQ) * D * 4}, []uint32{32, uint32(a.spec.bwdBM()), 1}, cuda.Swizzle128B)
	if err != nil {
		return fmt.Errorf("flexcuda: Hopper backward: dQ accumulator: %w", err)
	}
	return nil
}

// Backward computes DQ, DK and DV (and the score tensors' gradients) from
// DOut and the Out and LSE of Forward, with P = exp(score(s) - LSE):
//
//	DV_j = Σ_i P_ij DOut_i
//	dS_ij = P_ij (DOut_i·v_j - DOut_i·Out_i) score'(s_ij)
//	DQ_i = scale Σ_j dS_ij k_j,  DK_j = scale Σ_i dS_ij q_i
//
// summing DK and DV over each kv head's query heads without copying K or V.
// DQ is accumulated in float32 with atomics (not bitwise deterministic);
// so are DK and DV with GQA (one CTA per query head).
// With Config.Deterministic no atomics are used for DQ, DK and DV: two
// calls on equal inputs give equal bits.
func (a *Attention) Backward(d *gpu.Device, c *Call) error {
	a.check(c, true)
	st, err := a.device(context.Background(), d, true)
	if err != nil {
		return err
	}
	dm, m, D := c.Dims, c.Mask, a.spec.HeadDim
	rows := dm.Batch * dm.HeadsQ * dm.LenQ
	if err := grow(d, &st.dlt, int64(rows)*4); err != nil {
		return err
	}
	det := a.spec.Deterministic
	if !det {
		if err := grow(d, &st.dqacc, int64(rows)*int64(D)*4); err != nil {
			return err
		}
	}
	split := a.spec.bwdSplit()
	kvElems := dm.Batch * dm.HeadsKV * dm.LenKV * D
	dkPtr, dvPtr := c.DK.Ptr, c.DV.Ptr
	if split {
		for _, b := range []*gpu.Buffer{&st.dkacc, &st.dvacc} {
			if det { // one fp32 slice per query head of the group, each element written once
				if err := grow(d, b, int64(a.spec.Group)*int64(kvElems)*4); err != nil {
					return err
				}
				continue
			}
			if err := grow(d, b, int64(kvElems)*4); err != nil {
				return err
			}
			if err := d.Memset(*b, 0, c.Stream); err != nil {
				return fmt.Errorf("flexcuda: zero dK/dV workspace: %w", err)
			}
		}
		dkPtr, dvPtr = st.dkacc.Ptr, st.dvacc.Ptr
	}
	n := a.layout.slots(true)
	if err := a.layout.pack(st.slots[:n], c.Args, true, c.TensorGrads); err != nil {
		return err
	}
	for _, name := range a.layout.grads {
		if err := d.Memset(c.TensorGrads[name], 0, c.Stream); err != nil {
			return fmt.Errorf("flexcuda: zero gradient of %q: %w", name, err)
		}
	}
	rpb := a.spec.preRows()
	var dqacc cuda.DevicePtr // the pre pass zeroes the atomic path's accumulator
	if !det {
		dqacc = st.dqacc.Ptr
	}
	args := st.args.Reset().Ptr(c.Out.Ptr).Ptr(c.DOut.Ptr).Ptr(st.dlt.Ptr).Ptr(dqacc).I64(int64(rows)).
		I32(int32(dm.HeadsQ)).I32(int32(dm.LenQ)).I32(outHeadsInner(dm))
	if err := st.pre.launch(d, c.Stream, cuda.Dim(uint32(ceilDiv(rows, rpb)), 1, 1), 0, args); err != nil {
		return err
	}
	args = st.args.Reset().Ptr(c.Q.Ptr).Ptr(c.K.Ptr).Ptr(c.V.Ptr).Ptr(c.DOut.Ptr).Ptr(c.LSE.Ptr).Ptr(st.dlt.Ptr).
		Ptr(dkPtr).Ptr(dvPtr).Ptr(dqacc).
		Ptr(m.QNum.Ptr).Ptr(m.QIdx.Ptr).Ptr(m.FullQNum.Ptr).Ptr(m.FullQIdx.Ptr)
	a.shape(args, c)
	if a.spec.bwdWS() { // the producer warpgroup's copies of Q and dO tiles
		bm := a.spec.bwdBM()
		if err := a.encodeMaps("Hopper backward", st.btmaps[:1], c, []mapSpec{{"Q", c.Q.Ptr, dm.HeadsQ, dm.LenQ, bm}}); err != nil {
			return err
		}
		if err := a.doutMap(st, c); err != nil {
			return err
		}
		args.TensorMap(st.btmaps[0]).TensorMap(st.btmaps[1])
	}
	if a.spec.bwdDQBulk() { // the consumers' dQ adds by the copy engine
		if err := a.dqMap(st, c); err != nil {
			return err
		}
		args.TensorMap(st.btmaps[2])
	}
	slotArgs(args, st.slots[:n])
	// kv block 0 (the heaviest under causal-like masks) of every head first
	grid := cuda.Dim(uint32(dm.HeadsKV), uint32(m.NumKVBlocks), uint32(dm.Batch))
	if split {
		grid.X = uint32(dm.HeadsQ)
	}
	if a.spec.bwdHalf() {
		grid.X *= 2 // two CTAs per kv block, one per half of the head dim
	}
	if err := st.dkdv.launchSmem(d, c.Stream, grid, BwdResources(a.spec, m.NumQBlocks).SharedMem, args); err != nil {
		return err
	}
	if split {
		f := st.conv
		if det {
			f = st.gsum
		}
		for _, p := range [][2]gpu.Buffer{{st.dkacc, c.DK}, {st.dvacc, c.DV}} {
			args = st.args.Reset().Ptr(p[0].Ptr).Ptr(p[1].Ptr).I64(int64(kvElems))
			if err := f.launch(d, c.Stream, cuda.Dim(uint32(ceilDiv(kvElems, 512)), 1, 1), 0, args); err != nil {
				return err
			}
		}
	}
	if det {
		if err := a.backwardDQ(d, st, c); err != nil {
			return err
		}
		return a.checked(d, st.bwdWord, c.Stream)
	}
	total := rows * D
	args = st.args.Reset().Ptr(st.dqacc.Ptr).Ptr(c.DQ.Ptr).I64(int64(total))
	if err := st.conv.launch(d, c.Stream, cuda.Dim(uint32(ceilDiv(total, 512)), 1, 1), 0, args); err != nil {
		return err
	}
	return a.checked(d, st.bwdWord, c.Stream)
}

// backwardDQ queues the deterministic backward's dQ pass: one CTA per (q
// block, query head, batch) over the kv-side lists, heaviest q blocks first.
func (a *Attention) backwardDQ(d *gpu.Device, st *attnDev, c *Call) error {
	m, dm := c.Mask, c.Dims
	n := a.layout.slots(true)
	args := st.args.Reset().Ptr(c.Q.Ptr).Ptr(c.K.Ptr).Ptr(c.V.Ptr).Ptr(c.DOut.Ptr).Ptr(c.LSE.Ptr).Ptr(st.dlt.Ptr).
		Ptr(c.DQ.Ptr).Ptr(m.KVNum.Ptr).Ptr(m.KVIdx.Ptr).Ptr(m.FullKVNum.Ptr).Ptr(m.FullKVIdx.Ptr)
	slotArgs(a.shape(args, c), st.slots[:n])
	grid := cuda.Dim(uint32(dm.HeadsQ*dm.Batch), uint32(m.NumQBlocks), 1)
	return st.dq.launchSmem(d, c.Stream, grid, DQResources(a.spec, m.NumKVBlocks).SharedMem, args)
}

// shape appends the shape arguments that the forward, dK/dV and dQ
// kernels take after their pointers: heads_q, lenq, lenkv, bm_batch,
// bm_heads, nqb, nkvb, scale, o_hi.
func (a *Attention) shape(args *cuda.Args, c *Call) *cuda.Args {
	m, dm := c.Mask, c.Dims
	return args.I32(int32(dm.HeadsQ)).I32(int32(dm.LenQ)).I32(int32(dm.LenKV)).I32(int32(m.MaskBatch)).I32(int32(m.MaskHeads)).
		I32(int32(m.NumQBlocks)).I32(int32(m.NumKVBlocks)).F32(a.scale(c)).I32(outHeadsInner(dm))
}

// outHeadsInner is the kernels' o_hi: 1 when Out and DOut are laid out
// with the heads inner (flex.Dims.OutHeadsInner), else 0.
func outHeadsInner(d flex.Dims) int32 {
	if d.OutHeadsInner {
		return 1
	}
	return 0
}

// slotArgs appends the FlexArgs slots.
func slotArgs(args *cuda.Args, slots []uint64) {
	for _, s := range slots {
		args.I64(int64(s))
	}
}

// grow makes b at least n bytes, replacing it when smaller.
func grow(d *gpu.Device, b *gpu.Buffer, n int64) error {
	if b.Size >= n {
		return nil
	}
	if b.Size > 0 {
		d.Free(*b)
		*b = gpu.Buffer{}
	}
	nb, err := d.Alloc(n)
	if err != nil {
		return fmt.Errorf("flexcuda: workspace of %d bytes: %w", n, err)
	}
	*b = nb
	return nil
}
