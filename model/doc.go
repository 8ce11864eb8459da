// Package model implements the target language models a drafter learns
// from: Qwen3 and Llama decoders, loaded from HF model directories
// (config.json plus model.safetensors or shards listed in
// model.safetensors.index.json; BF16, F16 and F32 weights converted to
// float32), built from package tensor's ops so that they also train, and
// saved back as HF directories that transformers loads. LoadOn loads onto
// a backend at disk speed: several goroutines read the shards in large
// pieces while the caller (a device's worker) writes each piece as it
// arrives, a bf16 file's bytes straight into a bf16 device copy.
//
// Hidden states follow HF's output_hidden_states indexing for a model of L
// decoder layers: state 0 is the token embeddings; state i for 1 ≤ i < L is
// the residual stream after decoder layer i−1 (0-based), i.e. the input of
// layer i; state L is the final RMSNorm applied to the output of the last
// layer (the input of the LM head). So a drafter "tapping layer i" with
// HF's convention reads Output.States[i].
//
// The forward pass is causal by index within each sequence; positions (for
// RoPE) default to 0..len−1 and may be given explicitly. Generate decodes
// with a KV cache on an inference tape.
package model
