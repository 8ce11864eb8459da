"""flex_gpu_check: tests and times dflash's flex attention kernels on the GPU
without Go: compiles kernels/flex_*.cu with NVRTC (through CuPy), launches
them through the driver API, compares with a float64 PyTorch reference on
random inputs (GQA, odd lengths, fully masked rows, poisoned outputs), then
times them against compiled PyTorch flex_attention (bench/flex_peer.py) on the
issue's cases and prints the ratio table.

Usage: python3 scripts/flex_gpu_check.py [--skip-bench] [--budget SECONDS]
"""
import ctypes
import math
import os
import re
import sys
import time

import cupy
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import flex_peer  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
KDIR = os.path.join(ROOT, "kernels")
T0 = time.time()

# Programs read FlexArgs slots (see flex_common.cuh): slot 0 a tensor pointer,
# slots 1-2 two 32-bit words each (flex_lo / flex_hi).
PROGRAMS = {
    "causal": "return kv <= q;",
    "window": "return kv <= q && q - kv < flex_lo(A, 1);",
    "document": """const int *d = (const int *)A.s[0];
  long long L = flex_lo(A, 1);
  return kv <= q && d[b * L + q] == d[b * L + kv];""",
    "dflash": """int blk = flex_hi(A, 1);
  int j = q / blk;
  if (j >= flex_lo(A, 2)) return false;
  int ctx = flex_lo(A, 1);
  if (kv < ctx) return kv < ((const int *)A.s[0])[b * flex_hi(A, 2) + j];
  return (kv - ctx) / blk == j;""",
}
NSLOTS = 3


def source(fname, mask, D, fp16, group, extra=""):
    common = open(os.path.join(KDIR, "flex_common.cuh")).read()
    prog = ("#define FLEX_PROGRAM_DEFINED\n"
            "__device__ __forceinline__ bool flex_mask(const FlexArgs &A, int b, int h, int q, int kv) {\n  "
            + PROGRAMS[mask] + "\n}\n"
            "__device__ __forceinline__ float flex_score(const FlexArgs &A, float s, int b, int h, int q, int kv) { return s; }\n"
            "__device__ __forceinline__ float flex_score_grad(const FlexArgs &A, float s, float g, int b, int h, int q, int kv) { return g; }\n")
    common = re.sub(r"// @flex-program-begin.*?// @flex-program-end", prog, common, flags=re.S)
    body = open(os.path.join(KDIR, fname)).read().replace('#include "flex_common.cuh"', common)
    slots = ", ".join(f"unsigned long long fa{i}" for i in range(NSLOTS))
    head = (f"#define FLEX_D {D}\n#define FLEX_FP16 {int(fp16)}\n#define FLEX_GROUP {group}\n{extra}\n"
            f"#define FLEX_NARGS {NSLOTS}\n#define FLEX_ARG_PARAMS , {slots}\n"
            f"#define FLEX_ARG_VALUES {', '.join(f'fa{i}' for i in range(NSLOTS))}\n")
    return head + body


class FlexArgs:
    """The FlexArgs slots, passed as NSLOTS 8-byte kernel parameters."""

    def __init__(self):
        self.s = [0] * NSLOTS

    def words(self, i, lo, hi=0):
        self.s[i] = (lo & 0xffffffff) | ((hi & 0xffffffff) << 32)


_mods = {}


def module(fname, mask, D, fp16, group, extra=""):
    key = (fname, mask, D, fp16, group, extra)
    if key not in _mods:
        t = time.time()
        m = cupy.RawModule(code=source(fname, mask, D, fp16, group, extra),
                           options=("-std=c++17", "--gpu-architecture=sm_90"), backend="nvrtc")
        m.compile()
        _mods[key] = m
        log(f"  compiled {fname} mask={mask} D={D} fp16={fp16} G={group} {extra!r} in {time.time()-t:.2f}s")
    return _mods[key]


def launch(mod, name, grid, block, smem, args):
    k = mod.get_function(name)
    ptr = k.kernel.ptr if hasattr(k, "kernel") else k.ptr
    if smem > 48 * 1024:
        cupy.cuda.driver.funcSetAttribute(ptr, 8, smem)
    objs = []
    for a in args:
        if isinstance(a, torch.Tensor):
            objs.append(ctypes.c_void_p(a.data_ptr()))
        elif isinstance(a, FlexArgs):
            objs.extend(ctypes.c_ulonglong(x) for x in a.s)
        elif isinstance(a, float):
            objs.append(ctypes.c_float(a))
        elif isinstance(a, tuple) and a[0] == "i64":
            objs.append(ctypes.c_longlong(a[1]))
        elif a is None:
            objs.append(ctypes.c_void_p(0))
        else:
            objs.append(ctypes.c_int(int(a)))
    params = (ctypes.c_void_p * len(objs))(*[ctypes.addressof(o) for o in objs])
    cupy.cuda.driver.launchKernel(ptr, grid[0], grid[1], grid[2], block, 1, 1, smem,
                                  torch.cuda.current_stream().cuda_stream,
                                  ctypes.addressof(params), 0)


def log(msg):
    print(f"[{time.time()-T0:6.1f}s] {msg}", flush=True)


def block_lists(dense, bq, bkv):
    """From a dense [B, Lq, Lkv] mask: partial/full kv lists per q block and
    the transposed q lists per kv block (int32, head-broadcast)."""
    B, Lq, Lkv = dense.shape
    nqb, nkvb = -(-Lq // bq), -(-Lkv // bkv)
    pa = torch.zeros(B, nqb * bq, nkvb * bkv, dtype=torch.bool, device=dense.device)
    pa[:, :Lq, :Lkv] = dense
    pl = torch.ones_like(pa)
    pl[:, :Lq, :Lkv] = dense
    anyb = pa.view(B, nqb, bq, nkvb, bkv).any(4).any(2)
    allb = pl.view(B, nqb, bq, nkvb, bkv).all(4).all(2)
    full = anyb & allb
    part = anyb & ~allb

    def lists(m):  # m [B, R, C] -> num [B, R], idx [B, R, C]
        num = m.sum(-1).to(torch.int32)
        idx = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return num.contiguous(), idx.contiguous()
    kn, ki = lists(part)
    fn, fi = lists(full)
    qn, qi = lists(part.transpose(1, 2))
    fqn, fqi = lists(full.transpose(1, 2))
    return dict(nqb=nqb, nkvb=nkvb, kv_num=kn, kv_idx=ki, full_num=fn, full_idx=fi,
                q_num=qn, q_idx=qi, fullq_num=fqn, fullq_idx=fqi,
                density=float(anyb.float().mean()))


def fargs(case, dev):
    a = FlexArgs()
    keep = []
    if case.mask == "window":
        a.words(1, case.window)
    elif case.mask == "document":
        t = case.docs.to(dev)
        keep.append(t)
        a.words(1, case.Lq)
        a.s[0] = t.data_ptr()
    elif case.mask == "dflash":
        t = case.anchors.to(dev)
        keep.append(t)
        a.words(1, case.ctx, case.blk)
        a.words(2, case.n_valid, t.shape[1])
        a.s[0] = t.data_ptr()
    return a, keep


class Flex:
    """dflash's kernels for one case."""

    def __init__(self, case, dev, bq=128, bkv=128, extra="", bn=None):
        self.c, self.dev = case, dev
        fp16 = case.dtype == torch.float16
        G = case.Hq // case.Hkv
        self.mf = module("flex_fwd.cu", case.mask, case.D, fp16, G, extra)
        self.mb = module("flex_bwd.cu", case.mask, case.D, fp16, G)
        self.bm = block_lists(case.dense(dev), bq, bkv)
        self.args, self.keep = fargs(case, dev)
        D = case.D
        bn = bn or (32 if D >= 256 else (128 if D == 128 else 64))
        bmq = 32 if D >= 256 else 64
        self.fsmem = (bq + 4 * bn) * D * 2 + 8 * self.bm["nkvb"]
        self.bsmem = (2 * bkv * D + 4 * bmq * D + bmq * bkv) * 2 + 4 * bmq * 4 + 8 * self.bm["nqb"]
        self.bq, self.bkv = bq, bkv
        self.scale = 1.0 / math.sqrt(D)

    def forward(self, q, k, v, out, lse):
        c, bm = self.c, self.bm
        launch(self.mf, "flex_fwd", (bm["nqb"], c.Hq, c.B), (self.bq // 16) * 32, self.fsmem,
               [q, k, v, out, lse, bm["kv_num"], bm["kv_idx"], bm["full_num"], bm["full_idx"],
                c.Hq, c.Lq, c.Lkv, c.B, 1, bm["nqb"], bm["nkvb"], self.scale, self.args])

    def backward(self, q, k, v, out, lse, do, dq, dk, dv, dlt, dqacc):
        c, bm, D = self.c, self.bm, self.c.D
        rows = c.B * c.Hq * c.Lq
        rpb = 256 // (D // 8)
        launch(self.mb, "flex_bwd_pre", (-(-rows // rpb), 1, 1), 256, 0,
               [out, do, dlt, dqacc, ("i64", rows)])
        launch(self.mb, "flex_bwd_dkdv", (bm["nkvb"], c.Hkv, c.B), (self.bkv // 16) * 32, self.bsmem,
               [q, k, v, do, lse, dlt, dk, dv, dqacc, bm["q_num"], bm["q_idx"], bm["fullq_num"],
                bm["fullq_idx"], c.Hq, c.Lq, c.Lkv, c.B, 1, bm["nqb"], bm["nkvb"], self.scale, self.args])
        n = rows * D
        launch(self.mb, "flex_bwd_dq_convert", (-(-n // 512), 1, 1), 256, 0, [dqacc, dq, ("i64", n)])


def reference(case, q, k, v, do, dense):
    """float64 dense reference: out, lse (-inf for empty rows), dq, dk, dv."""
    G = case.Hq // case.Hkv
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    kr, vr = kd.repeat_interleave(G, 1), vd.repeat_interleave(G, 1)
    s = qd @ kr.transpose(-1, -2) / math.sqrt(case.D)
    m = dense[:, None]
    empty = ~m.any(-1, keepdim=True)
    s = s.masked_fill(~m & ~empty, float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.where(m, torch.exp(s - lse), torch.zeros_like(s))
    out = p @ vr
    out.backward(do.double())
    lse = lse.squeeze(-1).masked_fill(empty.squeeze(-1), float("-inf"))
    return out.detach(), lse.detach(), qd.grad, kd.grad, vd.grad


def rel(a, b):
    return float((a.double() - b).norm() / b.norm().clamp_min(1e-30))


def poison(t):
    return t.fill_(float("nan"))


def check(case, dev):
    seed = int(time.time() * 1000) % 100000
    log(f"  {case.name}: input seed {seed}")
    q, k, v, do = case.inputs(dev, seed=seed)
    dense = case.dense(dev)
    fx = Flex(case, dev)
    mk = lambda *s, dt=case.dtype: poison(torch.empty(*s, device=dev, dtype=dt))
    out = mk(case.B, case.Hq, case.Lq, case.D)
    lse = mk(case.B, case.Hq, case.Lq, dt=torch.float32)
    fx.forward(q, k, v, out, lse)
    dq, dk, dv = mk(*q.shape), mk(*k.shape), mk(*v.shape)
    dlt = mk(case.B, case.Hq, case.Lq, dt=torch.float32)
    dqacc = mk(*q.shape, dt=torch.float32)
    fx.backward(q, k, v, out, lse, do, dq, dk, dv, dlt, dqacc)
    torch.cuda.synchronize()
    ro, rl, rdq, rdk, rdv = reference(case, q, k, v, do, dense)
    fin = torch.isfinite(rl)
    res = {"out": rel(out, ro), "dq": rel(dq, rdq), "dk": rel(dk, rdk), "dv": rel(dv, rdv)}
    res["lse"] = rel(lse[fin], rl[fin])
    nan = any(torch.isnan(t).any().item() for t in (out, dq, dk, dv)) or torch.isnan(lse).any().item()
    inf_ok = bool((torch.isinf(lse) == ~fin).all().item())
    empty_rows = int((~fin).sum().item())
    zero_ok = bool((out[~fin] == 0).all().item()) if empty_rows else True
    ok = all(x <= 1e-2 for x in res.values()) and not nan and inf_ok and zero_ok
    log(f"CHECK {case.name:28s} {'PASS' if ok else 'FAIL'} " +
        " ".join(f"{k}={v:.2e}" for k, v in res.items()) +
        f" nan={nan} empty_rows={empty_rows} lse_inf_ok={inf_ok} zero_ok={zero_ok} density={fx.bm['density']:.3f}")
    return ok


def check_cases():
    C = flex_peer.Case
    return [
        C("causal_b2_h4g2_l300_d128", "causal", 2, 4, 2, 300, 300, 128, seed=1),
        C("causal_b1_h2_l517x700_d64_fp16", "causal", 1, 2, 2, 517, 700, 64, dtype=torch.float16, seed=2),
        C("window_b1_h8g4_l400_d256", "window", 1, 8, 2, 400, 400, 256, window=77, seed=3),
        C("document_b2_h4_l600_d128", "document", 2, 4, 4, 600, 600, 128, doc_len=150, seed=4),
        C("dflash_b2_h8g4_ctx333_20x16_pad", "dflash", 2, 8, 2, 20 * 16, 333 + 20 * 16, 128,
          ctx=333, blk=16, n_anchor=20, n_valid=17, seed=5),
        C("dflash_b1_h4g1_ctx1000_64x16_d64", "dflash", 1, 4, 4, 64 * 16, 1000 + 64 * 16, 64,
          ctx=1000, blk=16, n_anchor=64, seed=6),
    ]


def bench(case, dev, rows):
    q, k, v, do = case.inputs(dev)
    dense = case.dense(dev)
    flops = case.useful_flops(dense)
    fx = Flex(case, dev)
    del dense
    e = lambda *s, dt=case.dtype: torch.empty(*s, device=dev, dtype=dt)
    out, lse = e(*q.shape), e(case.B, case.Hq, case.Lq, dt=torch.float32)
    dq, dk, dv = e(*q.shape), e(*k.shape), e(*v.shape)
    dlt, dqacc = e(case.B, case.Hq, case.Lq, dt=torch.float32), e(*q.shape, dt=torch.float32)
    f_ms = flex_peer.median_ms(lambda: fx.forward(q, k, v, out, lse))

    def fb():
        fx.forward(q, k, v, out, lse)
        fx.backward(q, k, v, out, lse, do, dq, dk, dv, dlt, dqacc)
    fb_ms = flex_peer.median_ms(fb)
    try:
        tf, tfb, tout, tlse = flex_peer.torch_flex(case, dev, q, k, v, do)
        fx.forward(q, k, v, out, lse)
        torch.cuda.synchronize()
        agree = rel(out, tout.double())
    except Exception as ex:  # noqa: BLE001
        log(f"  torch flex failed on {case.name}: {type(ex).__name__}: {str(ex)[:200]}")
        tf = tfb = float("nan")
        agree = float("nan")
    if case.name == "a_causal_d128":
        for extra, bn in (("#define FLEX_BN 64\n#define FLEX_Q_REGS 1", 64),
                          ("#define FLEX_BN 128\n#define FLEX_Q_REGS 1", 128)):
            try:
                fv = Flex(case, dev, extra=extra, bn=bn)
                ms = flex_peer.median_ms(lambda: fv.forward(q, k, v, out, lse))
                log(f"VARIANT {case.name} fwd {extra!r}: {ms:.3f} ms")
            except Exception as ex:  # noqa: BLE001
                log(f"VARIANT {extra!r} ERROR {type(ex).__name__}: {ex}")
        fx.forward(q, k, v, out, lse)
    rows.append((case.name, f_ms, tf, fb_ms, tfb, flops / f_ms / 1e9, fx.bm["density"], agree))
    log(f"BENCH {case.name} ours fwd {f_ms:.3f} ms fwd+bwd {fb_ms:.3f} ms | torch fwd {tf:.3f} fwd+bwd {tfb:.3f}"
        f" | useful fwd {flops/f_ms/1e9:.1f} TFLOP/s | vs torch out rel {agree:.2e}")


def main():
    dev = "cuda"
    torch.manual_seed(0)
    skip_bench = "--skip-bench" in sys.argv
    budget = 200.0
    if "--budget" in sys.argv:
        budget = float(sys.argv[sys.argv.index("--budget") + 1])
    log(f"torch {torch.__version__} cupy {cupy.__version__} {torch.cuda.get_device_name()}")
    ok = True
    for c in check_cases():
        try:
            ok &= check(c, dev)
        except Exception as ex:  # noqa: BLE001
            ok = False
            log(f"CHECK {c.name} ERROR {type(ex).__name__}: {ex}")
    rows = []
    if not skip_bench:
        for c in flex_peer.bench_cases():
            if time.time() - T0 > budget:
                log(f"budget reached, skipping {c.name}")
                continue
            try:
                bench(c, dev, rows)
            except Exception as ex:  # noqa: BLE001
                log(f"BENCH {c.name} ERROR {type(ex).__name__}: {ex}")
    print("\ncase              ours_fwd  torch_fwd  ratio | ours_fb  torch_fb  ratio | TFLOP/s density vs_torch")
    for n, f, tf, fb, tfb, tfl, den, ag in rows:
        print(f"{n:16s} {f:8.3f} {tf:9.3f} {tf/f:6.2f}x | {fb:7.3f} {tfb:8.3f} {tfb/fb:6.2f}x | {tfl:7.1f} {den:6.3f} {ag:.1e}")
    print(f"correctness: {'ALL PASS' if ok else 'FAILURES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
