#!/usr/bin/env python3
"""spec_side.py prints `dflash spec` beside bench/spec_peer.py (z-lab's decoding) on the same
prompts, and checks issue 27's bars: acceptance length within --accept-tol of theirs, tokens/s at
batch 1 at least --speed-bar times theirs, and dflash's greedy outputs equal to its target's own.

    python3 bench/spec_side.py --ours SPEC.json --ours-out SPEC_GEN.jsonl --peer PEER.json [--json SIDE.json]

SPEC.json is `dflash spec --json` (with its baseline), SPEC_GEN.jsonl its --out (one line per
prompt: the rendered prompt and the tokens), PEER.json spec_peer.py's --json. The prompts must be
the same: the same count and, prompt by prompt, the same rendered text. Exit status 0 when every
bar is met, 1 otherwise; the last line says PASS or FAIL.
"""

import argparse
import json
import sys


def common_prefix(a, b):
    """The length of the longest common prefix of the sequences a and b."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def compare(ours, gen, peer, tol, bar):
    """The table rows, the failures and the summary of ours (spec --json), gen (its --out lines)
    against peer (spec_peer.py's JSON)."""
    fails = []
    pp = peer["per_prompt"]
    if ours["prompts"] != peer["prompts"] or len(gen) != len(pp):
        fails.append(f"prompts: dflash spec decoded {ours['prompts']} ({len(gen)} lines out), the peer {peer['prompts']}")
    diff = [i for i, (g, p) in enumerate(zip(gen, pp)) if g["prompt"] != p["prompt"]]
    if diff:
        fails.append(f"{len(diff)} prompts rendered differently, the first prompt {diff[0]}: "
                     f"dflash {gen[diff[0]]['prompt']!r}, transformers {pp[diff[0]]['prompt']!r}")
    if ours.get("baseline") is None:
        fails.append("dflash spec ran without its baseline (--baseline=false)")
        ours = dict(ours, baseline={"tokens_per_s": 0.0})

    acc = ours["acceptance_length"] / peer["acceptance_length"] if peer["acceptance_length"] else 0.0
    if abs(acc - 1) > tol:
        fails.append(f"acceptance length: dflash {ours['acceptance_length']:.3f}, z-lab {peer['acceptance_length']:.3f}, "
                     f"ratio {acc:.3f}, not within {tol:.0%}")
    tps = lambda r, k: r[k]["tokens_per_s"]  # noqa: E731
    speed = tps(ours, "speculative") / tps(peer, "speculative") if tps(peer, "speculative") else 0.0
    if speed < bar:
        fails.append(f"tokens/s with the drafter: dflash {tps(ours, 'speculative'):.1f}, z-lab {tps(peer, 'speculative'):.1f}, "
                     f"ratio {speed:.2f}, under {bar:g}x")
    if ours.get("greedy_matches", 0) != ours["prompts"]:
        fails.append(f"dflash's greedy outputs equal its target's on {ours.get('greedy_matches', 0)} of {ours['prompts']} prompts")
    ratio = lambda x, y: f"{x / y:.2f}" if y else "-"  # noqa: E731
    rows = [
        ("acceptance length (tokens/verification)", f"{ours['acceptance_length']:.3f}", f"{peer['acceptance_length']:.3f}",
         f"{acc:.3f}", f"within {tol:.0%}", abs(acc - 1) <= tol),
        ("tokens/s with the drafter, batch 1", f"{tps(ours, 'speculative'):.1f}", f"{tps(peer, 'speculative'):.1f}",
         f"{speed:.2f}", f">= {bar:g}x", speed >= bar),
        ("tokens/s, the target alone", f"{tps(ours, 'baseline'):.1f}", f"{tps(peer, 'baseline'):.1f}",
         ratio(tps(ours, "baseline"), tps(peer, "baseline")), "", None),
        ("speedup over the target alone", f"{ours.get('speedup', 0.0):.2f}x", f"{peer['speedup']:.2f}x", "", "", None),
        ("greedy outputs equal to the target's", f"{ours.get('greedy_matches', 0)}/{ours['prompts']}",
         f"{peer['greedy_matches']}/{peer['prompts']}", "", "all (dflash)", ours.get("greedy_matches", 0) == ours["prompts"]),
    ]
    pairs = [({"tokens": g["tokens"], "baseline_tokens": g.get("baseline_tokens") or []}, p) for g, p in zip(gen, pp)]
    same_spec = sum(g["tokens"] == p["tokens"] for g, p in pairs)
    same_base = sum(g["baseline_tokens"] == p["baseline_tokens"] for g, p in pairs)
    agree = [common_prefix(g["baseline_tokens"], p["baseline_tokens"]) / max(1, min(len(g["baseline_tokens"]), len(p["baseline_tokens"])))
             for g, p in pairs]
    summary = {
        "acceptance_ratio": acc, "tokens_per_s_ratio": speed,
        "ours": {k: ours.get(k) for k in ("acceptance_length", "speculative", "baseline", "speedup", "rounds")},
        "peer": {k: peer[k] for k in ("acceptance_length", "acceptance_length_zlab", "acceptance_length_blocks",
                                      "speculative", "baseline", "speedup", "rounds", "decode_tokens_per_s")},
        "outputs_equal": {"speculative": same_spec, "baseline": same_base, "prompts": len(pairs)},
        "baseline_common_prefix_mean": sum(agree) / len(agree) if agree else 0.0,
        "failures": fails,
    }
    return rows, fails, summary


def print_table(rows, summary, ours, peer, out=sys.stdout):
    """Prints the rows, then the peer's own measures and how the two sides' outputs agree."""
    w = max(len(r[0]) for r in rows)
    print(f"{'':{w}}  {'dflash':>10}  {'z-lab':>10}  {'ratio':>6}  bar", file=out)
    for name, a, b, r, want, ok in rows:
        mark = "" if ok is None else ("ok" if ok else "FAIL")
        print(f"{name:{w}}  {a:>10}  {b:>10}  {r:>6}  {want:<12} {mark}".rstrip(), file=out)
    d, e = peer["decode_tokens_per_s"], summary["outputs_equal"]
    print(f"\nprompts {ours['prompts']}, block {ours['block_size']}, max {ours['max_new_tokens']} new tokens; "
          f"dflash {ours.get('device', '?')}, z-lab {peer['device']} {peer['dtype']} attention {peer['attn']} "
          f"(torch {peer['torch']}, transformers {peer['transformers']})", file=out)
    print(f"rounds: dflash {ours['rounds']}, z-lab {peer['rounds']} as dflash counts ({peer['rounds_zlab']} of its own); "
          f"z-lab's own acceptance measures: benchmark.py {peer['acceptance_length_zlab']:.3f}, "
          f"every block {peer['acceptance_length_blocks']:.3f}", file=out)
    print(f"z-lab's own tokens/s (benchmark.py, prefill left out): {d['speculative']:.1f} with the drafter, "
          f"{d['baseline']:.1f} alone", file=out)
    print(f"outputs of dflash and z-lab token for token equal: speculative {e['speculative']}/{e['prompts']}, "
          f"target alone {e['baseline']}/{e['prompts']} (the two targets' outputs agree on the first "
          f"{summary['baseline_common_prefix_mean']:.0%} of their tokens, mean over prompts)", file=out)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ours", required=True, help="dflash spec --json output")
    ap.add_argument("--ours-out", required=True, help="dflash spec --out JSONL")
    ap.add_argument("--peer", required=True, help="bench/spec_peer.py --json output")
    ap.add_argument("--accept-tol", type=float, default=0.05, help="acceptance length within this fraction of z-lab's")
    ap.add_argument("--speed-bar", type=float, default=2.0, help="tokens/s at least this many times z-lab's")
    ap.add_argument("--json", help="write the comparison as JSON to this file")
    a = ap.parse_args()
    with open(a.ours) as f:
        ours = json.load(f)
    with open(a.peer) as f:
        peer = json.load(f)
    rows, fails, summary = compare(ours, read_jsonl(a.ours_out), peer, a.accept_tol, a.speed_bar)
    print_table(rows, summary, ours, peer)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    for msg in fails:
        print(f"FAIL: {msg}")
    print("FAIL" if fails else "PASS")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
