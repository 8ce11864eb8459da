"""flex_ratio: prints the side-by-side table of dflash's GPU flex attention
(`dflash bench attention --device cuda --json`) and PyTorch's compiled
flex_attention (bench/flex_peer.py --json) on the same cases.

Usage: python3 scripts/flex_ratio.py DIR [SUFFIX [CASES]]
SUFFIX (e.g. "_v4") selects ours_<case>SUFFIX.json; CASES is a comma list.
DIR holds ours_<case>.json (cold run: compile + timing), ours_<case>_warm.json
(--compile-only in a second process on the same cache directory: warm from
disk) and peer.json. Ratios are PyTorch time / dflash time (> 1: dflash is
faster). TFLOP/s count allowed (q, kv) pairs only: 4*D per pair forward,
14*D forward+backward, for both sides.
"""
import json
import os
import sys

CASES = ["a_causal_d128", "b_dflash", "c_document", "d_window", "a_causal_d64", "a_causal_d256"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_peer(d):
    """bench/flex_peer.py's rows in DIR/peer.json by case ({} when absent)."""
    return {r["case"]: r for r in (load(os.path.join(d, "peer.json")) or [])}


def torch_ms(p):
    """PyTorch's forward and forward+backward ms of a peer row; for GQA cases
    the better of enable_gqa and repeated K/V."""
    tf, tfb = p.get("fwd_ms"), p.get("fb_ms")
    if p.get("fb_repeat_kv_ms") is not None and tf and tfb:
        tf, tfb = min(tf, p["fwd_repeat_kv_ms"]), min(tfb, p["fb_repeat_kv_ms"])
    return tf, tfb


def f3(x):
    return f"{x:.3f}" if isinstance(x, (int, float)) and x else "-"


def ratio(t, ours):
    return f"{t / ours:.2f}x" if t and ours else "-"


def tflops(o, flops_per_d, ms):
    """Useful TFLOP/s of a pass taking ms over the allowed pairs of our report o."""
    return f"{flops_per_d * o['dims']['HeadDim'] * o['allowed_pairs'] / ms / 1e9:.0f}" if ms else "-"


def print_table(hdr, rows, left):
    """Prints hdr and rows in columns; the columns in left are left-aligned."""
    widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
    line = lambda r: "  ".join(str(x).ljust(widths[i]) if i in left else str(x).rjust(widths[i]) for i, x in enumerate(r))
    print(line(hdr))
    for r in rows:
        print(line(r))


def main():
    d = sys.argv[1]
    sfx = sys.argv[2] if len(sys.argv) > 2 else ""
    cases = sys.argv[3].split(",") if len(sys.argv) > 3 else CASES
    peer = load_peer(d)
    hdr = ("case", "ours fwd", "torch fwd", "ratio", "ours f+b", "torch f+b", "ratio",
           "TFLOP/s fwd", "f+b", "torch fwd", "f+b", "cold ms", "warm ms", "torch 1st s")
    rows = []
    for c in cases:
        o, w, p = load(os.path.join(d, f"ours_{c}{sfx}.json")), load(os.path.join(d, f"ours_{c}{sfx}_warm.json")), peer.get(c, {})
        if o is None:
            rows.append((c, "missing") + ("",) * (len(hdr) - 2))
            continue
        of, ofb = o.get("forward_ms", 0), o.get("forward_backward_ms", 0)
        tf, tfb = torch_ms(p)
        cold = o["compile"]["prepare_ms"]
        warm = w["compile"]["prepare_ms"] if w else None
        warm_s = f"{warm:.1f}" + ("" if w and w["compile"].get("from_disk") else "*") if warm is not None else "-"
        first = (p.get("compile_fwd_s") or 0) + (p.get("compile_fb_s") or 0)
        rows.append((c, f3(of), f3(tf), ratio(tf, of), f3(ofb), f3(tfb), ratio(tfb, ofb),
                     tflops(o, 4, of), tflops(o, 14, ofb), tflops(o, 4, tf), tflops(o, 14, tfb), f"{cold:.0f}", warm_s,
                     f"{first:.1f}" if first else "-"))
    print_table(hdr, rows, left={0})
    print("ratio = PyTorch ms / dflash ms (>1: dflash faster); torch GQA rows use min(enable_gqa, repeat K/V);"
          " cold = compile + load in a fresh cache, warm = load from disk in a new process (* = not from disk);"
          " torch 1st = first fwd call + first fwd+bwd call (compile)")
    o, p = load(os.path.join(d, f"ours_b_dflash{sfx}.json")), peer.get("b_dflash", {})
    if o:
        bm = o["block_mask"]
        print(f"DFlash block mask (512 anchors x 16, ctx 3072): dflash GPU build {bm['gpu_build_ms']:.4f} ms"
              f" (lists match CPU: {bm['lists_match']}), CPU build {bm['cpu_build_ms']:.2f} ms;"
              f" PyTorch compiled create_block_mask {fmt_opt(p.get('create_block_mask_ms'))} ms,"
              f" eager (first call) {fmt_opt(p.get('create_block_mask_eager_s'), 1000)} ms")
        print(f"PyTorch (b) enable_gqa fwd {fmt_opt(p.get('fwd_ms'))} fwd+bwd {fmt_opt(p.get('fb_ms'))} ms;"
              f" repeated K/V fwd {fmt_opt(p.get('fwd_repeat_kv_ms'))} fwd+bwd {fmt_opt(p.get('fb_repeat_kv_ms'))} ms")
    for c in cases:
        o = load(os.path.join(d, f"ours_{c}{sfx}.json"))
        if o:
            bm = o["block_mask"]
            ks = " ".join(f"{k['name']}:{k['registers']}r/{k['local_bytes']}B" for k in o["compile"]["kernels"])
            print(f"  {c}: mask {bm['source']} build {bm['gpu_build_ms']:.4f} ms match={bm['lists_match']};"
                  f" density {o['density']:.3f}; kernels {ks}")
        if peer.get(c, {}).get("error"):
            print(f"  {c}: PyTorch error {peer[c]['error']}")
    # dflash's saved call against flex_attention on the same inputs (--check)
    checked = [(c, peer[c]["check"]) for c in cases if "check" in peer.get(c, {})]
    if checked:
        print("dflash vs PyTorch flex_attention on the same inputs (relative error, bound 1e-2):")
        for c, ck in checked:
            if "error" in ck:
                print(f"  {c}: FAIL {ck['error']}")
                continue
            errs = " ".join(f"{n} {ck[n]:.2e}" for n in ("out", "lse", "dq", "dk", "dv"))
            print(f"  {c}: {'PASS' if ck['pass'] else 'FAIL'} {errs} masked rows agree: {ck['masked_rows_agree']}")


def fmt_opt(x, scale=1.0):
    return f"{x * scale:.3f}" if isinstance(x, (int, float)) else "-"


if __name__ == "__main__":
    main()
