#!/usr/bin/env python3
"""golden_hf.py writes the HF transformers golden files for package model.

Run on the GPU machine (transformers, torch, safetensors; no network), from
the repository root:

    OUT=/tmp/out python3 scripts/golden_hf.py [--go-saved DIR]

It builds tiny random Qwen3ForCausalLM and LlamaForCausalLM models, saves them
with save_pretrained (Qwen3 as bf16, tied embeddings, also sharded with an
index; Llama as fp16 with llama3 RoPE scaling and q/k/v/o + MLP biases),
runs float32 forwards on CPU (eager attention) on fixed ids and writes the
logits, every hidden state, a forward with explicit position ids and a greedy
generation to <name>.golden.safetensors. Everything goes to
$OUT/testdata/ and is packed as $OUT/golden.tar.gz; unpack it into
model/testdata/ (model/golden_test.go says how).

With --go-saved DIR it also loads every HF directory under DIR that package
model saved (each holds go_logits.safetensors: ids and the logits our forward
computed), runs transformers on the same ids and reports the difference in
testdata/hf_load_check.json; the dirs and transformers' logits on them go to
testdata/gosaved/ so that the Go test checks them again offline.
"""
import argparse
import json
import os
import sys
import tarfile

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

SEQ = 9
BATCH = 2
COMMON = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


def randomize(model, gen):
    """Draws every parameter: weights N(0, 0.05²), biases N(0, 0.05²), norms 1 + N(0, 0.1²)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))


def golden(model, name, out_dir, gen):
    model.eval()
    ids = torch.randint(3, 256, (BATCH, SEQ), generator=gen)
    last = {}
    hook = model.model.layers[-1].register_forward_hook(
        lambda m, i, o: last.__setitem__("out", (o[0] if isinstance(o, tuple) else o).detach().clone()))
    with torch.no_grad():
        res = model(input_ids=ids, output_hidden_states=True)
        hook.remove()
        pos = torch.arange(SEQ).unsqueeze(0).repeat(BATCH, 1) + torch.tensor([[5], [11]])
        res_pos = model(input_ids=ids, position_ids=pos)
        g = model.generate(ids[:1], max_new_tokens=12, do_sample=False, output_scores=True,
                           return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    tokens = g.sequences[0, SEQ:]
    margins = []
    for s in g.scores:
        top = torch.topk(s[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    t = {
        "ids": ids.float(),
        "logits": res.logits.float(),
        "pos": pos.float(),
        "logits_pos": res_pos.logits.float(),
        "layer_out_last": last["out"].float(),
        "gen_tokens": tokens.float(),
        "gen_margins": torch.tensor(margins),
    }
    for i, h in enumerate(res.hidden_states):
        t[f"hidden_states.{i}"] = h.float()
    save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(out_dir, f"{name}.golden.safetensors"))
    print(f"{name}: {len(res.hidden_states)} hidden states, logits {tuple(res.logits.shape)}, "
          f"gen {tokens.tolist()} min margin {min(margins):.3g}", flush=True)


def load32(cls, path):
    """Loads a saved dir in float32. (Casting the in-memory bf16 model back with
    .float() would keep RoPE's inv_freq buffer rounded to bf16; loading computes
    it afresh in float32, as a user's float32 load does.)"""
    try:
        return cls.from_pretrained(path, dtype=torch.float32)
    except TypeError:
        return cls.from_pretrained(path, torch_dtype=torch.float32)


def build(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(20261129)

    v5 = int(transformers.__version__.split(".")[0]) >= 5
    qrope = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}} if v5 else {"rope_theta": 10000.0}
    qcfg = Qwen3Config(**COMMON, tie_word_embeddings=True, **qrope)
    q = Qwen3ForCausalLM(qcfg)
    randomize(q, gen)
    q = q.to(torch.bfloat16)  # saved as bf16; the golden forward loads the bf16-rounded weights
    q.save_pretrained(os.path.join(out_dir, "qwen3-tiny"))
    q.save_pretrained(os.path.join(out_dir, "qwen3-tiny-sharded"), max_shard_size="100KB")
    golden(load32(Qwen3ForCausalLM, os.path.join(out_dir, "qwen3-tiny")), "qwen3-tiny", out_dir, gen)

    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}
    if v5:
        rope_kw = {"rope_parameters": dict(rope, rope_theta=500000.0)}
    else:
        rope_kw = {"rope_theta": 500000.0, "rope_scaling": rope}
    lcfg = LlamaConfig(**COMMON, tie_word_embeddings=False, attention_bias=True, mlp_bias=True, **rope_kw)
    l = LlamaForCausalLM(lcfg)
    print("llama rope_type", l.model.rotary_emb.rope_type, "inv_freq", l.model.rotary_emb.inv_freq.tolist(), flush=True)
    randomize(l, gen)
    l = l.to(torch.float16)
    l.save_pretrained(os.path.join(out_dir, "llama-tiny"))
    golden(load32(LlamaForCausalLM, os.path.join(out_dir, "llama-tiny")), "llama-tiny", out_dir, gen)
    for d in ("qwen3-tiny", "qwen3-tiny-sharded", "llama-tiny"):
        print(d, sorted(os.listdir(os.path.join(out_dir, d))), flush=True)
    print(open(os.path.join(out_dir, "llama-tiny", "config.json")).read(), flush=True)


def check_go_saved(root, td):
    """Loads each HF dir package model saved, compares transformers' logits with
    ours and stores the dir and transformers' logits under td/gosaved/."""
    import shutil
    report = {}
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isfile(os.path.join(d, "config.json")):
            continue
        try:
            m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        except TypeError:
            m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
        m.eval()
        ref = load_file(os.path.join(d, "go_logits.safetensors"))
        ids = ref["ids"].long()
        with torch.no_grad():
            logits = m(input_ids=ids).logits.float()
        shutil.copytree(d, os.path.join(td, "gosaved", name), dirs_exist_ok=True)
        save_file({"ids": ref["ids"].contiguous(), "logits": logits.contiguous()},
                  os.path.join(td, "gosaved", name + ".hf_logits.safetensors"))
        err = (logits - ref["logits"]).abs().max().item()
        scale = ref["logits"].abs().max().item()
        report[name] = {"class": type(m).__name__, "max_abs_err": err, "max_abs_ref": scale,
                        "rel": err / scale, "ok": err / scale <= 1e-4}
        print(name, report[name], flush=True)
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--go-saved", help="directory of HF dirs saved by package model to check")
    args = ap.parse_args()
    out = os.environ.get("OUT", "out")
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    td = os.path.join(out, "testdata")
    build(td)
    if args.go_saved:
        rep = check_go_saved(args.go_saved, td)
        rep["transformers"] = transformers.__version__
        with open(os.path.join(td, "hf_load_check.json"), "w") as f:
            json.dump(rep, f, indent=2, sort_keys=True)
        if not all(v["ok"] for k, v in rep.items() if isinstance(v, dict)):
            print("hf load check FAILED", file=sys.stderr)
    with tarfile.open(os.path.join(out, "golden.tar.gz"), "w:gz") as tf:
        tf.add(td, arcname="testdata")


if __name__ == "__main__":
    main()
