package train

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// RNG is a PCG generator (math/rand/v2) whose complete state can be saved and
// restored, so a resumed run draws exactly the numbers the uninterrupted run would.
type RNG struct {
	*rand.Rand
	src *rand.PCG
}

// NewRNG returns a generator seeded with (seed, stream); different streams of one
// seed are independent sequences.
func NewRNG(seed, stream uint64) *RNG {
	src := rand.NewPCG(seed, stream^0x9e3779b97f4a7c15)
	return &RNG{Rand: rand.New(src), src: src}
}

// MarshalBinary returns the generator state.
func (r *RNG) MarshalBinary() ([]byte, error) { return r.src.MarshalBinary() }

// UnmarshalBinary restores a state from MarshalBinary.
func (r *RNG) UnmarshalBinary(b []byte) error {
	if r.src == nil {
		r.src = rand.NewPCG(0, 0)
		r.Rand = rand.New(r.src)
	}
	if err := r.src.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("rng state: %w", err)
	}
	return nil
}

// MarshalJSON encodes the state as a base64 JSON string.
func (r *RNG) MarshalJSON() ([]byte, error) {
	b, err := r.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return json.Marshal(b)
}

// UnmarshalJSON decodes a state written by MarshalJSON.
func (r *RNG) UnmarshalJSON(data []byte) error {
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("rng state: %w", err)
	}
	return r.UnmarshalBinary(b)
}
