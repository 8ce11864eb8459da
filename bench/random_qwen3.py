#!/usr/bin/env python3
"""random_qwen3.py: a random-weight Qwen3 HF model directory, written fast (issue 26's whole-run benchmark).

    python3 bench/random_qwen3.py OUT_DIR [--config qwen3-8b] --tokenizer DIR [--shards 4] [--seed 1]
    python3 bench/random_qwen3.py --config qwen3-8b --print-config     # config.json on stdout, nothing written

OUT_DIR receives what `dflash train --target` reads, and nothing else:
- config.json with the fields of the real model's (huggingface.co/Qwen/Qwen3-8B for qwen3-8b: hidden 4096,
  36 layers, 32 heads, 8 KV heads, head dim 128, intermediate 12288, vocab 151936, rope_theta 1e6,
  untied embeddings, bfloat16), the shapes of bench/qwen3_shapes.py (recipe/stepbench/targets.go's);
  model.ReadConfig parses it;
- model-0000K-of-0000N.safetensors: every tensor under its HF name in bf16, in the order of HF (and of
  model.declare), split into --shards files of about equal size, with model.safetensors.index.json
  (metadata.total_size, weight_map), which safetensors.OpenDir reads;
- tokenizer.json and tokenizer_config.json copied from --tokenizer (tokenizer.LoadDir reads the first,
  chat.Load the chat_template of the second; the script refuses a tokenizer_config.json without one).
  dflash reads no generation_config.json, special_tokens_map.json or vocab files.

Weights are N(0, 0.02) for matrices and embeddings and ones for the norms (as model.New draws them and HF
initialises Qwen3), drawn on the GPU with torch (one generator seeded with --seed) and written one shard
at a time with safetensors: no model is built and nothing is initialised on the CPU. The directory is
written under a temporary name and renamed when complete, so an existing OUT_DIR is whole; it is kept
(and the script says so) unless --force.

--writer stdlib writes the same files without torch: each tensor is a block of 4096 random bf16 values
tiled (ones for norms). It exists for configurations small enough to test on a machine without torch
(--config tiny: the Qwen3 vocabulary, 2 layers of hidden 64).
"""
import argparse
import json
import os
import random
import shutil
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_shapes import (BOS_TOKEN_ID, EOS_TOKEN_ID, HEAD_DIM, MAX_POSITIONS, QWEN3_VOCAB,  # noqa: E402
                          RMS_NORM_EPS, ROPE_THETA, TARGETS)

STD = 0.02
# tiny: the real vocabulary (so the Qwen3 tokenizer fits) around a decoder small enough for a CPU test.
SHAPES = dict(TARGETS, tiny=(64, 128, 2, 4, 2, False))
TINY_HEAD_DIM = 16
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
INDEX_FILE = "model.safetensors.index.json"


def hf_config(name):
    """config.json of the named shape, with the real Qwen3 repositories' fields and values."""
    H, I, L, nh, nkv, tied = SHAPES[name]
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_TOKEN_ID,
        "eos_token_id": EOS_TOKEN_ID,
        "head_dim": TINY_HEAD_DIM if name == "tiny" else HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": STD,
        "intermediate_size": I,
        "max_position_embeddings": MAX_POSITIONS,
        "max_window_layers": L,
        "model_type": "qwen3",
        "num_attention_heads": nh,
        "num_hidden_layers": L,
        "num_key_value_heads": nkv,
        "rms_norm_eps": RMS_NORM_EPS,
        "rope_scaling": None,
        "rope_theta": ROPE_THETA,
        "sliding_window": None,
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": QWEN3_VOCAB,
    }


def tensors(cfg):
    """[(HF name, shape)] in HF order: embeddings; per layer the norms and projections; final norm; LM head."""
    H, I, V, D = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    out = [("model.embed_tokens.weight", (V, H))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (H,)),
                (p + "self_attn.q_proj.weight", (q, H)),
                (p + "self_attn.k_proj.weight", (kv, H)),
                (p + "self_attn.v_proj.weight", (kv, H)),
                (p + "self_attn.q_norm.weight", (D,)),
                (p + "self_attn.k_norm.weight", (D,)),
                (p + "self_attn.o_proj.weight", (H, q)),
                (p + "post_attention_layernorm.weight", (H,)),
                (p + "mlp.gate_proj.weight", (I, H)),
                (p + "mlp.up_proj.weight", (I, H)),
                (p + "mlp.down_proj.weight", (H, I))]
    out.append(("model.norm.weight", (H,)))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, H)))
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def is_norm(name):
    return name.endswith("norm.weight")


def plan_shards(ts, n):
    """Splits ts, in order, into at most n consecutive groups of about equal bytes."""
    total = sum(2 * numel(s) for _, s in ts)
    groups, done = [[]], 0
    for name, shape in ts:
        if groups[-1] and done >= len(groups) * total / n and len(groups) < n:
            groups.append([])
        groups[-1].append((name, shape))
        done += 2 * numel(shape)
    return groups, total


def shard_name(k, n):
    return f"model-{k:05d}-of-{n:05d}.safetensors"


def write_torch(path, group, gen, device):
    """One shard, its tensors drawn on device with gen and written by safetensors."""
    import torch
    from safetensors.torch import save_file
    out = {}
    for name, shape in group:
        t = torch.empty(shape, dtype=torch.bfloat16, device=device)
        t.fill_(1.0) if is_norm(name) else t.normal_(0.0, STD, generator=gen)
        out[name] = t.cpu()
    save_file(out, path, metadata={"format": "pt"})


def bf16(x):
    """The bf16 bits of float x (round to nearest even)."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16


def write_stdlib(path, group, rng):
    """One shard in the safetensors format (8-byte header length, JSON header, data), without torch."""
    block = struct.pack("<4096H", *(bf16(rng.gauss(0.0, STD)) for _ in range(4096)))
    one = struct.pack("<H", bf16(1.0))
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in group:
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + 2 * numel(shape)]}
        off += 2 * numel(shape)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, shape in group:
            n = 2 * numel(shape)
            src = one * (n // 2) if is_norm(name) else block * (n // len(block)) + block[: n % len(block)]
            f.write(src)


def copy_tokenizer(src, dst):
    for f in TOKENIZER_FILES:
        p = os.path.join(src, f)
        if not os.path.isfile(p):
            sys.exit(f"--tokenizer {src}: no {f}")
        shutil.copyfile(p, os.path.join(dst, f))
    tc = json.load(open(os.path.join(dst, "tokenizer_config.json")))
    if not tc.get("chat_template"):
        sys.exit(f"--tokenizer {src}: tokenizer_config.json has no chat_template (dflash reads it)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", help="model directory to write")
    ap.add_argument("--config", default="qwen3-8b", choices=sorted(SHAPES))
    ap.add_argument("--tokenizer", help="directory with the Qwen3 tokenizer.json and tokenizer_config.json")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--writer", default="torch", choices=["torch", "stdlib"])
    ap.add_argument("--device", default="cuda", help="where torch draws the weights")
    ap.add_argument("--force", action="store_true", help="replace OUT_DIR when it exists")
    ap.add_argument("--print-config", action="store_true", help="print config.json and write nothing")
    a = ap.parse_args()
    cfg = hf_config(a.config)
    if a.print_config:
        json.dump(cfg, sys.stdout, indent=2)
        print()
        return
    if not a.out or not a.tokenizer:
        ap.error("OUT_DIR and --tokenizer are required")
    if a.shards < 1:
        ap.error(f"--shards {a.shards}: must be at least 1")
    out = os.path.abspath(a.out)
    if os.path.exists(out) and not a.force:
        print(f"{out} exists: kept (--force replaces it)")
        return
    t0 = time.perf_counter()
    tmp = out + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    copy_tokenizer(a.tokenizer, tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    groups, total = plan_shards(tensors(cfg), a.shards)
    if a.writer == "torch":
        import torch
        gen = torch.Generator(device=a.device).manual_seed(a.seed)
    else:
        rng = random.Random(a.seed)
    weight_map = {}
    for k, group in enumerate(groups, 1):
        name = shard_name(k, len(groups))
        if a.writer == "torch":
            write_torch(os.path.join(tmp, name), group, gen, a.device)
        else:
            write_stdlib(os.path.join(tmp, name), group, rng)
        weight_map.update({n: name for n, _ in group})
        print(f"{name}: {len(group)} tensors, {sum(2 * numel(s) for _, s in group) / 2**30:.2f} GiB, "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    with open(os.path.join(tmp, INDEX_FILE), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.rename(tmp, out)
    params = sum(numel(s) for _, s in tensors(cfg))
    print(f"{out}: {a.config}, {params / 1e9:.2f}B parameters, {total / 2**30:.2f} GiB bf16 in {len(groups)} shards, "
          f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
