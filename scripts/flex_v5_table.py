"""flex_v5_table: the v5 table of docs/PERF.md from one device call of
scripts/gpu-attn-v5.sh: dflash's forward v4 / v5 and atomic / deterministic
backward (`dflash bench attention --json`, files ours_<case>_<variant>.json)
beside PyTorch's compiled flex_attention (peer.json, bench/flex_peer.py).

Usage: python3 scripts/flex_v5_table.py DIR
Ratios are PyTorch ms / dflash ms (> 1: dflash faster); PyTorch's GQA times
are the better of enable_gqa and repeated K/V; bwd = f+b - fwd.
"""
import json
import os
import sys

CASES = ["a_causal_d128", "b_dflash"]
VARIANTS = ["v4_atomic", "v5_atomic", "v5_det", "v5_det_b3", "v4_atomic_again"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    d = sys.argv[1]
    peer = {r["case"]: r for r in (load(os.path.join(d, "peer.json")) or [])}
    hdr = ("case", "variant", "fwd ms", "f+b ms", "bwd ms", "torch fwd", "torch f+b", "ratio fwd", "ratio f+b",
           "TFLOP/s fwd", "f+b", "kernels regs/local B")
    rows = []
    for c in CASES:
        p = peer.get(c, {})
        tf, tfb = p.get("fwd_ms"), p.get("fb_ms")
        if p.get("fb_repeat_kv_ms") is not None and tf and tfb:
            tfb, tf = min(tfb, p["fb_repeat_kv_ms"]), min(tf, p["fwd_repeat_kv_ms"])
        for v in VARIANTS:
            o = load(os.path.join(d, f"ours_{c}_{v}.json"))
            if o is None:
                continue
            of, ofb = o.get("forward_ms", 0), o.get("forward_backward_ms", 0)
            pairs, D = o["allowed_pairs"], o["dims"]["HeadDim"]
            f3 = lambda x: f"{x:.3f}" if isinstance(x, (int, float)) and x else "-"
            ratio = lambda t, ours: f"{t / ours:.2f}x" if t and ours else "-"
            tfl = lambda fl, ms: f"{fl * D * pairs / ms / 1e9:.0f}" if ms else "-"
            ks = " ".join(f"{k['name'].replace('flex_', '')}:{k['registers']}/{k['local_bytes']}"
                          for k in o["compile"]["kernels"] if "convert" not in k["name"] and "pre" not in k["name"]
                          and "bm_" not in k["name"])
            rows.append((c, v, f3(of), f3(ofb), f3(ofb - of), f3(tf), f3(tfb), ratio(tf, of), ratio(tfb, ofb),
                         tfl(4, of), tfl(14, ofb), ks))
    if not rows:
        print("no results")
        return
    widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
    line = lambda r: "  ".join(str(x).rjust(widths[i]) if 1 < i < len(hdr) - 1 else str(x).ljust(widths[i])
                               for i, x in enumerate(r))
    print(line(hdr))
    for r in rows:
        print(line(r))
    for c in CASES:
        if peer.get(c, {}).get("error"):
            print(f"  {c}: PyTorch error {peer[c]['error']}")


if __name__ == "__main__":
    main()
