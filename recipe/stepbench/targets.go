package stepbench

import (
	"fmt"
	"slices"
	"strings"

	"dflash/model"
)

// qwen3Vocab is the vocabulary of every Qwen3 model (vocab_size in their
// config.json).
const qwen3Vocab = 151936

// targets are the decoder shapes of the Qwen3 models, copied from the
// config.json of each HF repository (huggingface.co/Qwen/Qwen3-0.6B,
// Qwen3-1.7B, Qwen3-4B, Qwen3-8B): hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// tie_word_embeddings; all four have vocab_size 151936, rope_theta 1e6,
// rms_norm_eps 1e-6 and max_position_embeddings 40960. Weights are random.
var targets = map[string]model.Config{
	"qwen3-0.6b": qwen3(1024, 3072, 28, 16, 8, true),
	"qwen3-1.7b": qwen3(2048, 6144, 28, 16, 8, true),
	"qwen3-4b":   qwen3(2560, 9728, 36, 32, 8, true),
	"qwen3-8b":   qwen3(4096, 12288, 36, 32, 8, false),
}

func qwen3(hidden, inter, layers, heads, kvHeads int, tied bool) model.Config {
	return model.Config{Arch: model.Qwen3, VocabSize: qwen3Vocab, HiddenSize: hidden, IntermediateSize: inter,
		NumLayers: layers, NumHeads: heads, NumKVHeads: kvHeads, HeadDim: 128, RMSNormEps: 1e-6, RopeTheta: 1e6,
		MaxPositionEmbeddings: 40960, TieWordEmbeddings: tied, InitializerRange: 0.02}
}

// TargetNames returns the names Target knows, sorted.
func TargetNames() []string {
	var names []string
	for n := range targets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Target returns the shape of the named target (see TargetNames).
func Target(name string) (model.Config, error) {
	c, ok := targets[name]
	if !ok {
		return model.Config{}, fmt.Errorf("--target-config %q: unknown (want one of %s)", name, strings.Join(TargetNames(), ", "))
	}
	return c, nil
}
