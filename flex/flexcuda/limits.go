package flexcuda

import "fmt"

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
	switch bn, st := s.fwdTiles(); {
	case s.FwdV6: // flex_fwd_wg.cu's tiles: Q, two K and two V tiles; 1024 bytes of alignment slack
		return Resources{Kernel: "flex_fwd", SharedMem: (s.BlockQ+4*bn)*s.HeadDim*2 + 1024 + 8*nkvb, Threads: s.fwdThreads()}
	case s.FwdV7: // flex_fwd_ws.cu's: Q, st K and V stages, 1+4st mbarriers; alignment slack
		return Resources{Kernel: "flex_fwd", SharedMem: (s.BlockQ+2*st*bn)*s.HeadDim*2 + 8*(1+4*st) + 1024 + 8*nkvb, Threads: s.fwdThreads()}
	}
	bn := 64 // FLEX_BN of flex_fwd.cu
	switch {
	case s.HeadDim >= 256:
		bn = 32
	case s.HeadDim == 128 && s.fwdMT() == 1:
		bn = 128
	}
	return Resources{Kernel: "flex_fwd", SharedMem: (s.BlockQ+4*bn)*s.HeadDim*2 + 8*nkvb, Threads: s.fwdThreads()}
}

// BwdResources is the launch shape of flex_bwd_dkdv for s with nqb q blocks.
func BwdResources(s Spec, nqb int) Resources {
	if s.BwdV6 { // flex_bwd_wg.cuh's tiles: K, V, nst stages of Q and dO, nds dS^T buffers, LSE/Dlt; alignment slack
		bm, nst, nds := 64, 3, 2 // q rows per tile, Q/dO stages, dS^T buffers
		if s.HeadDim == 256 {
			bm, nst, nds = 32, 2, 1
		}
		return Resources{Kernel: "flex_bwd_dkdv",
			SharedMem: (2*s.BlockKV*s.HeadDim+2*nst*bm*s.HeadDim+nds*s.BlockKV*64)*2 + 2*nst*bm*4 + 1024 + 8*nqb,
			Threads:   256}
	}
	bmq := 64
	if s.HeadDim >= 256 {
		bmq = 32
	}
	dsTile := bmq * s.BlockKV // the dS tile of the atomic dQ product
	if s.Deterministic {
		dsTile = 0
	}
	return Resources{Kernel: "flex_bwd_dkdv",
		SharedMem: (2*s.BlockKV*s.HeadDim+4*bmq*s.HeadDim+dsTile)*2 + 16*bmq + 8*nqb,
		Threads:   s.BlockKV / 16 * 32}
}

// DQResources is the launch shape of flex_bwd_dq (the deterministic
// backward's dQ pass) for s with nkvb kv blocks.
func DQResources(s Spec, nkvb int) Resources {
	bn := 64 // FLEX_DQ_BN of flex_bwd_dq.cuh
	if s.HeadDim >= 256 {
		bn = 32
	}
	return Resources{Kernel: "flex_bwd_dq", SharedMem: (2*s.BlockQ+4*bn)*s.HeadDim*2 + 8*s.BlockQ + 8*nkvb,
		Threads: s.BlockQ / 16 * 32}
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
