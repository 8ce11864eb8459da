"""flex_peer: the PyTorch side of the GPU flex-attention benchmark.

Builds the issue's cases (inputs, masks as PyTorch mask_mods and as dense
float64 references) and times torch.compile(flex_attention) on them. Run
alone (scripts/gpu-attn.sh and gpu-attn-quick.sh do) it prints
one JSON object per case and, with --json FILE, writes them all to FILE;
--cases a,b selects cases by name. With --check DIR, a case whose call
dflash saved as DIR/ours_<case>.safetensors (`dflash bench attention --save`)
is also run through compiled flex_attention on those very inputs and mask
tensors, and the relative errors of out, lse, dq, dk and dv against dflash's
go into the case's "check" field (bound 1e-2: both sides are bf16/fp16
results). --check-only skips the timings and the cases with nothing saved.
"""
import math
import os
import sys

import torch


def dflash_anchors(n_anchor, ctx, gen):
    """Sorted distinct anchor positions in [1, ctx), as the trainer samples."""
    perm = torch.randperm(ctx - 1, generator=gen)[:n_anchor] + 1
    return torch.sort(perm).values.to(torch.int32)


class Case:
    """One benchmark or test case: shapes, mask name and its parameters."""

    def __init__(self, name, mask, B, Hq, Hkv, Lq, Lkv, D, dtype=torch.bfloat16,
                 window=0, doc_len=0, ctx=0, blk=16, n_anchor=0, n_valid=None, seed=0):
        self.name, self.mask = name, mask
        self.B, self.Hq, self.Hkv, self.Lq, self.Lkv, self.D = B, Hq, Hkv, Lq, Lkv, D
        self.dtype, self.window, self.doc_len = dtype, window, doc_len
        self.ctx, self.blk, self.n_anchor = ctx, blk, n_anchor
        self.n_valid = n_anchor if n_valid is None else n_valid
        gen = torch.Generator().manual_seed(seed)
        self.anchors = self.starts = None
        self.docs = None
        if mask == "dflash":
            a = dflash_anchors(n_anchor, ctx, gen)
            self.anchors = a.view(1, -1).repeat(B, 1).contiguous()
            # flex.DFlashStarts: the first context position each block sees
            # (its packed conversation's start); 0, one conversation a row.
            self.starts = torch.zeros_like(self.anchors)
        if mask == "document":
            ids = torch.arange(Lq, dtype=torch.int32) // doc_len
            self.docs = ids.view(1, -1).repeat(B, 1).contiguous()

    def mask_mod(self, dev):
        """The PyTorch mask_mod for torch flex_attention."""
        if self.mask == "causal":
            return lambda b, h, q, kv: kv <= q
        if self.mask == "window":
            w = self.window
            return lambda b, h, q, kv: (kv <= q) & (q - kv < w)
        if self.mask == "document":
            docs = self.docs.to(dev)
            return lambda b, h, q, kv: (docs[b, q] == docs[b, kv]) & (kv <= q)
        if self.mask == "dflash":
            anchors, starts = self.anchors.to(dev), self.starts.to(dev)
            ctx, blk, nv = self.ctx, self.blk, self.n_valid

            def m(b, h, q, kv):
                j = q // blk
                a = anchors[b, j]
                in_ctx = (kv < ctx) & (kv >= starts[b, j]) & (kv < a)
                own = (kv >= ctx) & ((kv - ctx) // blk == j)
                return (j < nv) & (in_ctx | own)
            return m
        raise ValueError(self.mask)

    def dense(self, dev):
        """The dense [B, Lq, Lkv] bool mask (tests and block-mask building)."""
        q = torch.arange(self.Lq, device=dev).view(1, -1, 1)
        kv = torch.arange(self.Lkv, device=dev).view(1, 1, -1)
        if self.mask == "causal":
            m = kv <= q
        elif self.mask == "window":
            m = (kv <= q) & (q - kv < self.window)
        elif self.mask == "document":
            d = self.docs.to(dev).long()
            m = (d[:, :, None] == d[:, None, :]) & (kv <= q)
        elif self.mask == "dflash":
            a, s = self.anchors.to(dev).long(), self.starts.to(dev).long()
            j = q // self.blk
            blocks = torch.arange(self.Lq, device=dev) // self.blk
            aj = a[:, blocks].view(self.B, -1, 1)
            sj = s[:, blocks].view(self.B, -1, 1)
            m = (j < self.n_valid) & (((kv < self.ctx) & (kv >= sj) & (kv < aj)) |
                                     ((kv >= self.ctx) & ((kv - self.ctx) // self.blk == j)))
        return m.expand(self.B, self.Lq, self.Lkv)

    def inputs(self, dev, seed=1):
        g = torch.Generator(device=dev).manual_seed(seed)
        mk = lambda *s: torch.randn(*s, device=dev, generator=g, dtype=torch.float32).to(self.dtype)
        q = mk(self.B, self.Hq, self.Lq, self.D)
        k = mk(self.B, self.Hkv, self.Lkv, self.D)
        v = mk(self.B, self.Hkv, self.Lkv, self.D)
        do = mk(self.B, self.Hq, self.Lq, self.D)
        return q, k, v, do

    def useful_flops(self, dense_mask):
        """4*D FLOPs per allowed (q, kv) pair per head, forward."""
        return 4.0 * self.D * self.Hq * float(dense_mask.sum().item())


def bench_cases():
    """The issue's benchmark cases."""
    return [
        Case("a_causal_d128", "causal", 4, 16, 16, 4096, 4096, 128),
        Case("b_dflash", "dflash", 1, 32, 8, 512 * 16, 3072 + 512 * 16, 128,
             ctx=3072, blk=16, n_anchor=512),
        Case("c_document", "document", 1, 16, 16, 8192, 8192, 128, doc_len=1024),
        Case("d_window", "window", 1, 16, 16, 16384, 16384, 128, window=1024),
        Case("a_causal_d64", "causal", 4, 16, 16, 4096, 4096, 64),
        Case("a_causal_d256", "causal", 4, 16, 16, 4096, 4096, 256),
    ]


# FLEX_PEER_ITERS / FLEX_PEER_FB_ITERS shrink the timed runs (a short device
# call); FLEX_PEER_NO_CBM=1 skips timing compiled create_block_mask.
ITERS = int(os.environ.get("FLEX_PEER_ITERS", "30"))
FB_ITERS = int(os.environ.get("FLEX_PEER_FB_ITERS", "20"))


def median_ms(fn, iters=30, warm=5):
    iters = min(iters, ITERS)
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def torch_flex(case, dev, q, k, v, do):
    """Times compiled flex_attention: returns (fwd_ms, fwdbwd_ms, out, lse)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    # Each case compiles afresh: without the reset, several cases in one process
    # pass dynamo's recompile limit and flex_attention falls back to the dense path.
    torch._dynamo.reset()
    torch._dynamo.config.recompile_limit = 64
    fa = torch.compile(flex_attention)
    bm = create_block_mask(case.mask_mod(dev), case.B, None, case.Lq, case.Lkv, device=dev)
    gqa = case.Hq != case.Hkv
    out, lse = fa(q, k, v, block_mask=bm, enable_gqa=gqa, return_lse=True)
    fwd = median_ms(lambda: fa(q, k, v, block_mask=bm, enable_gqa=gqa))
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

    def fb():
        o = fa(qg, kg, vg, block_mask=bm, enable_gqa=gqa)
        o.backward(do)
    fb_ms = median_ms(fb, iters=FB_ITERS)
    return fwd, fb_ms, out, lse


def peer_times(case, dev):
    """Times compiled flex_attention on case like torch_flex, and also: the
    first calls (compile, cold: Inductor's caches are empty on a fresh
    machine), fwd+bwd with K/V repeated instead of enable_gqa for GQA cases,
    and compiled create_block_mask for the DFlash case. Returns a dict."""
    import time
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    torch._dynamo.reset()
    torch._dynamo.config.recompile_limit = 64
    q, k, v, do = case.inputs(dev)
    res = {"case": case.name}
    fa = torch.compile(flex_attention)
    t = time.time()
    bm = create_block_mask(case.mask_mod(dev), case.B, None, case.Lq, case.Lkv, device=dev)
    res["create_block_mask_eager_s"] = time.time() - t
    gqa = case.Hq != case.Hkv
    t = time.time()
    fa(q, k, v, block_mask=bm, enable_gqa=gqa)
    torch.cuda.synchronize()
    res["compile_fwd_s"] = time.time() - t
    res["fwd_ms"] = median_ms(lambda: fa(q, k, v, block_mask=bm, enable_gqa=gqa))
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))

    def fb():
        o = fa(qg, kg, vg, block_mask=bm, enable_gqa=gqa)
        o.backward(do)
    t = time.time()
    fb()
    torch.cuda.synchronize()
    res["compile_fb_s"] = time.time() - t
    res["fb_ms"] = median_ms(fb, iters=FB_ITERS)
    if gqa:
        G = case.Hq // case.Hkv

        def fb_rep():
            o = fa(qg, kg.repeat_interleave(G, 1), vg.repeat_interleave(G, 1), block_mask=bm)
            o.backward(do)
        res["fb_repeat_kv_ms"] = median_ms(fb_rep, iters=FB_ITERS)
        res["fwd_repeat_kv_ms"] = median_ms(
            lambda: fa(q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1), block_mask=bm))
    if case.mask == "dflash" and os.environ.get("FLEX_PEER_NO_CBM") != "1":
        cbm = torch.compile(create_block_mask)
        mm = case.mask_mod(dev)
        res["create_block_mask_ms"] = median_ms(
            lambda: cbm(mm, case.B, None, case.Lq, case.Lkv, device=dev), iters=30)
    return res


CHECK_BOUND = 1e-2


def check_saved(case, path, dev):
    """Runs compiled flex_attention forward and backward on the inputs of a
    call dflash saved at path and returns the relative Frobenius errors of
    dflash's out, lse (finite rows), dq, dk, dv against it."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    t = load_file(path, device=dev)
    want = {"batch": case.B, "heads_q": case.Hq, "heads_kv": case.Hkv, "len_q": case.Lq,
            "len_kv": case.Lkv, "head_dim": case.D}
    for k, v in want.items():
        if int(meta[k]) != v:
            raise ValueError(f"{path}: {k} {meta[k]} does not match case {case.name} ({v})")
    if meta["mask"] != case.mask:
        raise ValueError(f"{path}: mask {meta['mask']} does not match case {case.name} ({case.mask})")
    # The saved mask tensors replace the case's own draws.
    if "anchors" in t:
        case.anchors = t["anchors"].to(torch.int32).cpu()
        case.starts = t["block_starts"].to(torch.int32).cpu()
        case.n_valid = int(meta["n_valid"])
    if "doc_ids" in t:
        case.docs = t["doc_ids"].to(torch.int32).cpu()
    torch._dynamo.reset()
    fa = torch.compile(flex_attention)
    bm = create_block_mask(case.mask_mod(dev), case.B, None, case.Lq, case.Lkv, device=dev)
    q, k, v = (t[n].detach().requires_grad_() for n in ("q", "k", "v"))
    out, lse = fa(q, k, v, block_mask=bm, enable_gqa=case.Hq != case.Hkv, return_lse=True)
    out.backward(t["dout"])

    def rel(ours, ref):
        ours, ref = ours.double(), ref.double()
        return float((ours - ref).norm() / ref.norm().clamp_min(1e-30))
    fin = torch.isfinite(lse)
    errs = {"out": rel(t["out"], out), "dq": rel(t["dq"], q.grad), "dk": rel(t["dk"], k.grad),
            "dv": rel(t["dv"], v.grad), "lse": rel(t["lse"][fin], lse[fin])}
    errs["masked_rows_agree"] = bool((torch.isfinite(t["lse"]) == fin).all())
    errs["pass"] = errs["masked_rows_agree"] and all(
        errs[n] <= CHECK_BOUND for n in ("out", "lse", "dq", "dk", "dv"))
    return errs


if __name__ == "__main__":
    import json
    dev = "cuda"
    out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    only = sys.argv[sys.argv.index("--cases") + 1].split(",") if "--cases" in sys.argv else None
    check = sys.argv[sys.argv.index("--check") + 1] if "--check" in sys.argv else None
    results = []
    for c in bench_cases():
        if only and c.name not in only:
            continue
        saved = os.path.join(check, f"ours_{c.name}.safetensors") if check else None
        if "--check-only" in sys.argv:
            if not (saved and os.path.exists(saved)):
                continue
            r = {"case": c.name}
        else:
            try:
                r = peer_times(c, dev)
            except Exception as ex:  # noqa: BLE001
                r = {"case": c.name, "error": f"{type(ex).__name__}: {str(ex)[:300]}"}
        if saved and os.path.exists(saved):
            try:
                r["check"] = check_saved(c, saved, dev)
            except Exception as ex:  # noqa: BLE001
                r["check"] = {"error": f"{type(ex).__name__}: {str(ex)[:300]}", "pass": False}
        print(json.dumps(r), flush=True)
        results.append(r)
        if out:
            with open(out, "w") as f:
                json.dump(results, f, indent=1)
    sys.exit(0)
