#!/usr/bin/env python3
"""spec_peer.py decodes prompts at batch 1 with z-lab/dflash's public PyTorch decoding loop, the
peer `dflash spec --device cuda` is held against (issue 27: the side by side).

    python3 bench/spec_peer.py --zlab-src DIR --target TARGET_DIR --drafter DRAFTER_DIR \\
        --prompts FILE.jsonl [--max-new 96] [--limit 0] [--dtype bfloat16] [--attn auto] --json OUT.json

z-lab's dflash/model.py is loaded at run time from --zlab-src (nothing of it is kept here), with the
target and the drafter loaded and checked as bench/zlab_load.py does. Each prompt (the messages of a
messages / ShareGPT JSONL line without its final assistant turn, rendered with the target's chat
template and the generation prompt, as `dflash spec` renders it) is decoded greedily with z-lab's
dflash_generate at the drafter's block size, then with block size 1: the target alone, the baseline
z-lab's benchmark.py times. Both stop at config.json's eos_token_id and at --max-new tokens (no
further than the context limit, as `dflash spec`).

Timing: one untimed warm-up of both on the first prompt, then each call timed whole (prefill
included, torch.cuda.synchronize before and after), as `dflash spec` times Generate: tokens/s is the
generated tokens (the prefill's first one included) over those seconds. decode_tokens_per_s is
z-lab's own measure (benchmark.py: 1 / the mean over prompts of time_per_output_token, which leaves
out the target's prefill and the drafter's first call).

Acceptance length, tokens per target verification (accepted drafts + 1), three ways:
  acceptance_length         as `dflash spec` counts it (spec.Stats.AcceptanceLength, over every round
                            of every prompt): z-lab's rounds, less the one it verifies after the
                            last token is in (its loop runs while start < max_length), and the last
                            block cut to the tokens still wanted, as spec.Generate cuts it
  acceptance_length_zlab    z-lab's benchmark.py: the mean over prompts of each prompt's mean
  acceptance_length_blocks  every z-lab round of every prompt, as bench/zlab_load.py reports it

The JSON (--json) has those, acceptance_histogram (index n-1: rounds of length n, counted as dflash
spec counts), rounds, speculative and baseline ({tokens, seconds, tokens_per_s}), speedup,
decode_tokens_per_s ({speculative, baseline}), greedy_matches (prompts whose output equals the
target's own greedy output), dtype, attn, versions, and per prompt: prompt (the rendered text),
prompt_tokens, tokens, baseline_tokens, rounds (z-lab's acceptance lengths), seconds,
baseline_seconds.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zlab_load  # noqa: E402


def spec_rounds(lengths, tokens, max_new, block, stop):
    """The rounds of z-lab's acceptance lengths as spec.Generate counts them: none once max_new
    tokens (already no more than the context limit leaves) or a stop token are out, and each
    limited to the max_new less those out that its block verifies. tokens are z-lab's output, the
    prefill's first token first."""
    out, kept = 1, []
    for a in lengths:
        if out >= max_new or (out <= len(tokens) and tokens[out - 1] in stop):
            break
        kept.append(min(a, block, max_new - out))
        out += a
    return kept


def speed(tokens, seconds):
    """{tokens, seconds, tokens_per_s}, as `dflash spec --json` writes it."""
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds if seconds > 0 else 0.0}


def summarize(per_prompt, block):
    """The report over every prompt's result (the keys main fills in)."""
    kept = [n for p in per_prompt for n in p["spec_rounds"]]
    blocks = [n for p in per_prompt for n in p["rounds"]]
    spec = speed(sum(len(p["tokens"]) for p in per_prompt), sum(p["seconds"] for p in per_prompt))
    base = speed(sum(len(p["baseline_tokens"]) for p in per_prompt), sum(p["baseline_seconds"] for p in per_prompt))
    tpot = lambda key: statistics.mean(p[key] for p in per_prompt)  # noqa: E731
    return {
        "prompts": len(per_prompt),
        "block_size": block,
        "acceptance_length": sum(kept) / len(kept) if kept else 0.0,
        "acceptance_length_zlab": statistics.mean(statistics.mean(p["rounds"]) for p in per_prompt),
        "acceptance_length_blocks": statistics.mean(blocks),
        "acceptance_histogram": [kept.count(n) for n in range(1, block + 1)],
        "rounds": len(kept),
        "rounds_zlab": len(blocks),
        "speculative": spec,
        "baseline": base,
        "speedup": spec["tokens_per_s"] / base["tokens_per_s"] if base["tokens_per_s"] > 0 else 0.0,
        "decode_tokens_per_s": {"speculative": 1 / tpot("time_per_output_token"),
                                "baseline": 1 / tpot("baseline_time_per_output_token")},
        "greedy_matches": sum(p["tokens"] == p["baseline_tokens"] for p in per_prompt),
    }


def attn_impl(name):
    """--attn auto: flash_attention_2 where flash_attn imports, else sdpa (z-lab's benchmark.py)."""
    if name != "auto":
        return name
    try:
        import flash_attn  # noqa: F401
        return "flash_attention_2"
    except ImportError:
        return "sdpa"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zlab-src", required=True, help="directory holding z-lab's dflash/model.py")
    ap.add_argument("--target", required=True, help="HF target directory (config.json, weights, tokenizer)")
    ap.add_argument("--drafter", required=True, help="dflash export directory")
    ap.add_argument("--prompts", required=True, help="JSONL of messages / ShareGPT conversations (the demo's heldout.jsonl)")
    ap.add_argument("--limit", type=int, default=0, help="prompts decoded at most (0: all, as dflash spec --max-prompts 0)")
    ap.add_argument("--max-new", type=int, default=96, help="tokens generated per prompt at most (dflash spec --max-new-tokens)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="dtype of both models (default bfloat16: dflash spec --device cuda computes in bf16)")
    ap.add_argument("--attn", default="auto", choices=["auto", "flash_attention_2", "sdpa", "eager"],
                    help="attention implementation (auto: flash_attention_2 if flash_attn imports, else sdpa)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", required=True, help="write the result as JSON to this file")
    a = ap.parse_args()

    import torch
    import transformers

    zl = zlab_load.start(a.zlab_src, a.device)
    attn = attn_impl(a.attn)
    target, tok, draft = zlab_load.load_models(zl, a.target, a.drafter, getattr(torch, a.dtype), attn, a.device)
    prompts = zlab_load.read_prompts(a.prompts, a.limit)
    if not prompts:
        zlab_load.fail(f"{a.prompts}: no prompts")
    stop = zlab_load.stop_ids(target, tok)
    limit = getattr(target.config, "max_position_embeddings", None) or 1 << 62
    block = draft.block_size
    cuda = a.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def generate(ids, max_new, bs):
        """z-lab's dflash_generate at block size bs, timed whole: (stats, seconds)."""
        sync()
        t0 = time.perf_counter()
        out = zl.dflash_generate(draft, target=target, input_ids=ids, max_new_tokens=max_new, stop_token_ids=stop,
                                 temperature=0.0, block_size=bs, return_stats=True)
        sync()
        return out, time.perf_counter() - t0

    rendered = [zlab_load.render(tok, msgs, a.device) for msgs in prompts]
    for bs in (block, 1):  # warm-up, untimed
        generate(rendered[0][1], a.max_new, bs)
    per_prompt = []
    for text, ids in rendered:
        n = ids.shape[1]
        max_new = min(a.max_new, limit - n)
        out, sec = generate(ids, max_new, block)
        ref, ref_sec = generate(ids, max_new, 1)
        tokens = out.output_ids[0, n:].tolist()
        per_prompt.append({
            "prompt": text, "prompt_tokens": n, "tokens": tokens, "baseline_tokens": ref.output_ids[0, n:].tolist(),
            "rounds": out.acceptance_lengths, "spec_rounds": spec_rounds(out.acceptance_lengths, tokens, max_new, block, stop or []),
            "seconds": sec, "baseline_seconds": ref_sec,
            "time_per_output_token": out.time_per_output_token, "baseline_time_per_output_token": ref.time_per_output_token,
        })
    r = summarize(per_prompt, block)
    r.update({"max_new_tokens": a.max_new, "dtype": a.dtype, "attn": attn, "torch": torch.__version__,
              "transformers": transformers.__version__, "device": torch.cuda.get_device_name() if cuda else a.device,
              "target": a.target, "drafter": a.drafter, "prompts_file": a.prompts, "per_prompt": per_prompt})
    with open(a.json, "w") as f:
        json.dump(r, f, indent=1)
    print(f"z-lab dflash_generate, batch 1, greedy, {a.dtype}, attention {attn}: {r['prompts']} prompts, block {block}")
    print(f"acceptance length {r['acceptance_length']:.3f} as dflash spec counts ({r['rounds']} rounds); "
          f"z-lab's benchmark {r['acceptance_length_zlab']:.3f}; every block {r['acceptance_length_blocks']:.3f} ({r['rounds_zlab']})")
    s, b = r["speculative"], r["baseline"]
    print(f"tokens/s: with the drafter {s['tokens_per_s']:.1f} ({s['tokens']} tokens, {s['seconds']:.2f} s), "
          f"target alone {b['tokens_per_s']:.1f}, speedup {r['speedup']:.2f}x; "
          f"z-lab's decode-only measure {r['decode_tokens_per_s']['speculative']:.1f} and {r['decode_tokens_per_s']['baseline']:.1f}")
    print(f"outputs equal to the target's greedy decoding: {r['greedy_matches']} of {r['prompts']}")


if __name__ == "__main__":
    main()
