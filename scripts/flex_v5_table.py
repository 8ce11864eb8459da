"""flex_v5_table: the v5 table of docs/PERF.md from one device call of
scripts/gpu-attn-v5.sh: dflash's forward v4 / v5 and atomic / deterministic
backward (`dflash bench attention --json`, files ours_<case>_<variant>.json)
beside PyTorch's compiled flex_attention (peer.json, bench/flex_peer.py).

Usage: python3 scripts/flex_v5_table.py DIR
Ratios are PyTorch ms / dflash ms (> 1: dflash faster); PyTorch's GQA times
are the better of enable_gqa and repeated K/V; bwd = f+b - fwd.
"""
import os
import sys

from flex_ratio import f3, load, load_peer, print_table, ratio, tflops, torch_ms

CASES = ["a_causal_d128", "b_dflash"]
VARIANTS = ["v4_atomic", "v5_atomic", "v5_det", "v5_det_b3", "v4_atomic_again"]


def main():
    d = sys.argv[1]
    peer = load_peer(d)
    hdr = ("case", "variant", "fwd ms", "f+b ms", "bwd ms", "torch fwd", "torch f+b", "ratio fwd", "ratio f+b",
           "TFLOP/s fwd", "f+b", "kernels regs/local B")
    rows = []
    for c in CASES:
        tf, tfb = torch_ms(peer.get(c, {}))
        for v in VARIANTS:
            o = load(os.path.join(d, f"ours_{c}_{v}.json"))
            if o is None:
                continue
            of, ofb = o.get("forward_ms", 0), o.get("forward_backward_ms", 0)
            ks = " ".join(f"{k['name'].replace('flex_', '')}:{k['registers']}/{k['local_bytes']}"
                          for k in o["compile"]["kernels"] if "convert" not in k["name"] and "pre" not in k["name"]
                          and "bm_" not in k["name"])
            rows.append((c, v, f3(of), f3(ofb), f3(ofb - of), f3(tf), f3(tfb), ratio(tf, of), ratio(tfb, ofb),
                         tflops(o, 4, of), tflops(o, 14, ofb), ks))
    if not rows:
        print("no results")
        return
    print_table(hdr, rows, left={0, 1, len(hdr) - 1})
    for c in CASES:
        if peer.get(c, {}).get("error"):
            print(f"  {c}: PyTorch error {peer[c]['error']}")


if __name__ == "__main__":
    main()
