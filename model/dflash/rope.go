package dflash

import (
	"encoding/json"
	"fmt"
	"math"

	"dflash/tensor"
)

// ropeScaling is the subset of HF rope_scaling that the drafter supports.
type ropeScaling struct {
	Type           string  `json:"rope_type"`
	LegacyType     string  `json:"type"`
	Factor         float64 `json:"factor"`
	LowFreqFactor  float64 `json:"low_freq_factor"`
	HighFreqFactor float64 `json:"high_freq_factor"`
	OriginalMax    int     `json:"original_max_position_embeddings"`
}

// ropeScalingOf parses rope_scaling; nil means none. Supported: default,
// linear, llama3; anything else is an error.
func ropeScalingOf(raw json.RawMessage) (*ropeScaling, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s ropeScaling
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	if s.Type == "" {
		s.Type = s.LegacyType
	}
	switch s.Type {
	case "", "default":
		return nil, nil
	case "linear":
		if !(s.Factor > 0) {
			return nil, fmt.Errorf("linear scaling needs factor > 0, got %v", s.Factor)
		}
	case "llama3":
		if !(s.Factor > 0) || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || s.OriginalMax <= 0 {
			return nil, fmt.Errorf("llama3 scaling needs factor, low_freq_factor < high_freq_factor and original_max_position_embeddings")
		}
	default:
		return nil, fmt.Errorf("rope type %q is not supported (default, linear, llama3)", s.Type)
	}
	return &s, nil
}

// InvFreq returns the RoPE inverse frequencies θ^(-2f/D), f = 0..D/2-1,
// with the config's scaling applied.
func (c *Config) InvFreq() []float64 {
	d := c.HeadDim
	inv := make([]float64, d/2)
	for f := range inv {
		inv[f] = math.Pow(c.RopeTheta, -2*float64(f)/float64(d))
	}
	s, err := ropeScalingOf(c.RopeScaling)
	if err != nil {
		panic(fmt.Sprintf("dflash: InvFreq on an unvalidated config: %v", err))
	}
	if s == nil {
		return inv
	}
	switch s.Type {
	case "linear":
		for f := range inv {
			inv[f] /= s.Factor
		}
	case "llama3":
		lowWave := float64(s.OriginalMax) / s.LowFreqFactor
		highWave := float64(s.OriginalMax) / s.HighFreqFactor
		for f, v := range inv {
			wave := 2 * math.Pi / v
			switch {
			case wave < highWave:
			case wave > lowWave:
				inv[f] = v / s.Factor
			default:
				smooth := (float64(s.OriginalMax)/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				inv[f] = (1-smooth)*v/s.Factor + smooth*v
			}
		}
	}
	return inv
}

// ropeTables returns cos and sin [len(pos), D/2] for the positions pos.
func ropeTables[T tensor.Float](inv []float64, pos []int32) (cos, sin []T) {
	h := len(inv)
	cos = make([]T, len(pos)*h)
	sin = make([]T, len(pos)*h)
	for r, p := range pos {
		for f, v := range inv {
			a := float64(p) * v
			cos[r*h+f] = T(math.Cos(a))
			sin[r*h+f] = T(math.Sin(a))
		}
	}
	return cos, sin
}
