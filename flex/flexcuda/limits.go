package flexcuda

import "fmt"

// The tile sizes and thread counts of the kernels of a Spec, chosen here
// and nowhere else: Spec.defines emits them into the generated sources (the
// templates #error without them) and the Resources functions below size
// shared memory and launches from them.

// fwdMT is the number of 16-row tiles each warp of the portable forward
// owns: two (every K and V fragment feeds both) where the registers allow.
func (s Spec) fwdMT() int {
	if s.HeadDim <= 128 && s.BlockQ == 128 {
		return 2
	}
	return 1
}

// fwdBN is the forward's kv rows per tile. Portable: 128 at head dim 128
// with one row tile per warp, 32 at head dim 256, else 64. Hopper (the N of
// the S product): 64 at head dim 256, where O takes 128 registers per
// thread, else 128.
func (s Spec) fwdBN() int {
	if s.Fwd == Hopper {
		if s.HeadDim == 256 {
			return 64
		}
		return 128
	}
	switch {
	case s.HeadDim >= 256:
		return 32
	case s.HeadDim == 128 && s.fwdMT() == 1:
		return 128
	}
	return 64
}

// fwdStages is the Hopper forward's K and V stages: head dim 64 has room
// for four.
func (s Spec) fwdStages() int {
	if s.HeadDim == 64 {
		return 4
	}
	return 2
}

// fwdQRegs reports whether the portable forward keeps Q's fragments in
// registers (register pressure above head dim 64).
func (s Spec) fwdQRegs() bool { return s.HeadDim <= 64 }

// fwdThreads is the forward kernel's block size: portable, a warp per
// 16*fwdMT q rows; Hopper, a consumer warpgroup per 64 q rows and the
// producer.
func (s Spec) fwdThreads() int {
	if s.Fwd == Hopper {
		return s.BlockQ/64*128 + 128
	}
	return s.BlockQ / (16 * s.fwdMT()) * 32
}

// bwdBM is the backward's q rows per tile (both kernels).
func (s Spec) bwdBM() int {
	if s.HeadDim >= 256 {
		return 32
	}
	return 64
}

// bwdThreads is flex_bwd_dkdv's block size: a warp per 16 kv rows
// (portable), two warpgroups (Hopper), and the producer's (bwdWS).
func (s Spec) bwdThreads() int {
	switch {
	case s.bwdWS():
		return 384
	case s.Bwd == Hopper:
		return 256
	}
	return s.BlockKV / 16 * 32
}

// bwdWS reports whether the Hopper backward runs with a producer warpgroup:
// at head dims 64 and 128 (flex_bwd_wg.cuh's FLEX_BWD_PROD alike; at 256 the
// two CTAs of a kv block load their own tiles).
func (s Spec) bwdWS() bool { return s.Bwd == Hopper && !s.bwdHalf() }

// bwdDQBulk reports whether the Hopper backward adds its dQ tiles to dQacc
// through shared memory and the copy engine: whenever it has the producer
// (flex_bwd_wg.cuh's FLEX_BWD_BULK alike).
func (s Spec) bwdDQBulk() bool { return s.bwdWS() }

// bwdDQCols is the dQ columns each consumer warpgroup of the Hopper backward
// computes per tile: 32 at head dim 64 (the two split the columns), else 64.
func (s Spec) bwdDQCols() int {
	if s.HeadDim == 64 {
		return 32
	}
	return 64
}

// bwdDQBufBytes is the shared memory of bwdDQBulk's buffers: a 64-row fp32
// dQ tile of bwdDQCols columns per consumer warpgroup.
func (s Spec) bwdDQBufBytes() int {
	if !s.bwdDQBulk() {
		return 0
	}
	return 2 * s.bwdBM() * s.bwdDQCols() * 4
}

// bwdHalf reports whether the Hopper backward splits the head dimension
// over two CTAs per kv block (head dim 256: dK and dV of 64 kv rows x 256
// would take 256 registers per thread).
func (s Spec) bwdHalf() bool { return s.Bwd == Hopper && s.HeadDim == 256 }

// bwdStages and bwdDSBufs are the Hopper backward's Q/dO stages and dS^T
// buffers (one at head dim 256, where dQ runs right after its tile).
// Stages: 2 at head dim 256, and at head dim 128 with bwdDQBulk: there
// three stages (33,296 bytes each with LSE, Dlt and the mbarriers) and the
// 32 KB of dQ buffers come to 231,984 bytes + 8 per q block, which leaves
// the 232,448 an H100/H200 block may have at 58 q blocks (the DFlash 8B
// case has 128); with two, 198,688 + 8 per q block. No buffer is dead when
// dQ is stored (K, both dS^T and the stages in flight are all read then),
// and with the producer a stage is loaded a whole tile (about 4 µs,
// docs/PERF.md) ahead of its use.
func (s Spec) bwdStages() int {
	if s.bwdHalf() || s.HeadDim == 128 && s.bwdDQBulk() {
		return 2
	}
	return 3
}

func (s Spec) bwdDSBufs() int {
	if s.bwdHalf() {
		return 1
	}
	return 2
}

// preRows is the rows per CTA of flex_bwd_pre (256 threads, one per 8
// elements of a row).
func (s Spec) preRows() int { return 256 / (s.HeadDim / 8) }

// dqBN and dqThreads are the kv rows per stage and the block size (a warp
// per 16 q rows) of the deterministic backward's dQ pass.
func (s Spec) dqBN() int {
	if s.HeadDim >= 256 {
		return 32
	}
	return 64
}

func (s Spec) dqThreads() int { return s.BlockQ / 16 * 32 }

// bwdSplit reports whether the backward runs one CTA per query head.
func (s Spec) bwdSplit() bool { return s.Group > 1 }

// splitMode is FLEX_BWD_SPLIT: 0 no split, 1 atomics, 2 per-head slices.
func (s Spec) splitMode() int {
	switch {
	case !s.bwdSplit():
		return 0
	case s.Deterministic:
		return 2
	}
	return 1
}

// Resources is what a kernel launch needs from one multiprocessor.
type Resources struct {
	Kernel     string
	SharedMem  int // dynamic shared memory, bytes
	Threads    int // per block
	MaxRegs    int // registers per thread the compiled kernel uses (0: unknown)
	RegsPerSM  int // 0: 65536
	SmemOptIn  int // the device's max dynamic shared memory per block (opt-in)
	ThreadsMax int // the device's max threads per block (0: 1024)
}

// FwdResources is the launch shape of flex_fwd for s with nkvb kv blocks.
func FwdResources(s Spec, nkvb int) Resources {
	bn := s.fwdBN()
	if s.Fwd == Hopper { // flex_fwd_ws.cu's tiles: Q, st K and V stages, 1+4st mbarriers; alignment slack
		st := s.fwdStages()
		return Resources{Kernel: "flex_fwd", SharedMem: (s.BlockQ+2*st*bn)*s.HeadDim*2 + 8*(1+4*st) + 1024 + 8*nkvb, Threads: s.fwdThreads()}
	}
	// flex_fwd.cu's: Q, two K and two V tiles
	return Resources{Kernel: "flex_fwd", SharedMem: (s.BlockQ+4*bn)*s.HeadDim*2 + 8*nkvb, Threads: s.fwdThreads()}
}

// BwdResources is the launch shape of flex_bwd_dkdv for s with nqb q blocks.
func BwdResources(s Spec, nqb int) Resources {
	bm := s.bwdBM()
	if s.Bwd == Hopper { // flex_bwd_wg.cuh's tiles: K, V, nst stages of Q and dO, nds dS^T buffers, dQ buffers (bwdDQBulk), LSE/Dlt; 2 mbarriers per stage (bwdWS); alignment slack
		nst, nds := s.bwdStages(), s.bwdDSBufs()
		mbar := 0
		if s.bwdWS() {
			mbar = 2 * nst * 8
		}
		return Resources{Kernel: "flex_bwd_dkdv",
			SharedMem: (2*s.BlockKV*s.HeadDim+2*nst*bm*s.HeadDim+nds*s.BlockKV*64)*2 + s.bwdDQBufBytes() + 2*nst*bm*4 + mbar + 1024 + 8*nqb,
			Threads:   s.bwdThreads()}
	}
	dsTile := bm * s.BlockKV // the dS tile of the atomic dQ product
	if s.Deterministic {
		dsTile = 0
	}
	return Resources{Kernel: "flex_bwd_dkdv",
		SharedMem: (2*s.BlockKV*s.HeadDim+4*bm*s.HeadDim+dsTile)*2 + 16*bm + 8*nqb,
		Threads:   s.bwdThreads()}
}

// DQResources is the launch shape of flex_bwd_dq (the deterministic
// backward's dQ pass) for s with nkvb kv blocks.
func DQResources(s Spec, nkvb int) Resources {
	return Resources{Kernel: "flex_bwd_dq", SharedMem: (2*s.BlockQ+4*s.dqBN())*s.HeadDim*2 + 8*s.BlockQ + 8*nkvb,
		Threads: s.dqThreads()}
}

// Check returns an error naming the limit a launch would break (contract 4:
// no launch that the device would refuse or silently degrade).
func (r Resources) Check() error {
	if r.SmemOptIn > 0 && r.SharedMem > r.SmemOptIn {
		return fmt.Errorf("flexcuda: %s needs %d bytes of shared memory per block, the device allows %d (shared-memory limit)", r.Kernel, r.SharedMem, r.SmemOptIn)
	}
	tmax := r.ThreadsMax
	if tmax == 0 {
		tmax = 1024
	}
	if r.Threads > tmax {
		return fmt.Errorf("flexcuda: %s needs %d threads per block, the device allows %d (thread limit)", r.Kernel, r.Threads, tmax)
	}
	regs := r.RegsPerSM
	if regs == 0 {
		regs = 65536
	}
	if r.MaxRegs > 0 && r.MaxRegs*r.Threads > regs {
		return fmt.Errorf("flexcuda: %s needs %d registers per block (%d x %d threads), a multiprocessor has %d (register limit)", r.Kernel, r.MaxRegs*r.Threads, r.MaxRegs, r.Threads, regs)
	}
	return nil
}
