#!/usr/bin/env python3
"""golden_hf_gpu.py writes the HF transformers goldens of package model's GPU test.

Run on the GPU machine (transformers, torch, safetensors), from the repository root:

    python3 scripts/golden_hf_gpu.py --out DIR

It builds two small random targets with head dimensions the GPU attention kernels take
(Qwen3: head_dim 128, tied embeddings, QK-norm; Llama: head_dim 64, q/k/v/o and MLP biases,
llama3 RoPE scaling), saves each with save_pretrained in bf16 under DIR/<name>/, and runs
transformers on CUDA twice on the same ids (2 sequences of 300 tokens, so the causal mask
spans several 128-blocks, one partial): in float32 and in bf16 (the weights as saved,
activations bf16, eager attention). DIR/<name>.golden.safetensors holds the ids and every
hidden state of both runs (hidden_states.<i> and hidden_states_bf16.<i>, float32). The Go
test (TestGPUGoldenHF, DFLASH_HF_GPU_GOLDEN=DIR) compares our CUDA forward with the float32
run and bounds its error by a multiple of transformers' own bf16 error.
"""
import argparse
import json
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from golden_hf import randomize  # scripts/golden_hf.py: weights N(0, 0.05²), norms 1 + N(0, 0.1²)

BATCH, SEQ, VOCAB = 2, 300, 1000


def common(head_dim):
    return dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim,
                max_position_embeddings=1024, rms_norm_eps=1e-6, hidden_act="silu",
                bos_token_id=1, eos_token_id=2, pad_token_id=0)


def load(cls, path, dtype):
    try:
        m = cls.from_pretrained(path, dtype=dtype, attn_implementation="eager")
    except TypeError:
        m = cls.from_pretrained(path, torch_dtype=dtype, attn_implementation="eager")
    return m.to("cuda").eval()


def golden(cls, name, out, gen):
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=gen)
    t = {"ids": ids.float()}
    report = {}
    for suffix, dtype in (("", torch.float32), ("_bf16", torch.bfloat16)):
        m = load(cls, os.path.join(out, name), dtype)
        with torch.no_grad():
            res = m(input_ids=ids.to("cuda"), output_hidden_states=True)
        for i, h in enumerate(res.hidden_states):
            t[f"hidden_states{suffix}.{i}"] = h.float().cpu()
        del m
    for i in range(len([k for k in t if k.startswith("hidden_states.")])):
        a, b = t[f"hidden_states.{i}"], t[f"hidden_states_bf16.{i}"]
        report[i] = float((a - b).abs().max() / a.abs().max())
    save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(out, f"{name}.golden.safetensors"))
    print(f"{name}: transformers bf16 vs float32, max|diff|/max|ref| per hidden state: {json.dumps(report)}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(20261201)
    v5 = int(transformers.__version__.split(".")[0]) >= 5

    qrope = {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}} if v5 else {"rope_theta": 1000000.0}
    q = Qwen3ForCausalLM(Qwen3Config(**common(128), tie_word_embeddings=True, **qrope))
    randomize(q, gen)
    q.to(torch.bfloat16).save_pretrained(os.path.join(args.out, "qwen3-d128"))
    golden(Qwen3ForCausalLM, "qwen3-d128", args.out, gen)

    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}
    rope_kw = {"rope_parameters": dict(rope, rope_theta=500000.0)} if v5 else {"rope_theta": 500000.0, "rope_scaling": rope}
    l = LlamaForCausalLM(LlamaConfig(**common(64), tie_word_embeddings=False, attention_bias=True, mlp_bias=True, **rope_kw))
    randomize(l, gen)
    l.to(torch.bfloat16).save_pretrained(os.path.join(args.out, "llama-d64"))
    golden(LlamaForCausalLM, "llama-d64", args.out, gen)


if __name__ == "__main__":
    main()
