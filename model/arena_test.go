package model

import (
	"fmt"
	"slices"
	"testing"

	"dflash/tensor"
)

// TestParamsArena checks, for every optional part (tied head, biases,
// QK-norm), that Params lists the HF names in HF order (written out here
// independently of build: the order New draws initial weights in) and that
// every parameter, and its gradient, is the view of the model's arena at
// its running offset.
func TestParamsArena(t *testing.T) {
	for _, c := range partConfigs() {
		name := fmt.Sprintf("%s/tied=%v/bias=%v", c.Arch, c.TieWordEmbeddings, c.AttentionBias)
		t.Run(name, func(t *testing.T) {
			m, err := New(c, 1)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"model.embed_tokens.weight"}
			for i := range c.NumLayers {
				add := func(on bool, s ...string) {
					for _, x := range s {
						if on {
							want = append(want, fmt.Sprintf("model.layers.%d.%s", i, x))
						}
					}
				}
				add(true, "input_layernorm.weight", "self_attn.q_proj.weight")
				add(c.AttentionBias, "self_attn.q_proj.bias")
				add(true, "self_attn.k_proj.weight")
				add(c.AttentionBias, "self_attn.k_proj.bias")
				add(true, "self_attn.v_proj.weight")
				add(c.AttentionBias, "self_attn.v_proj.bias")
				add(c.Arch == Qwen3, "self_attn.q_norm.weight", "self_attn.k_norm.weight")
				add(true, "self_attn.o_proj.weight")
				add(c.AttentionBias, "self_attn.o_proj.bias")
				mlpBias := c.MLPBias && c.Arch == Llama
				add(true, "post_attention_layernorm.weight", "mlp.gate_proj.weight")
				add(mlpBias, "mlp.gate_proj.bias")
				add(true, "mlp.up_proj.weight")
				add(mlpBias, "mlp.up_proj.bias")
				add(true, "mlp.down_proj.weight")
				add(mlpBias, "mlp.down_proj.bias")
			}
			want = append(want, "model.norm.weight")
			if !c.TieWordEmbeddings {
				want = append(want, "lm_head.weight")
			}
			var got []string
			for _, p := range m.Params() {
				got = append(got, p.Name)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("Params order\n got %v\nwant %v", got, want)
			}
			a := m.Arena()
			a.EnsureGrad()
			off := 0
			for _, p := range m.Params() {
				if &p.Data()[0] != &tensor.HostData(a.Values, "values")[off] || &p.Grad()[0] != &tensor.HostData(a.Grad, "grad")[off] {
					t.Fatalf("%s is not the arena's range at offset %d", p.Name, off)
				}
				off += p.Numel()
			}
			if off != a.Values.Len() || off != m.NumParams() {
				t.Fatalf("parameters cover %d elements, arena %d, NumParams %d", off, a.Values.Len(), m.NumParams())
			}
		})
	}
}
