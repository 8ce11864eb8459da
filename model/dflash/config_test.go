package dflash

import (
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

func testConfig() *Config {
	return &Config{
		HiddenSize: 32, IntermediateSize: 64, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8,
		RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 512, VocabSize: 50,
		BlockSize: 4, MaskTokenID: 49, TargetLayerIDs: []int{1, 3}, Gamma: 3, NumAnchors: 8,
		NumTargetLayers: 6,
		Target:          TargetInfo{Architecture: "Qwen3ForCausalLM", ModelType: "qwen3", HiddenSize: 32, VocabSize: 50, NumLayers: 6},
	}
}

func TestDefaultTaps(t *testing.T) {
	for _, c := range []struct {
		layers, k int
		want      []int
	}{
		{36, 5, []int{1, 9, 17, 25, 33}}, // Qwen3-8B
		{28, 3, []int{1, 13, 25}},
		{32, 1, []int{16}},
		{8, 2, []int{1, 5}},
		{10, 4, []int{1, 3, 5, 7}}, // 1 + i*6/3
		{7, 3, []int{1, 2, 4}},     // 1 + i*1.5 = 1, 2.5→2 (half to even), 4
	} {
		if got := DefaultTaps(c.layers, c.k); !slices.Equal(got, c.want) {
			t.Errorf("DefaultTaps(%d, %d) = %v, want %v", c.layers, c.k, got, c.want)
		}
	}
}

func TestSlotWeights(t *testing.T) {
	c := testConfig()
	w := c.SlotWeights()
	want := []float64{0, 1, math.Exp(-1.0 / 3), math.Exp(-2.0 / 3)}
	for i := range want {
		if math.Abs(w[i]-want[i]) > 1e-15 {
			t.Fatalf("weights %v, want %v", w, want)
		}
	}
	c.Gamma = 0
	if w := c.SlotWeights(); !slices.Equal(w, []float64{0, 1, 1, 1}) {
		t.Fatalf("gamma 0: weights %v", w)
	}
	if DefaultGamma(16) != 7 || DefaultGamma(10) != 5 || DefaultGamma(8) != 4 || DefaultGamma(6) != 3 {
		t.Fatal("default gamma table")
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	c := testConfig()
	b, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"architectures": [`, `"DFlashDraftModel"`, `"dflash_config"`, `"target_layer_ids"`, `"mask_token_id": 49`, `"block_size": 4`, `"num_target_layers": 6`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("config.json lacks %s:\n%s", key, b)
		}
	}
	got, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	got.RopeScaling, c.RopeScaling = nil, nil
	got.DType = ""
	if !slices.Equal(got.TargetLayerIDs, c.TargetLayerIDs) || got.HiddenSize != c.HiddenSize || got.Gamma != c.Gamma ||
		got.MaskTokenID != c.MaskTokenID || got.BlockSize != c.BlockSize || got.Target != c.Target || got.NumAnchors != c.NumAnchors {
		t.Fatalf("round trip: %+v, want %+v", got, c)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	base, _ := testConfig().MarshalJSON()
	for _, c := range []struct{ edit, from, to, field string }{
		{"no mask", `"mask_token_id": 49,`, ``, "mask_token_id"},
		{"mask out of vocab", `"mask_token_id": 49`, `"mask_token_id": 50`, "mask_token_id"},
		{"tap out of range", `"target_layer_ids": [
      1,`, `"target_layer_ids": [
      9,`, "target_layer_ids[0]"},
		{"hidden mismatch", `"hidden_size": 32,
  "intermediate_size"`, `"hidden_size": 16,
  "intermediate_size"`, "field hidden_size: 16 differs from dflash_config.target.hidden_size 32, the drafter's recorded target"},
		// Shapes past any allocation (fc.weight alone [4e9, 2 x 4e9]) are refused when read.
		{"sizes", `"hidden_size": 32,
  "intermediate_size"`, `"hidden_size": 4000000000,
  "intermediate_size"`, "fields hidden_size 4000000000, intermediate_size 64, num_hidden_layers 2, num_attention_heads 4, num_key_value_heads 2, head_dim 8, 2 dflash_config.target_layer_ids: 3.2e+19 parameters (111.0 EiB as float32) cannot be allocated (at most 2^46)"},
		{"heads", `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, "num_attention_heads"},
		{"rope", `"rope_scaling": null`, `"rope_scaling": {"rope_type": "yarn", "factor": 4}`, "rope_scaling"},
		// What the drafter cannot run (sliding windows, causal attention) is refused, naming the field.
		{"sliding layer", `"layer_types": [
    "full_attention",`, `"layer_types": [
    "sliding_attention",`, `field layer_types[0] "sliding_attention" (sliding_window null)`},
		{"sliding layer and window", `"sliding_window": null,
  "layer_types": [
    "full_attention",`, `"sliding_window": 2048,
  "layer_types": [
    "sliding_attention",`, `field layer_types[0] "sliding_attention" (sliding_window 2048)`},
		{"sliding flag", `"use_sliding_window": false,
  "sliding_window": null`, `"use_sliding_window": true,
  "sliding_window": 64`, "field use_sliding_window true (sliding_window 64)"},
		{"use_swa", `"causal": false,`, `"causal": false, "use_swa": true, "swa_window_size": 512,`, "field dflash_config.use_swa: true (dflash_config.swa_window_size 512)"},
		{"dflash causal", `"causal": false,`, `"causal": true,`, "field dflash_config.causal: true"},
		{"is_causal", `"block_size": 4,
  "num_target_layers"`, `"is_causal": true, "block_size": 4,
  "num_target_layers"`, "field is_causal: true"},
		{"layer count", `"layer_types": [
    "full_attention",`, `"layer_types": [`, "field layer_types: 1 entries for num_hidden_layers 2"},
		// Transformers 5 spellings beside the older ones must agree.
		{"rope theta", `"rope_theta": 10000,`, `"rope_theta": 10000, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000},`,
			"field rope_parameters.rope_theta 1e+06 differs from rope_theta 10000"},
		{"rope scaling", `"rope_scaling": null,`, `"rope_scaling": {"rope_type": "linear", "factor": 2}, "rope_parameters": {"rope_type": "default"},`,
			`field rope_parameters {"rope_type":"default"} differs from rope_scaling {"rope_type":"linear","factor":2}`},
		{"dtype", `"torch_dtype": "float32",`, `"torch_dtype": "float32", "dtype": "bfloat16",`, `field dtype: "bfloat16" differs from torch_dtype "float32"`},
		{"eagle ids", `"eagle_aux_hidden_state_layer_ids": [
    2,
    4
  ]`, `"eagle_aux_hidden_state_layer_ids": [1, 3]`, "field eagle_aux_hidden_state_layer_ids: [1 3], want dflash_config.target_layer_ids [1 3] plus one, [2 4]"},
		{"mask name", `"mask_token_id": 49,`, `"mask_token_id": 49, "mask_token": "",`, "field dflash_config.mask_token: empty"},
	} {
		s := strings.Replace(string(base), c.from, c.to, 1)
		if s == string(base) {
			t.Fatalf("%s: edit did not apply", c.edit)
		}
		_, err := ParseConfig([]byte(s))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v, want one naming %s", c.edit, err, c.field)
		}
	}
}

func TestSampleAnchors(t *testing.T) {
	seed := testseed.Seed(t)
	mask := []uint8{0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1}
	cands := Candidates(mask, 10) // t<=8 with mask[t] && mask[t+1]
	if want := []int32{2, 3, 6, 7, 8}; !slices.Equal(cands, want) {
		t.Fatalf("candidates %v, want %v", cands, want)
	}
	counts := map[int32]int{}
	const trials = 20000
	for i := 0; i < trials; i++ {
		a := SampleAnchors(rand.New(rand.NewPCG(seed, uint64(i))), cands, 2)
		if len(a) != 2 || a[0] >= a[1] || !slices.Contains(cands, a[0]) || !slices.Contains(cands, a[1]) {
			t.Fatalf("draw %v from %v", a, cands)
		}
		counts[a[0]]++
		counts[a[1]]++
	}
	// Each candidate is in a 2-of-5 draw with probability 2/5.
	for _, c := range cands {
		p := float64(counts[c]) / trials
		if math.Abs(p-0.4) > 0.02 {
			t.Errorf("candidate %d drawn with frequency %.3f, want 0.4", c, p)
		}
	}
	if a := SampleAnchors(rand.New(rand.NewPCG(seed, 3)), cands, 99); !slices.Equal(a, cands) {
		t.Fatalf("asking for more than there are: %v", a)
	}
	if a, b := SampleAnchors(rand.New(rand.NewPCG(seed, 5)), cands, 3), SampleAnchors(rand.New(rand.NewPCG(seed, 5)), cands, 3); !slices.Equal(a, b) {
		t.Fatal("same seed and step gave different anchors")
	}
}

// TestBuildBlocksBruteForce checks the block layout against a direct reading
// of docs/DRAFTER.md §4.3 on random batches.
func TestBuildBlocksBruteForce(t *testing.T) {
	rng := testseed.New(t)
	c := testConfig()
	for trial := 0; trial < 50; trial++ {
		R, S := 1+rng.IntN(3), 5+rng.IntN(20)
		b := &Batch{Rows: R, Len: S, IDs: make([]int32, R*S), LossMask: make([]uint8, R*S), SeqLen: make([]int, R)}
		for r := 0; r < R; r++ {
			b.SeqLen[r] = 1 + rng.IntN(S)
			for i := 0; i < b.SeqLen[r]; i++ {
				b.IDs[r*S+i] = int32(rng.IntN(49))
				if rng.IntN(4) > 0 {
					b.LossMask[r*S+i] = 1
				}
			}
		}
		anchors := SampleBatchAnchors(rng, b, 1+rng.IntN(6))
		bl := BuildBlocks(c, b, anchors)
		w := c.SlotWeights()
		for r := 0; r < R; r++ {
			for j := 0; j < bl.N; j++ {
				live := j < len(anchors[r])
				for s := 0; s < c.BlockSize; s++ {
					i := (r*bl.N+j)*c.BlockSize + s
					var a int
					if live {
						a = int(anchors[r][j])
					}
					wantID := int32(c.MaskTokenID)
					if live && s == 0 {
						wantID = b.IDs[r*S+a]
					}
					valid := live && s >= 1 && a+s < b.SeqLen[r] && b.LossMask[r*S+a+s] == 1
					wantLab, wantW := int32(-1), 0.0
					if valid {
						wantLab, wantW = b.IDs[r*S+a+s], w[s]
					}
					if bl.IDs[i] != wantID || bl.Labels[i] != wantLab || bl.Weights[i] != wantW || int(bl.Pos[i]) != a+s {
						t.Fatalf("row %d block %d slot %d: id %d label %d weight %v pos %d; want %d %d %v %d",
							r, j, s, bl.IDs[i], bl.Labels[i], bl.Weights[i], bl.Pos[i], wantID, wantLab, wantW, a+s)
					}
				}
			}
		}
	}
}

func TestMetricsBruteForce(t *testing.T) {
	bl := &Blocks{Rows: 2, N: 2, B: 4, NumValid: []int32{2, 1},
		Labels:  []int32{-1, 5, 6, 7 /**/, -1, 1, -1, 3 /**/, -1, 2, 2, 2 /**/, -1, -1, -1, -1},
		Weights: []float64{0, 1, .5, .25, 0, 1, 0, .25, 0, 1, .5, .25, 0, 0, 0, 0}}
	pred := []int32{9, 5, 6, 0 /**/, 9, 1, 9, 3 /**/, 9, 0, 2, 2 /**/, 9, 9, 9, 9}
	ce := []float64{0, 1, 2, 3, 0, 4, 0, 5, 0, 6, 7, 8, 0, 0, 0, 0}
	m := NewMetrics(4)
	m.Add(bl, pred, ce)
	// Blocks: (0,0): slots 1,2 right, 3 wrong → τ 3; (0,1): slot 1 right, slot 2 invalid → τ 2;
	// (1,0): slot 1 wrong → τ 1. Row 1's second block is dead.
	if m.Blocks != 3 || math.Abs(m.Acceptance()-2) > 1e-15 {
		t.Fatalf("acceptance %v over %d blocks, want 2 over 3", m.Acceptance(), m.Blocks)
	}
	acc := m.SlotAccuracy()
	if want := []float64{0, 2.0 / 3, 1, 2.0 / 3}; !slices.Equal(acc, want) {
		t.Fatalf("slot accuracy %v, want %v", acc, want)
	}
	wantLoss := (1 + .5*2 + .25*3 + 4 + .25*5 + 6 + .5*7 + .25*8) / (1 + .5 + .25 + 1 + .25 + 1 + .5 + .25)
	if math.Abs(m.Loss()-wantLoss) > 1e-12 {
		t.Fatalf("loss %v, want %v", m.Loss(), wantLoss)
	}
}

// TestConfigReadsBothSpellings reads a config in transformers 5's spelling
// (rope_parameters, dtype, no rope_theta or torch_dtype) and one with both
// spellings agreeing, and checks the values against the 4 spelling's.
func TestConfigReadsBothSpellings(t *testing.T) {
	c := testConfig()
	c.RopeTheta, c.DType = 500000, "bfloat16"
	c.RopeScaling = &tensor.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}
	b, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	rp := map[string]any{"rope_theta": m["rope_theta"]}
	for k, v := range m["rope_scaling"].(map[string]any) {
		rp[k] = v
	}
	v5 := maps.Clone(m)
	delete(v5, "rope_theta")
	delete(v5, "rope_scaling")
	delete(v5, "torch_dtype")
	v5["rope_parameters"], v5["dtype"] = rp, "bfloat16"
	both := maps.Clone(m)
	both["rope_parameters"], both["dtype"] = rp, "bfloat16"
	for name, cfg := range map[string]map[string]any{"4": m, "5": v5, "both": both} {
		raw, _ := json.Marshal(cfg)
		got, err := ParseConfig(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.RopeTheta != c.RopeTheta || got.RopeScaling == nil || *got.RopeScaling != *c.RopeScaling || got.DType != c.DType {
			t.Errorf("%s: theta %g scaling %+v dtype %q, want %g %+v %q", name, got.RopeTheta, got.RopeScaling, got.DType,
				c.RopeTheta, c.RopeScaling, c.DType)
		}
	}
}

// TestConfigExportKeys checks the keys the export adds for the engines:
// eagle_aux_hidden_state_layer_ids = taps + 1, the mask token's name beside
// its id, dflash_config.causal false, rope_scaling null for plain RoPE even
// when the file read spelt it {"rope_type": "default"}.
func TestConfigExportKeys(t *testing.T) {
	c := testConfig()
	c.MaskToken = "<|MASK|>"
	b, _ := c.MarshalJSON()
	in := strings.Replace(string(b), `"rope_scaling": null`, `"rope_scaling": {"rope_type": "default"}`, 1)
	got, err := ParseConfig([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got.MaskToken != "<|MASK|>" || got.RopeScaling != nil {
		t.Fatalf("read back mask %q scaling %+v", got.MaskToken, got.RopeScaling)
	}
	out, _ := got.MarshalJSON()
	var m struct {
		Aux         []int           `json:"eagle_aux_hidden_state_layer_ids"`
		RopeScaling json.RawMessage `json:"rope_scaling"`
		DFlash      map[string]any  `json:"dflash_config"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Aux, []int{2, 4}) || string(m.RopeScaling) != "null" || m.DFlash["mask_token"] != "<|MASK|>" ||
		m.DFlash["causal"] != false || m.DFlash["mask_token_id"] != 49.0 {
		t.Fatalf("export keys: aux %v rope_scaling %s dflash_config %v", m.Aux, m.RopeScaling, m.DFlash)
	}
}

// TestCheckTaps: every tap must be a layer of the target.
func TestCheckTaps(t *testing.T) {
	if err := CheckTaps([]int{0, 3}, 4); err != nil {
		t.Fatal(err)
	}
	for _, taps := range [][]int{{4}, {1, 9}, {-1}} {
		if err := CheckTaps(taps, 4); err == nil || !strings.Contains(err.Error(), "outside the target's 4 layers (0..3)") {
			t.Errorf("taps %v: %v", taps, err)
		}
	}
}

// TestNewAsync checks that NewAsync's drafter, once ready, holds the values
// New makes from the same seed, every parameter bit for bit, and that an
// rng drawn after NewAsync is where New leaves it (the seeds are drawn
// before NewAsync returns).
func TestNewAsync(t *testing.T) {
	c := testConfig()
	r1, r2 := rand.New(rand.NewPCG(7, 9)), rand.New(rand.NewPCG(7, 9))
	want := New[float32](c, r1)
	got, ready := NewAsync[float32](c, r2)
	if r1.Uint64() != r2.Uint64() {
		t.Errorf("the rng after NewAsync is not where New leaves it")
	}
	ready()
	wp, gp := want.Params(), got.Params()
	if len(wp) != len(gp) {
		t.Fatalf("%d parameters, want %d", len(gp), len(wp))
	}
	for i := range wp {
		if !slices.Equal(gp[i].Data(), wp[i].Data()) {
			t.Errorf("parameter %d (%v): values differ from New's", i, wp[i].Shape)
		}
	}
	if n := len(wp[0].Data()); n == 0 || wp[0].Data()[0] == 0 && wp[0].Data()[n-1] == 0 {
		t.Errorf("parameter 0 looks unfilled")
	}
}
