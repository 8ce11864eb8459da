package dflash

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"dflash/internal/parsefile"
	"dflash/model"
	"dflash/tensor"
)

// Config describes a DFlash drafter: its own Qwen3-style shape and the DFlash
// fields (block size, mask token, taps, loss decay). It is stored as the
// config.json of docs/DRAFTER.md section 6.2.
type Config struct {
	HiddenSize            int
	IntermediateSize      int
	NumLayers             int // drafter decoder layers
	NumHeads              int
	NumKVHeads            int
	HeadDim               int
	RMSNormEps            float64
	RopeTheta             float64
	RopeScaling           *tensor.RopeScaling // the target's RoPE scaling (nil: plain RoPE)
	MaxPositionEmbeddings int
	VocabSize             int

	BlockSize   int
	MaskTokenID int
	// MaskToken is the mask token's name in the target's tokenizer,
	// dflash_config.mask_token ("": not recorded; engines assume
	// DefaultMaskToken). Export sets it (MaskTokenName).
	MaskToken      string
	TargetLayerIDs []int   // taps: 0-based target decoder layers, in concatenation order
	Gamma          float64 // loss decay; <= 0 means every slot weighs 1
	NumAnchors     int     // anchors sampled per sequence and step

	NumTargetLayers int
	Target          TargetInfo

	DType string // torch_dtype written to config.json ("float32" or "bfloat16")
}

// TargetInfo records the target the drafter was built for.
type TargetInfo struct {
	Architecture string `json:"architecture"`
	ModelType    string `json:"model_type"`
	HiddenSize   int    `json:"hidden_size"`
	VocabSize    int    `json:"vocab_size"`
	NumLayers    int    `json:"num_hidden_layers"`
}

// DefaultTaps returns the published default tap layers for a target with
// numTargetLayers layers and k taps: the middle layer for k == 1, otherwise
// round(1 + i*(L-4)/(k-1)) for i = 0..k-1, rounding half to even.
func DefaultTaps(numTargetLayers, k int) []int {
	if k < 1 {
		panic(fmt.Sprintf("dflash: DefaultTaps: %d taps", k))
	}
	if k == 1 {
		return []int{numTargetLayers / 2}
	}
	span := float64(numTargetLayers - 4)
	out := make([]int, k)
	for i := range out {
		out[i] = int(math.RoundToEven(1 + float64(i)*span/float64(k-1)))
	}
	return out
}

// CheckTaps returns an error naming the first of taps that is not a layer
// of a target of numTargetLayers layers.
func CheckTaps(taps []int, numTargetLayers int) error {
	for _, l := range taps {
		if l < 0 || l >= numTargetLayers {
			return fmt.Errorf("layer %d is outside the target's %d layers (0..%d)", l, numTargetLayers, numTargetLayers-1)
		}
	}
	return nil
}

// DefaultGamma returns the default loss decay for a block size: 7 for 16,
// 5 for 10, 4 for 8, otherwise blockSize/2.
func DefaultGamma(blockSize int) float64 {
	switch blockSize {
	case 16:
		return 7
	case 10:
		return 5
	case 8:
		return 4
	}
	return float64(blockSize) / 2
}

// Validate checks c for internal consistency and names the first bad field.
func (c *Config) Validate() error {
	pos := map[string]int{
		"hidden_size": c.HiddenSize, "intermediate_size": c.IntermediateSize,
		"num_hidden_layers": c.NumLayers, "num_attention_heads": c.NumHeads,
		"num_key_value_heads": c.NumKVHeads, "head_dim": c.HeadDim, "vocab_size": c.VocabSize,
		"num_target_layers": c.NumTargetLayers,
	}
	for _, k := range []string{"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
		"num_key_value_heads", "head_dim", "vocab_size", "num_target_layers"} {
		if pos[k] <= 0 {
			return fmt.Errorf("field %s: must be positive, got %d", k, pos[k])
		}
	}
	switch {
	case c.NumHeads%c.NumKVHeads != 0:
		return fmt.Errorf("field num_attention_heads: %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	case c.HeadDim%2 != 0:
		return fmt.Errorf("field head_dim: %d is odd (RoPE rotates pairs)", c.HeadDim)
	case !(c.RMSNormEps > 0):
		return fmt.Errorf("field rms_norm_eps: must be positive, got %v", c.RMSNormEps)
	case !(c.RopeTheta > 0):
		return fmt.Errorf("field rope_theta: must be positive, got %v", c.RopeTheta)
	case c.BlockSize < 2:
		return fmt.Errorf("field dflash_config.block_size: must be at least 2, got %d", c.BlockSize)
	case c.MaskTokenID < 0 || c.MaskTokenID >= c.VocabSize:
		return fmt.Errorf("field dflash_config.mask_token_id: %d is outside the vocabulary [0, %d)", c.MaskTokenID, c.VocabSize)
	case len(c.TargetLayerIDs) == 0:
		return fmt.Errorf("field dflash_config.target_layer_ids: empty")
	case c.NumAnchors < 1:
		return fmt.Errorf("field dflash_config.num_anchors: must be positive, got %d", c.NumAnchors)
	}
	for i, t := range c.TargetLayerIDs {
		if t < 0 || t >= c.NumTargetLayers {
			return fmt.Errorf("field dflash_config.target_layer_ids[%d]: layer %d is outside the %d layers of num_target_layers", i, t, c.NumTargetLayers)
		}
	}
	sizes := fmt.Sprintf("fields hidden_size %d, intermediate_size %d, num_hidden_layers %d, num_attention_heads %d, num_key_value_heads %d, head_dim %d, %d dflash_config.target_layer_ids",
		c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim, len(c.TargetLayerIDs))
	if err := model.CheckParams(sizes, c.ParamCount()); err != nil {
		return err
	}
	if c.Target.HiddenSize != 0 && c.Target.HiddenSize != c.HiddenSize {
		return fmt.Errorf("field hidden_size: %d differs from dflash_config.target.hidden_size %d, the drafter's recorded target (the drafter shares its embedding and head)", c.HiddenSize, c.Target.HiddenSize)
	}
	if c.Target.VocabSize != 0 && c.Target.VocabSize != c.VocabSize {
		return fmt.Errorf("field vocab_size: %d differs from dflash_config.target.vocab_size %d, the drafter's recorded target", c.VocabSize, c.Target.VocabSize)
	}
	if c.Target.NumLayers != 0 && c.Target.NumLayers != c.NumTargetLayers {
		return fmt.Errorf("field num_target_layers: %d differs from dflash_config.target.num_hidden_layers %d", c.NumTargetLayers, c.Target.NumLayers)
	}
	if _, err := c.Rope(); err != nil {
		return fmt.Errorf("field %w", err)
	}
	return nil
}

// Rope returns the drafter's rotary frequencies: the target's rope_theta and
// RoPE scaling (see tensor.NewRope).
func (c *Config) Rope() (*tensor.Rope, error) {
	return tensor.NewRope(c.HeadDim, c.RopeTheta, c.RopeScaling)
}

// configJSON is the on-disk layout of config.json. The fields marked "read
// only" are never written: they are read to refuse what the drafter cannot
// run or to accept transformers 5's spelling.
type configJSON struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      int             `json:"num_key_value_heads"`
	HeadDim               int             `json:"head_dim"`
	HiddenAct             string          `json:"hidden_act"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             float64         `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	VocabSize             int             `json:"vocab_size"`
	AttentionBias         bool            `json:"attention_bias"`
	AttentionDropout      float64         `json:"attention_dropout"`
	TieWordEmbeddings     bool            `json:"tie_word_embeddings"`
	UseSlidingWindow      bool            `json:"use_sliding_window"`
	SlidingWindow         *int            `json:"sliding_window"`
	LayerTypes            []string        `json:"layer_types"`
	InitializerRange      float64         `json:"initializer_range"`
	TorchDType            string          `json:"torch_dtype"`
	DType                 string          `json:"dtype,omitempty"`     // read only (transformers 5)
	IsCausal              *bool           `json:"is_causal,omitempty"` // read only
	BlockSize             int             `json:"block_size"`
	NumTargetLayers       int             `json:"num_target_layers"`
	EagleAuxLayerIDs      []int           `json:"eagle_aux_hidden_state_layer_ids"`
	DFlash                dflashJSON      `json:"dflash_config"`
}

type dflashJSON struct {
	BlockSize      int        `json:"block_size"`
	MaskTokenID    *int       `json:"mask_token_id"`
	MaskToken      *string    `json:"mask_token,omitempty"`
	TargetLayerIDs []int      `json:"target_layer_ids"`
	Causal         *bool      `json:"causal"`
	UseSWA         *bool      `json:"use_swa,omitempty"`         // read only
	SWAWindowSize  *int       `json:"swa_window_size,omitempty"` // read only
	Gamma          *float64   `json:"loss_decay_gamma"`
	NumAnchors     int        `json:"num_anchors"`
	Target         TargetInfo `json:"target"`
}

// AuxLayerIDs returns the taps as eagle_aux_hidden_state_layer_ids: each
// tap plus one, the index of the hidden state after that layer counting the
// embedding output as 0 (the form vLLM's EAGLE-3 capture reads).
func (c *Config) AuxLayerIDs() []int {
	ids := make([]int, len(c.TargetLayerIDs))
	for i, t := range c.TargetLayerIDs {
		ids[i] = t + 1
	}
	return ids
}

// MarshalJSON writes c as config.json (docs/DRAFTER.md section 6.2).
func (c *Config) MarshalJSON() ([]byte, error) {
	layerTypes := make([]string, c.NumLayers)
	for i := range layerTypes {
		layerTypes[i] = "full_attention"
	}
	dt := c.DType
	if dt == "" {
		dt = "float32"
	}
	mask, gamma, causal := c.MaskTokenID, c.Gamma, false
	var maskName *string
	if c.MaskToken != "" {
		maskName = &c.MaskToken
	}
	rs, err := json.Marshal(model.RopeScalingJSON(c.RopeScaling)) // null for plain RoPE
	if err != nil {
		return nil, err
	}
	j := configJSON{
		Architectures: []string{"DFlashDraftModel"}, ModelType: "qwen3",
		HiddenSize: c.HiddenSize, IntermediateSize: c.IntermediateSize, NumHiddenLayers: c.NumLayers,
		NumAttentionHeads: c.NumHeads, NumKeyValueHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		HiddenAct: "silu", RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta, RopeScaling: rs,
		MaxPositionEmbeddings: c.MaxPositionEmbeddings, VocabSize: c.VocabSize,
		LayerTypes: layerTypes, InitializerRange: 0.02, TorchDType: dt,
		BlockSize: c.BlockSize, NumTargetLayers: c.NumTargetLayers, EagleAuxLayerIDs: c.AuxLayerIDs(),
		DFlash: dflashJSON{BlockSize: c.BlockSize, MaskTokenID: &mask, MaskToken: maskName, TargetLayerIDs: c.TargetLayerIDs,
			Causal: &causal, Gamma: &gamma, NumAnchors: c.NumAnchors, Target: c.Target},
	}
	return json.MarshalIndent(j, "", "  ")
}

// ParseConfig reads a drafter config.json; errors name the missing or
// inconsistent field. What the drafter cannot run is refused, naming the
// field: sliding-window layers (use_sliding_window, layer_types,
// dflash_config.use_swa), causal attention (is_causal, dflash_config.causal).
// RoPE and the dtype are read in the transformers 4 spelling (rope_theta,
// rope_scaling, torch_dtype) and the 5 one (rope_parameters, dtype); a value
// given in both that differs is an error naming both.
func ParseConfig(b []byte) (*Config, error) {
	var j configJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	if j.ModelType != "" && j.ModelType != "qwen3" {
		return nil, fmt.Errorf("field model_type: %q, want \"qwen3\" (a DFlash drafter)", j.ModelType)
	}
	if j.HiddenAct != "" && j.HiddenAct != "silu" {
		return nil, fmt.Errorf("field hidden_act: %q is not supported (silu only)", j.HiddenAct)
	}
	if j.AttentionBias {
		return nil, fmt.Errorf("field attention_bias: true is not supported")
	}
	if err := model.FullAttention(fields); err != nil {
		return nil, fmt.Errorf("field %w", err)
	}
	d := j.DFlash
	if d.UseSWA != nil && *d.UseSWA {
		w := "no window"
		switch {
		case d.SWAWindowSize != nil:
			w = fmt.Sprintf("dflash_config.swa_window_size %d", *d.SWAWindowSize)
		case j.SlidingWindow != nil:
			w = fmt.Sprintf("sliding_window %d", *j.SlidingWindow)
		}
		return nil, fmt.Errorf("field dflash_config.use_swa: true (%s) is not supported: every drafter layer attends fully", w)
	}
	if j.IsCausal != nil && *j.IsCausal {
		return nil, fmt.Errorf("field is_causal: true is not supported: the drafter's block attends both ways (docs/DRAFTER.md section 3)")
	}
	if d.Causal != nil && *d.Causal {
		return nil, fmt.Errorf("field dflash_config.causal: true is not supported: the drafter's block attends both ways (docs/DRAFTER.md section 3)")
	}
	if len(j.LayerTypes) != 0 && len(j.LayerTypes) != j.NumHiddenLayers {
		return nil, fmt.Errorf("field layer_types: %d entries for num_hidden_layers %d", len(j.LayerTypes), j.NumHiddenLayers)
	}
	theta, scaling, err := model.ParseRope(fields, 0)
	if err != nil {
		return nil, fmt.Errorf("field %w", err)
	}
	dtype := j.TorchDType
	if j.DType != "" {
		if dtype != "" && dtype != j.DType {
			return nil, fmt.Errorf("field dtype: %q differs from torch_dtype %q", j.DType, dtype)
		}
		dtype = j.DType
	}
	bs := d.BlockSize
	if bs == 0 {
		bs = j.BlockSize
	}
	if j.BlockSize != 0 && d.BlockSize != 0 && j.BlockSize != d.BlockSize {
		return nil, fmt.Errorf("field block_size: %d differs from dflash_config.block_size %d", j.BlockSize, d.BlockSize)
	}
	if d.MaskTokenID == nil {
		return nil, fmt.Errorf("field dflash_config.mask_token_id: missing")
	}
	if d.MaskToken != nil && *d.MaskToken == "" {
		return nil, fmt.Errorf("field dflash_config.mask_token: empty (the mask token's name in the target's tokenizer)")
	}
	if d.TargetLayerIDs == nil {
		return nil, fmt.Errorf("field dflash_config.target_layer_ids: missing")
	}
	c := &Config{
		HiddenSize: j.HiddenSize, IntermediateSize: j.IntermediateSize, NumLayers: j.NumHiddenLayers,
		NumHeads: j.NumAttentionHeads, NumKVHeads: j.NumKeyValueHeads, HeadDim: j.HeadDim,
		RMSNormEps: j.RMSNormEps, RopeTheta: theta, RopeScaling: scaling,
		MaxPositionEmbeddings: j.MaxPositionEmbeddings, VocabSize: j.VocabSize,
		BlockSize: bs, MaskTokenID: *d.MaskTokenID, TargetLayerIDs: d.TargetLayerIDs,
		NumAnchors: d.NumAnchors, NumTargetLayers: j.NumTargetLayers, Target: d.Target, DType: dtype,
	}
	if d.MaskToken != nil {
		c.MaskToken = *d.MaskToken
	}
	if c.HeadDim == 0 && c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if c.NumKVHeads == 0 {
		c.NumKVHeads = c.NumHeads
	}
	if c.NumTargetLayers == 0 {
		c.NumTargetLayers = d.Target.NumLayers
	}
	if d.Gamma != nil {
		c.Gamma = *d.Gamma
	} else {
		c.Gamma = DefaultGamma(bs)
	}
	if c.NumAnchors == 0 {
		c.NumAnchors = 512
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if j.EagleAuxLayerIDs != nil && !slices.Equal(j.EagleAuxLayerIDs, c.AuxLayerIDs()) {
		return nil, fmt.Errorf("field eagle_aux_hidden_state_layer_ids: %v, want dflash_config.target_layer_ids %v plus one, %v",
			j.EagleAuxLayerIDs, c.TargetLayerIDs, c.AuxLayerIDs())
	}
	return c, nil
}

// ReadConfig reads dir/config.json.
func ReadConfig(dir string) (*Config, error) {
	return parsefile.Read(filepath.Join(dir, "config.json"), ParseConfig)
}

// SlotWeights returns w_s = exp(-(s-1)/gamma) for s = 1..B-1 and w_0 = 0
// (slot 0 is never a label); gamma <= 0 gives weight 1 to every slot >= 1.
func (c *Config) SlotWeights() []float64 {
	w := make([]float64, c.BlockSize)
	for s := 1; s < c.BlockSize; s++ {
		if c.Gamma > 0 {
			w[s] = math.Exp(-float64(s-1) / c.Gamma)
		} else {
			w[s] = 1
		}
	}
	return w
}
