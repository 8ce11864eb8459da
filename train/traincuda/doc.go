// Package traincuda runs package train's training loop on the CUDA tensor
// backend (package tensorcuda): NCCLCollective is train.Collective over an
// NCCL communicator, reducing ranges of a placed arena's flat gradient
// (train.Params.GradRange), under a watchdog (design contract 9), and
// RunRanks runs the ranks of a data-parallel job, each on the worker
// thread of its GPU.
//
//	err := traincuda.RunRanks(ctx, cache, place, 0, func(r traincuda.RankEnv) error {
//		arena.Place(r.Backend, true)
//		// train.Run with Hooks{Backend: r.Backend, Arena: &arena, Collective: r.Collective, ...}
//	})
//
// The optimizer (zeroing, scaling, the norm, the fused AdamW) is the
// backend's, through train.Params; this package uses the device memory of
// the backend's storage (Backend.Memory) for NCCL.
package traincuda
