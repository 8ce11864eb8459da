#!/usr/bin/env python3
"""safetensors_golden.py: golden files for dflash/safetensors and dflash/train, made by the
reference implementations (python safetensors, torch, huggingface_hub) on the GPU machine.

Usage:
  here:   DFLASH_ST_PYCHECK=$PWD/.devbuild/st_ours go test -run TestWriteForPython ./safetensors
  device: python3 scripts/safetensors_golden.py      (carry .devbuild/st_ours; writes $OUT/golden.tar)
  here:   tar -xf golden.tar -C safetensors/testdata
          cp .devbuild/st_ours/ours.safetensors safetensors/testdata/golden/
          mv safetensors/testdata/golden/adamw_golden.safetensors train/testdata/

It writes:
  golden_py.safetensors + golden_py.json  tensors of every dtype written by safetensors.torch.save_file,
                                          with their values; conv.* are float32 inputs (random, exact
                                          rounding ties, specials) and torch's bf16/f16 roundings of them.
  sharded/                                a state dict saved by huggingface_hub.save_torch_state_dict in
                                          several shards with model.safetensors.index.json; sharded.json
                                          holds the values.
  python_read_report.json                 python safetensors reading .devbuild/st_ours/ours.safetensors
                                          (written by our Go writer) and comparing every bit.
  adamw_golden.safetensors                torch.optim.AdamW + clip_grad_norm_ trajectory.
"""
import json
import os
import tarfile
import traceback

import torch
import safetensors
from safetensors import safe_open
from safetensors.torch import save_file, load_file

OUT = os.environ.get("OUT", "out")
WORK = os.path.join(OUT, "golden")
os.makedirs(WORK, exist_ok=True)
report = {"torch": torch.__version__, "safetensors": safetensors.__version__, "errors": [], "sections": {}}

DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
      torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
      torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2"}


def section(fn):
    try:
        fn()
        report["sections"][fn.__name__] = "ok"
    except Exception:
        report["errors"].append(fn.__name__ + ": " + traceback.format_exc())
        report["sections"][fn.__name__] = "failed"


def describe(tensors):
    return {k: {"dtype": DT[v.dtype], "shape": list(v.shape), "values": v.float().flatten().tolist()}
            for k, v in tensors.items()}


def golden_file():
    g = torch.Generator().manual_seed(1234)
    src = torch.randn(4096, generator=g) * torch.exp(torch.randn(4096, generator=g) * 4)
    codes = torch.randint(1, 0x7F7F, (1024,), generator=g, dtype=torch.int32)
    lo, hi = (codes << 16).view(torch.float32), ((codes + 1) << 16).view(torch.float32)
    mid_bf = ((lo.double() + hi.double()) / 2).float()
    hcodes = torch.randint(1, 0x7BFF, (1024,), generator=g, dtype=torch.int16)
    hlo, hhi = hcodes.view(torch.float16), (hcodes + 1).view(torch.float16)
    mid_f16 = ((hlo.double() + hhi.double()) / 2).float()
    inf, nan = float("inf"), float("nan")
    specials = torch.tensor([0.0, -0.0, inf, -inf, nan, 3.4028235e38, -3.4028235e38, 1e-45, 65504.0,
                             65519.996, 65520.0, 65536.0, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14,
                             1.1754944e-38, 1e-40, 3.3895314e38, 3.3961775e38], dtype=torch.float32)
    src = torch.cat([src, mid_bf, -mid_bf, mid_f16, -mid_f16, specials]).contiguous()
    conv = {"conv.src": src, "conv.bf16": src.to(torch.bfloat16), "conv.f16": src.to(torch.float16)}
    f8 = torch.tensor([1.0, -1.5, 448.0, 0.001953125, 0.015625, 240.0, -3.25, 0.0])
    plain = {
        "t.f32": torch.randn(3, 5, generator=g),
        "t.bf16": torch.randn(4, 3, generator=g).bfloat16(),
        "t.f16": torch.randn(2, 2, 2, generator=g).half(),
        "t.f64": torch.randn(3, generator=g).double(),
        "t.i32": torch.tensor([-3, 7, 2**31 - 1, -(2**31)], dtype=torch.int32),
        "t.i64": torch.tensor([-100, 2**40], dtype=torch.int64),
        "t.u8": torch.tensor([0, 255, 17], dtype=torch.uint8),
        "t.i8": torch.tensor([-128, 127], dtype=torch.int8),
        "t.i16": torch.tensor([-2, 300], dtype=torch.int16),
        "t.bool": torch.tensor([True, False, True]),
        "t.scalar": torch.tensor(2.5),
        "t.empty": torch.zeros(0, 3),
        "t.f8e4m3": f8.to(torch.float8_e4m3fn),
        "t.f8e5m2": (f8 * 8).to(torch.float8_e5m2),
    }
    save_file({**conv, **plain}, os.path.join(WORK, "golden_py.safetensors"),
              metadata={"format": "pt", "producer": "torch " + torch.__version__})
    with open(os.path.join(WORK, "golden_py.json"), "w") as f:
        json.dump(describe(plain), f)


def sharded():
    from huggingface_hub import save_torch_state_dict
    g = torch.Generator().manual_seed(77)
    sd = {
        "model.embed_tokens.weight": torch.randn(16, 8, generator=g).bfloat16(),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=g).bfloat16(),
        "model.layers.0.input_layernorm.weight": torch.rand(8, generator=g) + 0.5,
        "model.norm.weight": torch.rand(8, generator=g).half(),
        "lm_head.weight": torch.randn(16, 8, generator=g).bfloat16(),
    }
    d = os.path.join(WORK, "sharded")
    os.makedirs(d, exist_ok=True)
    save_torch_state_dict(sd, d, max_shard_size=300)
    with open(os.path.join(WORK, "sharded.json"), "w") as f:
        json.dump(describe(sd), f)
    report["sharded_files"] = sorted(os.listdir(d))


def read_ours():
    path = os.path.join(".devbuild", "st_ours", "ours.safetensors")
    with open(os.path.join(".devbuild", "st_ours", "ours_expected.json")) as f:
        exp = json.load(f)
    res = {"tensors": {}}
    width = {"F32": (torch.int32, 32), "BF16": (torch.int16, 16), "F16": (torch.int16, 16), "F64": (torch.int64, 64)}
    with safe_open(path, framework="pt") as f:
        res["metadata_equal"] = f.metadata() == exp["metadata"]
        keys = sorted(f.keys())
        res["keys_equal"] = keys == sorted(exp["tensors"].keys())
        for k in keys:
            t = f.get_tensor(k)
            e = exp["tensors"][k]
            itype, nbits = width[DT[t.dtype]]
            bits = [b & ((1 << nbits) - 1) for b in t.contiguous().view(itype).flatten().tolist()]
            res["tensors"][k] = {"dtype_equal": DT[t.dtype] == e["dtype"], "shape_equal": list(t.shape) == e["shape"],
                                 "bits_equal": bits == e["bits"], "n": len(bits)}
    whole = load_file(path)
    res["load_file_keys"] = len(whole)
    res["all_ok"] = (res["metadata_equal"] and res["keys_equal"] and
                     all(v["dtype_equal"] and v["shape_equal"] and v["bits_equal"] for v in res["tensors"].values()))
    report["read_ours"] = res


def adamw():
    g = torch.Generator().manual_seed(99)
    w0 = torch.randn(6, 5, generator=g)
    n0 = torch.rand(5, generator=g) + 0.5
    pw, pn = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(n0.clone())
    opt = torch.optim.AdamW([{"params": [pw], "weight_decay": 0.1}, {"params": [pn], "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    lrs = [0.001, 0.005, 0.01, 0.01, 0.008, 0.005, 0.002, 0.0005]
    out = {"w0": w0, "n0": n0}
    norms = []
    for t, lr in enumerate(lrs):
        scale = 3.0 if t % 2 == 0 else 0.1
        gw, gn = torch.randn(6, 5, generator=g) * scale, torch.randn(5, generator=g) * scale
        out[f"gw.{t}"], out[f"gn.{t}"] = gw.clone(), gn.clone()
        pw.grad, pn.grad = gw.clone(), gn.clone()
        norms.append(float(torch.nn.utils.clip_grad_norm_([pw, pn], 1.0, foreach=False)))
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        out[f"w.{t}"], out[f"n.{t}"] = pw.detach().clone(), pn.detach().clone()
    for name, p in (("w", pw), ("n", pn)):
        out[name + ".exp_avg"] = opt.state[p]["exp_avg"].clone()
        out[name + ".exp_avg_sq"] = opt.state[p]["exp_avg_sq"].clone()
    out["lrs"] = torch.tensor(lrs, dtype=torch.float64)
    out["norms"] = torch.tensor(norms, dtype=torch.float64)
    save_file(out, os.path.join(WORK, "adamw_golden.safetensors"),
              metadata={"beta1": "0.9", "beta2": "0.95", "eps": "1e-8", "weight_decay": "0.1",
                        "max_norm": "1.0", "steps": str(len(lrs)), "torch": torch.__version__})


for fn in (golden_file, sharded, read_ours, adamw):
    section(fn)
with open(os.path.join(WORK, "python_read_report.json"), "w") as f:
    json.dump(report, f, indent=1)
with tarfile.open(os.path.join(OUT, "golden.tar"), "w") as tar:
    tar.add(WORK, arcname="golden")
print(json.dumps(report, indent=1))
