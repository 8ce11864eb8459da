#!/usr/bin/env python3
"""zlab_load.py loads a dflash export with z-lab's public DFlash model code and
decodes with z-lab's own decoding loop (issue 28: exports the engines load).

    python3 bench/zlab_load.py --zlab-src DIR --target TARGET_DIR --drafter DRAFTER_DIR \
        [--prompts FILE.jsonl] [--max-new-tokens 96] [--json OUT.json]

--zlab-src is a directory holding z-lab's dflash/model.py (a checkout of
github.com/z-lab/dflash, or a directory with model.py in it); nothing of it is
kept in this repository. The drafter is loaded as z-lab's README does,
DFlashDraftModel.from_pretrained(DRAFTER_DIR), with output_loading_info: a
parameter the export lacks, one it has that the model does not, or a shape
that differs is a load error. The script also checks that every loaded
parameter equals the export's model.safetensors (so nothing was left at its
random initialisation), then decodes each prompt greedily with z-lab's
dflash_generate (the drafter's block size and mask token from its config) and
with block size 1 (the target alone), and prints the acceptance length: mean
and histogram over all blocks, and how many outputs equal the target's greedy
output. Exit status 0 on success, 1 on a load error or a check that fails.

The device has torch and transformers 5 while z-lab pins transformers 4.57;
names z-lab imports from transformers.models.qwen3.modeling_qwen3 that a
version no longer exposes there are provided from where that version keeps
them (printed when it happens).
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def load_zlab(src):
    """Imports z-lab's dflash/model.py from src (a checkout or its dflash/ folder)."""
    import transformers.models.qwen3.modeling_qwen3 as mq

    for cand in (os.path.join(src, "dflash", "model.py"), os.path.join(src, "model.py")):
        if os.path.isfile(cand):
            path = cand
            break
    else:
        fail(f"--zlab-src {src}: no dflash/model.py or model.py there")
    # Names model.py imports from modeling_qwen3 and where other transformers
    # versions define them.
    homes = {
        "GradientCheckpointingLayer": "transformers.modeling_layers",
        "FlashAttentionKwargs": "transformers.modeling_flash_attention_utils",
        "ALL_ATTENTION_FUNCTIONS": "transformers.modeling_utils",
    }
    for name, home in homes.items():
        if not hasattr(mq, name):
            mod = importlib.import_module(home)
            setattr(mq, name, getattr(mod, name))
            print(f"note: transformers.models.qwen3.modeling_qwen3 has no {name}; taken from {home}")
    spec = importlib.util.spec_from_file_location("zlab_dflash_model", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # an import error names what this transformers lacks
        fail(f"importing {path}: {type(e).__name__}: {e}")
    print(f"z-lab model code: {path}")
    return mod


def from_pretrained(cls, path, dtype, **kw):
    """cls.from_pretrained with the dtype keyword this transformers takes."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return cls.from_pretrained(path, **{key: dtype}, **kw)


def check_values(model, drafter_dir):
    """Every parameter of model equals the export's tensor of the same name."""
    import torch
    from safetensors.torch import load_file

    sd = {}
    for name in sorted(os.listdir(drafter_dir)):
        if name.endswith(".safetensors"):
            sd.update(load_file(os.path.join(drafter_dir, name)))
    bad = []
    params = dict(model.named_parameters())
    for name, p in params.items():
        t = sd.get(name)
        if t is None:
            bad.append(f"{name}: not in the export")
        elif tuple(t.shape) != tuple(p.shape):
            bad.append(f"{name}: shape {tuple(p.shape)}, export {tuple(t.shape)}")
        elif not torch.equal(p.detach().cpu(), t.to(p.dtype)):  # the export's values in the model's dtype
            bad.append(f"{name}: values differ from the export")
    for name in sd:
        if name not in params:
            bad.append(f"{name}: in the export, not a parameter of DFlashDraftModel")
    return bad, len(params)


def load_models(zl, target_dir, drafter_dir, dtype, attn, device):
    """Loads the target (transformers) and the drafter (z-lab's DFlashDraftModel, from the dflash
    export) onto device in dtype, checks the drafter's loading and values against the export, and
    returns (target, tokenizer, drafter); a load error or a failed check ends the program."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        target = from_pretrained(AutoModelForCausalLM, target_dir, dtype, attn_implementation=attn).to(device).eval()
        tok = AutoTokenizer.from_pretrained(target_dir)
    except Exception as e:
        fail(f"loading the target {target_dir}: {type(e).__name__}: {e}")
    try:
        draft, info = from_pretrained(zl.DFlashDraftModel, drafter_dir, dtype, attn_implementation=attn,
                                      output_loading_info=True)
    except Exception as e:
        fail(f"DFlashDraftModel.from_pretrained({drafter_dir}): {type(e).__name__}: {e}")
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
    if problems:
        fail(f"DFlashDraftModel.from_pretrained({drafter_dir}): {problems}")
    draft = draft.to(device).eval()
    cfg = draft.config
    print(f"drafter: {cfg.num_hidden_layers} layers, block_size {draft.block_size}, mask_token_id {draft.mask_token_id}, "
          f"target_layer_ids {draft.target_layer_ids}, rope_theta {getattr(cfg, 'rope_theta', None)}, "
          f"rope {getattr(cfg, 'rope_parameters', None) or getattr(cfg, 'rope_scaling', None)}")
    if draft.mask_token_id is None:
        fail("dflash_config.mask_token_id: missing (z-lab's decoding needs it)")
    name = (getattr(cfg, "dflash_config", None) or {}).get("mask_token")
    if name is not None:
        vid = tok.get_vocab().get(name)
        if vid is not None and vid != draft.mask_token_id:
            fail(f"dflash_config.mask_token {name!r} is id {vid} in the target's tokenizer, mask_token_id is {draft.mask_token_id}")
        print(f"mask_token {name!r}: tokenizer id {vid} (None: not in the tokenizer), mask_token_id {draft.mask_token_id}")
    bad, n = check_values(draft, drafter_dir)
    if bad:
        fail("parameters against the export: " + "; ".join(bad[:10]))
    print(f"loaded: {n} parameters, each equal to the export's tensor")
    return target, tok, draft


def start(zlab_src, device):
    """Prints the versions, checks the device and returns z-lab's model module."""
    import torch
    import transformers

    print(f"torch {torch.__version__} transformers {transformers.__version__}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        fail(f"--device {device}: no CUDA device")
    zl = load_zlab(zlab_src)
    if not device.startswith("cuda"):
        zl._cuda_time = time.perf_counter  # its stats timer synchronises CUDA
    return zl


def stop_ids(target, tok):
    """The stop tokens `dflash spec` uses: config.json's eos_token_id (an id or a list), else the
    tokenizer's EOS; None without either."""
    eos = getattr(target.config, "eos_token_id", None)
    if eos is None:
        eos = tok.eos_token_id
    if eos is None:
        return None
    return list(eos) if isinstance(eos, (list, tuple)) else [eos]


def render(tok, msgs, device):
    """Renders msgs with the target's chat template and the generation prompt (the user message
    alone where the tokenizer has no template) and returns the text and its ids, [1, n] on device."""
    try:
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    except Exception as e:
        print(f"note: no chat template ({type(e).__name__}: {e}); the last message's text is the prompt")
        text = msgs[-1]["content"]
    return text, tok(text, return_tensors="pt", add_special_tokens=False).input_ids.to(device)


def read_prompts(path, limit):
    prompts = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            msgs = rec.get("messages") or rec.get("conversations")
            if msgs and "from" in msgs[0]:  # ShareGPT
                role = {"human": "user", "gpt": "assistant", "system": "system"}
                msgs = [{"role": role.get(m["from"], m["from"]), "content": m["value"]} for m in msgs]
            while msgs and msgs[-1]["role"] == "assistant":
                msgs = msgs[:-1]
            if msgs:
                prompts.append(msgs)
            if len(prompts) == limit:
                break
    return prompts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zlab-src", required=True, help="directory holding z-lab's dflash/model.py")
    ap.add_argument("--target", required=True, help="HF target directory (config.json, weights, tokenizer)")
    ap.add_argument("--drafter", required=True, help="dflash export directory")
    ap.add_argument("--prompts", help="JSONL of messages / ShareGPT conversations (default: two built-in prompts)")
    ap.add_argument("--limit", type=int, default=16, help="prompts decoded (default 16)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="dtype of both models (default float32)")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attention implementation (default sdpa)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", help="write the result as JSON to this file")
    a = ap.parse_args()

    import torch
    import transformers

    zl = start(a.zlab_src, a.device)
    dtype = getattr(torch, a.dtype)

    target, tok, draft = load_models(zl, a.target, a.drafter, dtype, a.attn, a.device)

    if a.prompts:
        prompts = read_prompts(a.prompts, a.limit)
    else:
        prompts = [[{"role": "user", "content": "Write a Go function that reverses a slice."}],
                   [{"role": "user", "content": "func main() {"}]]
    if not prompts:
        fail(f"{a.prompts}: no prompts")
    stop = stop_ids(target, tok)
    lengths, equal, new_tokens, results = [], 0, 0, []
    for msgs in prompts:
        _, ids = render(tok, msgs, a.device)
        with torch.inference_mode():
            out = zl.dflash_generate(draft, target=target, input_ids=ids, max_new_tokens=a.max_new_tokens,
                                     stop_token_ids=stop, temperature=0.0, return_stats=True)
            ref = zl.dflash_generate(draft, target=target, input_ids=ids, max_new_tokens=a.max_new_tokens,
                                     stop_token_ids=stop, temperature=0.0, block_size=1)
        same = torch.equal(out.output_ids.cpu(), ref.cpu())
        equal += same
        lengths += out.acceptance_lengths
        new_tokens += out.num_output_tokens
        results.append({"prompt_tokens": ids.shape[1], "new_tokens": out.num_output_tokens,
                        "acceptance_length": statistics.mean(out.acceptance_lengths), "equal_to_target": same})
    B = draft.block_size
    tau = statistics.mean(lengths)
    hist = [lengths.count(b) / len(lengths) for b in range(1, B + 1)]
    print(f"prompts {len(prompts)}, new tokens {new_tokens}, blocks {len(lengths)}")
    print(f"acceptance length (z-lab dflash_generate, greedy): {tau:.3f}")
    print("acceptance histogram (tokens per block 1.." + str(B) + "): " + " ".join(f"{x * 100:.1f}%" for x in hist))
    print(f"outputs equal to the target's greedy decoding: {equal} of {len(prompts)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"acceptance_length": tau, "histogram": hist, "blocks": len(lengths), "new_tokens": new_tokens,
                       "equal_to_target": equal, "prompts": results, "block_size": B,
                       "torch": torch.__version__, "transformers": transformers.__version__}, f, indent=1)
    print("PASS: the export loads in z-lab's DFlashDraftModel and decodes")


if __name__ == "__main__":
    main()
