// Package rngstream numbers the random streams a training run draws from its
// seed: each is a PCG stream (math/rand/v2's NewPCG(seed, stream)) of its own,
// so that drawing more from one never shifts another. train.Run makes Train
// and the Eval streams; the recipe draws Init for the drafter's weights and
// Data for the data's shuffle and order.
package rngstream

const (
	Train uint64 = 1 // the training steps' randomness (anchors), handed to each step
	Eval  uint64 = 2 // base of the per-evaluation streams
	Init  uint64 = 3 // parameter initialisation
	Data  uint64 = 4 // data shuffling and batch order
)
