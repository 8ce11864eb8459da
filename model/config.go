package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"dflash/internal/parsefile"
	"dflash/tensor"
)

// Architecture names a supported decoder family.
type Architecture string

const (
	Qwen3 Architecture = "qwen3" // Llama plus RMSNorm of q and k per head (QK-norm)
	Llama Architecture = "llama"
)

// hfClass is the transformers class of each architecture.
var hfClass = map[Architecture]string{Qwen3: "Qwen3ForCausalLM", Llama: "LlamaForCausalLM"}

// HFClass returns the transformers class of a (e.g. "Qwen3ForCausalLM"),
// empty for an unsupported architecture.
func (a Architecture) HFClass() string { return hfClass[a] }

// Config is the part of an HF config.json that defines a Qwen3 or Llama decoder.
type Config struct {
	Arch                  Architecture
	VocabSize             int
	HiddenSize            int
	IntermediateSize      int
	NumLayers             int
	NumHeads              int
	NumKVHeads            int
	HeadDim               int
	RMSNormEps            float64
	RopeTheta             float64
	RopeScaling           *tensor.RopeScaling // nil: plain RoPE
	MaxPositionEmbeddings int
	TieWordEmbeddings     bool
	AttentionBias         bool // biases on q, k, v and o projections
	MLPBias               bool // biases on gate, up and down projections (Llama)
	BOSTokenID            *int
	EOSTokenIDs           []int
	// InitializerRange is the standard deviation of New's random weights.
	InitializerRange float64
}

// Validate reports the first inconsistent field, named as in config.json.
func (c *Config) Validate() error {
	if _, ok := hfClass[c.Arch]; !ok {
		return fmt.Errorf("model_type %q is not supported (want qwen3 or llama)", c.Arch)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumLayers}, {"num_attention_heads", c.NumHeads}, {"num_key_value_heads", c.NumKVHeads}, {"head_dim", c.HeadDim}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
	}
	if err := CheckParams(c.sizes()+fmt.Sprintf(", num_attention_heads %d, num_key_value_heads %d, head_dim %d", c.NumHeads, c.NumKVHeads, c.HeadDim), c.ParamCount()); err != nil {
		return err
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d must be even (RoPE rotates pairs)", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) {
		return fmt.Errorf("rms_norm_eps must be positive, got %g", c.RMSNormEps)
	}
	if _, err := tensor.NewRope(c.HeadDim, c.RopeTheta, c.RopeScaling); err != nil {
		return err
	}
	return nil
}

// ReadConfig reads and validates an HF config.json. Both the transformers 4
// form (rope_theta, rope_scaling) and the 5 form (rope_parameters) are read
// (ParseRope); sliding-window layers are refused (FullAttention).
// Errors name the file and the field.
func ReadConfig(path string) (*Config, error) {
	return parsefile.Read(path, ParseConfig)
}

// ParseConfig parses and validates config.json contents.
func ParseConfig(raw []byte) (*Config, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	p := parser{m: m}
	c := &Config{}
	var modelType string
	p.str("model_type", &modelType, false)
	var archs []string
	p.get("architectures", &archs, false)
	switch {
	case modelType != "":
		c.Arch = Architecture(modelType)
	case len(archs) > 0:
		for a, cls := range hfClass {
			if archs[0] == cls {
				c.Arch = a
			}
		}
		if c.Arch == "" {
			return nil, fmt.Errorf("architectures %q: not supported (want Qwen3ForCausalLM or LlamaForCausalLM)", archs)
		}
	default:
		return nil, fmt.Errorf("model_type: missing (and no architectures)")
	}
	if _, ok := hfClass[c.Arch]; !ok {
		return nil, fmt.Errorf("model_type %q is not supported (want qwen3 or llama)", modelType)
	}
	if len(archs) > 0 && archs[0] != hfClass[c.Arch] {
		return nil, fmt.Errorf("architectures %q does not match model_type %q (want %s)", archs, c.Arch, hfClass[c.Arch])
	}
	p.int("vocab_size", &c.VocabSize, true)
	p.int("hidden_size", &c.HiddenSize, true)
	p.int("intermediate_size", &c.IntermediateSize, true)
	p.int("num_hidden_layers", &c.NumLayers, true)
	p.int("num_attention_heads", &c.NumHeads, true)
	c.NumKVHeads = c.NumHeads
	p.int("num_key_value_heads", &c.NumKVHeads, false)
	if c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	p.int("head_dim", &c.HeadDim, false)
	c.RMSNormEps = 1e-6
	p.float("rms_norm_eps", &c.RMSNormEps, false)
	c.MaxPositionEmbeddings = 2048
	p.int("max_position_embeddings", &c.MaxPositionEmbeddings, false)
	p.bool("tie_word_embeddings", &c.TieWordEmbeddings, false)
	p.bool("attention_bias", &c.AttentionBias, false)
	p.bool("mlp_bias", &c.MLPBias, false)
	c.InitializerRange = 0.02
	p.float("initializer_range", &c.InitializerRange, false)
	var act string
	p.str("hidden_act", &act, false)
	if act != "" && act != "silu" {
		p.fail("hidden_act %q is not supported (want silu)", act)
	}
	if v, ok := m["bos_token_id"]; ok && string(v) != "null" {
		var id int
		p.int("bos_token_id", &id, false)
		c.BOSTokenID = &id
	}
	if v, ok := m["eos_token_id"]; ok && string(v) != "null" {
		var one int
		if json.Unmarshal(v, &one) == nil {
			c.EOSTokenIDs = []int{one}
		} else {
			p.decode("eos_token_id", &c.EOSTokenIDs, "an integer or a list of integers", false)
		}
	}
	if p.err != nil {
		return nil, p.err
	}
	if err := FullAttention(m); err != nil {
		return nil, err
	}
	var err error
	if c.RopeTheta, c.RopeScaling, err = ParseRope(m, 10000); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// RopeScalingJSON returns s as HF's rope_scaling object (nil for nil), the
// inverse of ParseRope's scaling.
func RopeScalingJSON(s *tensor.RopeScaling) map[string]any {
	if s == nil {
		return nil
	}
	sc := map[string]any{"rope_type": s.Type, "factor": s.Factor}
	if s.Type == "llama3" {
		sc["low_freq_factor"] = s.LowFreqFactor
		sc["high_freq_factor"] = s.HighFreqFactor
		sc["original_max_position_embeddings"] = s.OriginalMaxPositions
	}
	return sc
}

// ParseRope reads the RoPE of a config.json's top-level fields m:
// rope_theta and rope_scaling (transformers 4) and rope_parameters
// (transformers 5), with theta when none of them gives a base. A value given
// in both forms must agree: a conflict is an error naming both fields.
// Scaling types default (nil), linear and llama3 are supported; rope_type or
// the legacy type names the type.
func ParseRope(m map[string]json.RawMessage, theta float64) (float64, *tensor.RopeScaling, error) {
	thetaFrom := ""
	if v, ok := m["rope_theta"]; ok && string(v) != "null" {
		p := parser{m: m}
		p.float("rope_theta", &theta, false)
		if p.err != nil {
			return 0, nil, p.err
		}
		thetaFrom = "rope_theta"
	}
	var scaling *tensor.RopeScaling
	scalingFrom := ""
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		v, ok := m[key]
		if !ok || string(v) == "null" {
			continue
		}
		s, th, err := parseRope(key, v)
		if err != nil {
			return 0, nil, err
		}
		if th != nil {
			if thetaFrom != "" && *th != theta {
				return 0, nil, fmt.Errorf("%s.rope_theta %g differs from %s %g", key, *th, thetaFrom, theta)
			}
			theta, thetaFrom = *th, key+".rope_theta"
		}
		if scalingFrom != "" && !sameScaling(s, scaling) {
			return 0, nil, fmt.Errorf("%s %s differs from %s %s", key, compact(v), scalingFrom, compact(m[scalingFrom]))
		}
		scaling, scalingFrom = s, key
	}
	return theta, scaling, nil
}

// compact returns raw JSON on one line.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// sameScaling reports whether a and b scale RoPE alike (nil: none).
func sameScaling(a, b *tensor.RopeScaling) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// parseRope reads the rope object under key (rope_scaling or
// rope_parameters) and returns its scaling (nil for the default type) and
// the rope_theta it holds (nil: none).
func parseRope(key string, raw json.RawMessage) (*tensor.RopeScaling, *float64, error) {
	var rp map[string]json.RawMessage
	if err := json.Unmarshal(raw, &rp); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", key, err)
	}
	sp := parser{m: rp, prefix: key + "."}
	var theta *float64
	if v, ok := rp["rope_theta"]; ok && string(v) != "null" {
		theta = new(float64)
		sp.float("rope_theta", theta, false)
	}
	s := &tensor.RopeScaling{}
	sp.str("rope_type", &s.Type, false)
	if s.Type == "" {
		sp.str("type", &s.Type, false)
	}
	sp.float("factor", &s.Factor, false)
	sp.float("low_freq_factor", &s.LowFreqFactor, false)
	sp.float("high_freq_factor", &s.HighFreqFactor, false)
	sp.int("original_max_position_embeddings", &s.OriginalMaxPositions, false)
	if sp.err != nil {
		return nil, nil, sp.err
	}
	switch s.Type {
	case "", "default":
		return nil, theta, nil
	case "linear", "llama3":
		return s, theta, nil
	}
	return nil, nil, fmt.Errorf("%s.rope_type %q is not supported (want default, linear or llama3)", key, s.Type)
}

// FullAttention checks that the config.json fields m describe layers that
// all attend fully: use_sliding_window absent or false and every layer_types
// entry "full_attention". An error names the field and, for a sliding
// layer, the sliding_window it would use.
func FullAttention(m map[string]json.RawMessage) error {
	p := parser{m: m}
	var sliding bool
	var layerTypes []string
	var window *int
	p.bool("use_sliding_window", &sliding, false)
	p.get("layer_types", &layerTypes, false)
	p.get("sliding_window", &window, false)
	if p.err != nil {
		return p.err
	}
	w := "sliding_window null"
	if window != nil {
		w = fmt.Sprintf("sliding_window %d", *window)
	}
	if sliding {
		return fmt.Errorf("use_sliding_window true (%s) is not supported: every layer attends fully", w)
	}
	for i, t := range layerTypes {
		if t != "full_attention" {
			return fmt.Errorf("layer_types[%d] %q (%s) is not supported: every layer attends fully (full_attention)", i, t, w)
		}
	}
	return nil
}

// parser reads typed fields from a JSON object and keeps the first error,
// naming the field.
type parser struct {
	m      map[string]json.RawMessage
	prefix string
	err    error
}

func (p *parser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf(format, args...)
	}
}

// get decodes field key into dst; a value of another JSON type is an
// error saying what the field holds (kind).
func (p *parser) get(key string, dst any, required bool) { p.decode(key, dst, kind(dst), required) }

// decode is get with want, what the field must hold ("a number").
func (p *parser) decode(key string, dst any, want string, required bool) {
	v, ok := p.m[key]
	if !ok || string(v) == "null" {
		if required {
			p.fail("%s%s: missing", p.prefix, key)
		}
		return
	}
	if err := json.Unmarshal(v, dst); err != nil {
		p.fail("%s%s: %s is not %s", p.prefix, key, v, want)
	}
}

// kind names in words the JSON value that a pointer of parser's field
// types decodes: "a number", "an integer", "true or false", "a string" or
// a list of them. Another type is a programmer error.
func kind(dst any) string {
	switch dst.(type) {
	case *float64:
		return "a number"
	case *int, **int:
		return "an integer"
	case *bool:
		return "true or false"
	case *string:
		return "a string"
	case *[]int:
		return "a list of integers"
	case *[]string:
		return "a list of strings"
	}
	panic(fmt.Sprintf("model: parser: no kind for %T", dst))
}

func (p *parser) int(key string, dst *int, required bool) {
	var f float64
	v, ok := p.m[key]
	p.decode(key, &f, "an integer", required)
	if ok && p.err == nil && string(v) != "null" {
		if f != math.Trunc(f) {
			p.fail("%s%s: %s is not an integer", p.prefix, key, v)
			return
		}
		*dst = int(f)
	}
}

func (p *parser) float(key string, dst *float64, required bool) { p.get(key, dst, required) }
func (p *parser) bool(key string, dst *bool, required bool)     { p.get(key, dst, required) }
func (p *parser) str(key string, dst *string, required bool)    { p.get(key, dst, required) }

// HFConfig returns config.json contents that transformers (4 and 5) loads:
// the architecture's class and model_type, sizes, RoPE both as rope_theta +
// rope_scaling and as rope_parameters, and torch_dtype dtype.
func (c *Config) HFConfig(dtype string) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rope := map[string]any{"rope_type": "default", "rope_theta": c.RopeTheta}
	var scaling any
	if sc := RopeScalingJSON(c.RopeScaling); sc != nil {
		scaling = sc
		rope = map[string]any{"rope_theta": c.RopeTheta}
		for k, v := range sc {
			rope[k] = v
		}
	}
	m := map[string]any{
		"architectures":           []string{hfClass[c.Arch]},
		"model_type":              string(c.Arch),
		"vocab_size":              c.VocabSize,
		"hidden_size":             c.HiddenSize,
		"intermediate_size":       c.IntermediateSize,
		"num_hidden_layers":       c.NumLayers,
		"num_attention_heads":     c.NumHeads,
		"num_key_value_heads":     c.NumKVHeads,
		"head_dim":                c.HeadDim,
		"hidden_act":              "silu",
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RopeTheta,
		"rope_scaling":            scaling,
		"rope_parameters":         rope,
		"max_position_embeddings": c.MaxPositionEmbeddings,
		"tie_word_embeddings":     c.TieWordEmbeddings,
		"attention_bias":          c.AttentionBias,
		"attention_dropout":       0.0,
		"initializer_range":       c.InitializerRange,
		"torch_dtype":             dtype,
		"use_cache":               true,
	}
	if c.Arch == Llama {
		m["mlp_bias"] = c.MLPBias
		m["pretraining_tp"] = 1
	}
	if c.Arch == Qwen3 {
		m["use_sliding_window"] = false
		m["sliding_window"] = nil
		m["max_window_layers"] = c.NumLayers
	}
	if c.BOSTokenID != nil {
		m["bos_token_id"] = *c.BOSTokenID
	}
	switch len(c.EOSTokenIDs) {
	case 0:
	case 1:
		m["eos_token_id"] = c.EOSTokenIDs[0]
	default:
		m["eos_token_id"] = c.EOSTokenIDs
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
