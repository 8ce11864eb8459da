// Package traincuda runs package train's training loop on the CUDA tensor
// backend (package tensorcuda): Device is train.Device for a parameter
// arena placed on a tensorcuda.Backend (the gradient's scaling, norm and
// clipping, the fused AdamW, the copies to and from a run's host mirrors),
// NCCLCollective is train.Collective over an NCCL communicator, under a
// watchdog (design contract 9), and RunRanks runs the ranks of a
// data-parallel job, each on the worker thread of its GPU.
//
//	err := traincuda.RunRanks(ctx, cache, place, 0, func(r traincuda.RankEnv) error {
//		arena.Place(r.Backend, true)
//		dev, err := traincuda.NewDevice(r.Backend, &arena, cfg)
//		// train.Run with dev and r.Collective
//	})
//
// The backend knows nothing of training: this package uses its ops
// (Fill, Scale, SumSquares, the fused tensorcuda.AdamW) and the device
// memory of its storage (Backend.Memory).
package traincuda
