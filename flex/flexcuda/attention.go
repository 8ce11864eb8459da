package flexcuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/flex"
	"dflash/gpu"
	"dflash/internal/switches"
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

// checkMode reports whether the checked mode is on for cfg: Config.Check,
// or DFLASH_FLEX_CHECK on.
func checkMode(cfg Config) (bool, error) {
	on, err := switches.FlexCheck.Value()
	return cfg.Check || on, err
}

// resolveKernel returns k, or for KernelAuto the choice of the switch env
// (DFLASH_FLEX_FWD or DFLASH_FLEX_BWD) unless it is auto, else Hopper unless
// arch names an architecture other than sm_90.
func resolveKernel(k Kernel, env *switches.Enum, arch string) (Kernel, error) {
	if k != KernelAuto {
		return k, nil
	}
	e, err := env.Value()
	if err != nil {
		return 0, fmt.Errorf("flexcuda: %w", err)
	}
	if e != "auto" {
		return ParseKernel(e)
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
	// The choices, each for one purpose: Hopper or Portable per direction
	// (Hopper, wgmma and TMA, is the fast kernel of sm_90; Portable,
	// mma.sync, runs on every GPU from sm_80 and is what Hopper is checked
	// against); Deterministic, a backward without atomics for bit-identical
	// gradients (resumable runs, tests), which only Portable has; Check,
	// the programs' tensor reads checked on the device, for debugging a mask
	// or score program.
	fk, err := resolveKernel(cfg.Fwd, switches.FlexFwd, cfg.Arch)
	if err != nil {
		return nil, err
	}
	bk, err := resolveKernel(cfg.Bwd, switches.FlexBwd, cfg.Arch)
	if err != nil {
		return nil, err
	}
	check, err := checkMode(cfg)
	if err != nil {
		return nil, fmt.Errorf("flexcuda: %w", err)
	}
	if cfg.Bwd == KernelAuto && cfg.Deterministic {
		bk = Portable // the Hopper backward has atomic dQ only
	}
	spec := Spec{HeadDim: cfg.HeadDim, DType: cfg.DType, Group: cfg.Group, BlockQ: cfg.BlockQ, BlockKV: cfg.BlockKV, MaskHash: mask.Hash(),
		Fwd: fk, Bwd: bk, Deterministic: cfg.Deterministic, Check: check}
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
// once. An error says which direction failed.
func (a *Attention) Compile(ctx context.Context, arch string, backward bool) error {
	if !backward {
		return a.fwd.compile(ctx, arch, "forward")
	}
	var bwdErr error
	done := make(chan struct{})
	go func() { // the two modules compile in parallel
		defer close(done)
		bwdErr = a.bwd.compile(ctx, arch, "backward")
	}()
	err := a.fwd.compile(ctx, arch, "forward")
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
