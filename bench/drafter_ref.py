#!/usr/bin/env python3
"""drafter_ref.py: the PyTorch reference of the DFlash drafter (docs/DRAFTER.md) and its golden file.

The reference is written from docs/DRAFTER.md with plain torch ops and a dense boolean attention
mask; it is what model/dflash is checked against. Run as a script it builds a small random drafter
and batch, computes the training loss (section 4.4), the gradient of every drafter parameter and
the evaluation quantities (section 5) in float64, and writes them to one safetensors file:

    python3 bench/drafter_ref.py --out model/dflash/testdata/golden_drafter.safetensors
    python3 bench/drafter_ref.py --head-dim 64 --out model/dflash/testdata/golden_drafter_d64.safetensors

With --check-export DIR it loads a drafter directory exported by dflash (config.json and
model.safetensors, plus batch.safetensors written by model/dflash's TestWriteExportCheck) into
a module tree with the published attribute names (strict), reads config.json with transformers'
Qwen3Config, recomputes the loss with this reference and compares it with dflash's.

Tensor names in the file:
    param.<name>          drafter parameters (F32 values, exactly the float64 ones used)
    grad.<name>           d loss / d param (F64)
    target.embed          E [V, H] (F32);  target.lm_head  W_lm [V, H] (F32)
    input.hidden          tapped target hidden states [k, R, S, H] (F32), in tap order
    input.ids             [R, S] (I64);  input.loss_mask [R, S] (F32);  input.seq_len [R] (I64)
    input.anchors         [R, n] (I64), dead blocks have anchor 0;  input.live [R, n] (I64, 1 = live)
    out.loss              [1] (F64);  out.weight_sum [1] (F64)
    out.context           u = RMSNorm(fc(concat taps)) [R, S, H] (F64)
    out.logits            [R, n, B, V] (F64);  out.pred [R, n, B] (I64, argmax)
    out.valid             [R, n, B] (F64, v of section 4.3);  out.labels [R, n, B] (I64)
    out.tau               [R, n] (F64, simulated acceptance length, 0 for dead blocks)
    out.z.<l>             block hidden states after drafter layer l [R, n*B, H] (F64)
Metadata: "config" holds the drafter's config.json (docs/DRAFTER.md section 6.2).
"""
import argparse
import json
import math
import os

import torch

torch.set_default_dtype(torch.float64)


# ---------------------------------------------------------------- the drafter (docs/DRAFTER.md §2)

def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    """x [..., L, D], pos [..., L] (broadcast over heads): rotate-half RoPE."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.to(torch.float64)[..., None] * inv
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def dflash_mask(anchors, S, B):
    """Dense allow-mask [R, nB, S+nB] of docs/DRAFTER.md §3."""
    R, n = anchors.shape
    r = torch.arange(n * B)
    c = torch.arange(S + n * B)
    j = r // B
    a = anchors[:, j]  # [R, nB]
    ctx = (c[None, None, :] < S) & (c[None, None, :] < a[:, :, None])
    own = (c[None, None, :] >= S) & (torch.div(c - S, B, rounding_mode="floor")[None, None, :] == j[None, :, None])
    return ctx | own


def param_names(n_layers):
    names = ["fc.weight", "hidden_norm.weight"]
    for l in range(n_layers):
        p = f"layers.{l}."
        names += [p + "input_layernorm.weight",
                  p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                  p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight",
                  p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight",
                  p + "post_attention_layernorm.weight",
                  p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"]
    return names + ["norm.weight"]


def forward(P, cfg, hidden, ids, anchors, live, E, W_lm, trace=None):
    """Drafter forward for a batch; returns (logits [R, n, B, V], context u [R, S, H]).

    trace, when a dict, receives the block hidden states after each layer ("z.<l>", [R, nB, H])."""
    H, nh, nkv, D = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    dc = cfg["dflash_config"]
    B, M = dc["block_size"], dc["mask_token_id"]
    R, S = ids.shape
    n = anchors.shape[1]

    ctx = torch.cat(list(hidden), dim=-1)                              # [R, S, kH]
    u = rms_norm(ctx @ P["fc.weight"].T, P["hidden_norm.weight"], eps)  # [R, S, H]

    blk = torch.full((R, n, B), M, dtype=torch.long)
    first = torch.gather(ids, 1, anchors)
    blk[:, :, 0] = torch.where(live, first, torch.full_like(first, M))
    z = E[blk.reshape(R, n * B)]                                       # [R, nB, H]

    pos_blk = (anchors[:, :, None] + torch.arange(B)[None, None, :]).reshape(R, n * B)
    pos_kv = torch.cat([torch.arange(S)[None, :].expand(R, S), pos_blk], dim=1)
    allow = dflash_mask(anchors, S, B)[:, None, :, :]                  # [R, 1, nB, S+nB]
    group = nh // nkv

    for l in range(cfg["num_hidden_layers"]):
        p = f"layers.{l}."
        g = rms_norm(z, P[p + "input_layernorm.weight"], eps)
        q = (g @ P[p + "self_attn.q_proj.weight"].T).view(R, n * B, nh, D).transpose(1, 2)
        kv_in = torch.cat([u, g], dim=1)                                # [R, S+nB, H]
        k = (kv_in @ P[p + "self_attn.k_proj.weight"].T).view(R, S + n * B, nkv, D).transpose(1, 2)
        v = (kv_in @ P[p + "self_attn.v_proj.weight"].T).view(R, S + n * B, nkv, D).transpose(1, 2)
        q = rope(rms_norm(q, P[p + "self_attn.q_norm.weight"], eps), pos_blk[:, None, :], theta)
        k = rope(rms_norm(k, P[p + "self_attn.k_norm.weight"], eps), pos_kv[:, None, :], theta)
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(~allow, float("-inf"))
        a = torch.softmax(s, dim=-1) @ v                                 # [R, nh, nB, D]
        a = a.transpose(1, 2).reshape(R, n * B, nh * D)
        z = z + a @ P[p + "self_attn.o_proj.weight"].T
        g2 = rms_norm(z, P[p + "post_attention_layernorm.weight"], eps)
        gate = g2 @ P[p + "mlp.gate_proj.weight"].T
        up = g2 @ P[p + "mlp.up_proj.weight"].T
        z = z + (torch.nn.functional.silu(gate) * up) @ P[p + "mlp.down_proj.weight"].T
        if trace is not None:
            trace[f"z.{l}"] = z.detach().clone()

    o = rms_norm(z, P["norm.weight"], eps)
    logits = (o @ W_lm.T).view(R, n, B, -1)
    return logits, u


def labels_and_valid(ids, loss_mask, seq_len, anchors, live, B):
    """Labels and validity of docs/DRAFTER.md §4.3, each [R, n, B]."""
    R, S = ids.shape
    idx = anchors[:, :, None] + torch.arange(B)[None, None, :]
    inside = idx < seq_len[:, None, None]
    safe = idx.clamp(max=S - 1)
    lab = torch.gather(ids[:, None, :].expand(R, anchors.shape[1], S), 2, safe)
    m = torch.gather(loss_mask[:, None, :].expand(R, anchors.shape[1], S), 2, safe)
    slot = torch.arange(B)[None, None, :]
    valid = live[:, :, None] & (slot >= 1) & inside & (m > 0.5)
    return lab, valid


def slot_weights(B, gamma):
    s = torch.arange(B, dtype=torch.float64)
    if gamma <= 0:
        return torch.ones(B)
    return torch.exp(-(s - 1).clamp(min=0) / gamma)


def loss_fn(logits, lab, valid, gamma):
    B = logits.shape[2]
    ce = torch.logsumexp(logits, dim=-1) - torch.gather(logits, 3, lab[..., None])[..., 0]
    w = valid.to(torch.float64) * slot_weights(B, gamma)[None, None, :]
    return (w * ce).sum() / w.sum(), w.sum()


def acceptance(pred, lab, valid, live):
    """Simulated acceptance length per block (§5); 0 for dead blocks."""
    ok = (valid & (pred == lab))[:, :, 1:].to(torch.long)
    run = torch.cumprod(ok, dim=2).sum(dim=2)
    return torch.where(live, 1.0 + run.to(torch.float64), torch.zeros_like(run, dtype=torch.float64))


# ---------------------------------------------------------------- the golden file

def build_case(seed, head_dim=16):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, std=1.0):  # float32-exact values, used in float64
        return (torch.randn(*shape, generator=g, dtype=torch.float32) * std).to(torch.float64)

    # head_dim 16 is the CPU golden; 64 (hidden 128) the GPU one, a head dimension the
    # GPU attention kernels support.
    D = head_dim
    H = 48 if D == 16 else 2 * D
    nh, nkv, I, N, V, B = 4, 2, 2 * H, 2, 160, 4
    taps = [1, 3, 5]
    M = V - 1
    cfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": N,
        "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": D,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
        "max_position_embeddings": 4096, "vocab_size": V,
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "use_sliding_window": False, "sliding_window": None,
        "layer_types": ["full_attention"] * N, "initializer_range": 0.02, "torch_dtype": "float32",
        "block_size": B, "num_target_layers": 8,
        "dflash_config": {
            "block_size": B, "mask_token_id": M, "target_layer_ids": taps,
            "loss_decay_gamma": 3.0, "num_anchors": 8,
            "target": {"architecture": "Qwen3ForCausalLM", "model_type": "qwen3",
                       "hidden_size": H, "vocab_size": V, "num_hidden_layers": 8},
        },
    }
    shapes = {"fc.weight": (H, len(taps) * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for l in range(N):
        p = f"layers.{l}."
        shapes.update({
            p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (nh * D, H), p + "self_attn.k_proj.weight": (nkv * D, H),
            p + "self_attn.v_proj.weight": (nkv * D, H), p + "self_attn.o_proj.weight": (H, nh * D),
            p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,),
            p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
            p + "mlp.down_proj.weight": (H, I),
        })
    P = {}
    for name in param_names(N):
        shp = shapes[name]
        if len(shp) == 1:  # norm weights: around 1, never exactly 1 (rounded to float32 like the rest)
            P[name] = (1.0 + randn(*shp, std=0.2)).to(torch.float32).to(torch.float64)
        else:
            P[name] = randn(*shp, std=1.0 / math.sqrt(shp[1]))
    E = randn(V, H, std=1.0)
    W_lm = randn(V, H, std=0.3)

    R, S = 2, 37
    seq_len = torch.tensor([37, 30])
    ids = torch.randint(0, V - 1, (R, S), generator=g)  # never the mask id
    ids[1, 30:] = 0  # padding
    loss_mask = torch.zeros(R, S)
    loss_mask[0, 10:] = 1
    loss_mask[0, 20:23] = 0  # a hole inside the assistant part (e.g. a tool turn)
    loss_mask[1, 6:30] = 1
    # Row 0: candidates are 10..18 and 23..35; 18 has labels cut by the hole, 33 and 35 run past the end.
    # Row 1: candidates 6..28; 27 runs past its true length 30; three dead blocks pad it.
    anchors = torch.tensor([[10, 16, 18, 23, 33, 35], [6, 12, 27, 0, 0, 0]])
    live = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]).bool()
    hidden = randn(len(taps), R, S, H, std=2.0)
    hidden[:, 1, 30:] = randn(len(taps), S - 30, H, std=50.0)  # padding garbage: must never matter
    return cfg, P, E, W_lm, hidden, ids, loss_mask, seq_len, anchors, live


def check_candidates(loss_mask, seq_len, anchors, live):
    for b in range(anchors.shape[0]):
        for j in range(anchors.shape[1]):
            if live[b, j]:
                a = int(anchors[b, j])
                assert a <= int(seq_len[b]) - 2 and loss_mask[b, a] > 0 and loss_mask[b, a + 1] > 0, (b, j, a)


def finite_difference_check(P, run, names, g, count=6, h=1e-6):
    """Spot-check autograd against central differences (float64)."""
    worst = 0.0
    gen = torch.Generator().manual_seed(7)
    for name in names[:: max(1, len(names) // count)]:
        flat = P[name].view(-1)
        i = int(torch.randint(0, flat.numel(), (1,), generator=gen))
        old = float(flat[i])
        with torch.no_grad():
            flat[i] = old + h
            lp = float(run()[0])
            flat[i] = old - h
            lm = float(run()[0])
            flat[i] = old
        fd = (lp - lm) / (2 * h)
        an = float(g[name].view(-1)[i])
        err = abs(fd - an) / (1e-3 + abs(an))  # relative, with an absolute floor for tiny entries
        worst = max(worst, err)
        print(f"  fd {name}[{i}]: autograd {an:+.9e} finite-diff {fd:+.9e} rel {err:.2e}")
    return worst


class _Norm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n))


def _module_tree(cfg):
    """An nn.Module tree with the published drafter's attribute names, to load an export strictly."""
    nn = torch.nn
    H, I, D = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    k = len(cfg["dflash_config"]["target_layer_ids"])
    root = nn.Module()
    root.fc = nn.Linear(k * H, H, bias=False)
    root.hidden_norm = _Norm(H)
    root.norm = _Norm(H)
    layers = []
    for _ in range(cfg["num_hidden_layers"]):
        layer = nn.Module()
        layer.input_layernorm = _Norm(H)
        layer.post_attention_layernorm = _Norm(H)
        att = nn.Module()
        att.q_proj = nn.Linear(H, nh * D, bias=False)
        att.k_proj = nn.Linear(H, nkv * D, bias=False)
        att.v_proj = nn.Linear(H, nkv * D, bias=False)
        att.o_proj = nn.Linear(nh * D, H, bias=False)
        att.q_norm = _Norm(D)
        att.k_norm = _Norm(D)
        layer.self_attn = att
        mlp = nn.Module()
        mlp.gate_proj = nn.Linear(H, I, bias=False)
        mlp.up_proj = nn.Linear(H, I, bias=False)
        mlp.down_proj = nn.Linear(I, H, bias=False)
        layer.mlp = mlp
        layers.append(layer)
    root.layers = nn.ModuleList(layers)
    return root


def check_export(d):
    """Load a drafter directory exported by dflash and the batch beside it; recompute the loss.

    d holds config.json and model.safetensors (the export) and batch.safetensors with target.embed,
    target.lm_head, input.* as in the golden file, and go.loss / go.logits computed by dflash.
    """
    from safetensors.torch import load_file
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3", cfg
    dc = cfg["dflash_config"]
    assert dc["block_size"] == cfg["block_size"]
    try:
        from transformers import Qwen3Config
        qc = Qwen3Config.from_pretrained(d)
        assert qc.num_hidden_layers == cfg["num_hidden_layers"] and qc.dflash_config["target_layer_ids"] == dc["target_layer_ids"]
        print(f"transformers Qwen3Config reads the export: layers {qc.num_hidden_layers}, block_size {qc.block_size}, "
              f"mask {qc.dflash_config['mask_token_id']}, taps {qc.dflash_config['target_layer_ids']}, "
              f"rope {getattr(qc, 'rope_parameters', None) or getattr(qc, 'rope_theta', None)}")
    except Exception as e:  # reported, not fatal: the tensor check below still runs
        print(f"WARNING: transformers Qwen3Config could not read the export: {type(e).__name__}: {e}")
    sd = load_file(os.path.join(d, "model.safetensors"))
    tree = _module_tree(cfg)
    tree.load_state_dict({k: v.to(torch.float32) for k, v in sd.items()}, strict=True)
    print(f"strict load of {len(sd)} tensors into the published module layout: ok")
    P = {k: v.to(torch.float64) for k, v in sd.items()}
    T = load_file(os.path.join(d, "batch.safetensors"))
    E, W = T["target.embed"].double(), T["target.lm_head"].double()
    hidden = T["input.hidden"].double()
    ids, seq_len = T["input.ids"].long(), T["input.seq_len"].long()
    loss_mask = T["input.loss_mask"].double()
    anchors, live = T["input.anchors"].long(), T["input.live"].bool()
    lab, valid = labels_and_valid(ids, loss_mask, seq_len, anchors, live, dc["block_size"])
    logits, _ = forward(P, cfg, hidden, ids, anchors, live, E, W)
    loss, _ = loss_fn(logits, lab, valid, dc["loss_decay_gamma"])
    go_loss = float(T["go.loss"][0].double() + T["go.loss"][1].double())
    err = abs(float(loss) - go_loss) / abs(go_loss)
    print(f"export check: reference loss {float(loss):.12f}, dflash {go_loss:.12f}, rel err {err:.2e}")
    assert err < 1e-9, "exported drafter disagrees with dflash"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output .safetensors path")
    ap.add_argument("--seed", type=int, default=20260601)
    ap.add_argument("--head-dim", type=int, default=16, choices=[16, 64],
                    help="16: the CPU golden file; 64: the GPU one (model/dflash/testdata/golden_drafter_d64.safetensors)")
    ap.add_argument("--check-export", metavar="DIR", help="check a drafter directory exported by dflash")
    args = ap.parse_args()
    if not args.out and not args.check_export:
        ap.error("--out or --check-export is required")
    if args.out:
        write_golden(args)
    if args.check_export:
        check_export(args.check_export)


def write_golden(args):

    from safetensors.torch import save_file

    cfg, P, E, W_lm, hidden, ids, loss_mask, seq_len, anchors, live = build_case(args.seed, args.head_dim)
    check_candidates(loss_mask, seq_len, anchors, live)
    dc = cfg["dflash_config"]
    B, gamma = dc["block_size"], dc["loss_decay_gamma"]
    names = param_names(cfg["num_hidden_layers"])
    for t in P.values():
        t.requires_grad_(True)

    lab, valid = labels_and_valid(ids, loss_mask, seq_len, anchors, live, B)

    trace = {}

    def run():
        logits, u = forward(P, cfg, hidden, ids, anchors, live, E, W_lm, trace)
        loss, wsum = loss_fn(logits, lab, valid, gamma)
        return loss, wsum, logits, u

    loss, wsum, logits, u = run()
    trace0 = dict(trace)  # later runs (finite differences) overwrite trace
    grads = torch.autograd.grad(loss, [P[n] for n in names])
    G = dict(zip(names, grads))
    print(f"loss {float(loss):.12f}  weight_sum {float(wsum):.6f}  valid slots {int(valid.sum())}")
    worst = finite_difference_check(P, run, names, G)
    assert worst < 1e-5, f"autograd disagrees with finite differences: {worst}"

    # Padding garbage in the hidden states must not change anything.
    with torch.no_grad():
        h2 = hidden.clone()
        h2[:, 1, 30:] = 0
        l2 = loss_fn(forward(P, cfg, h2, ids, anchors, live, E, W_lm)[0], lab, valid, gamma)[0]
        assert abs(float(l2) - float(loss)) < 1e-12, "padding leaked into the loss"

    pred = logits.detach().argmax(dim=-1)
    tau = acceptance(pred, lab, valid, live)

    T = {}
    for n_ in names:
        T["param." + n_] = P[n_].detach().to(torch.float32).contiguous()
        T["grad." + n_] = G[n_].detach().contiguous()
    T["target.embed"] = E.to(torch.float32)
    T["target.lm_head"] = W_lm.to(torch.float32)
    T["input.hidden"] = hidden.to(torch.float32).contiguous()
    T["input.ids"] = ids.to(torch.int64)
    T["input.loss_mask"] = loss_mask.to(torch.float32)
    T["input.seq_len"] = seq_len.to(torch.int64)
    T["input.anchors"] = anchors.to(torch.int64)
    T["input.live"] = live.to(torch.int64)
    T["out.loss"] = loss.detach().reshape(1)
    T["out.weight_sum"] = wsum.detach().reshape(1)
    T["out.context"] = u.detach().contiguous()
    T["out.logits"] = logits.detach().contiguous()
    T["out.pred"] = pred.to(torch.int64)
    T["out.valid"] = valid.to(torch.float64)
    T["out.labels"] = lab.to(torch.int64)
    T["out.tau"] = tau
    for k_, v_ in trace0.items():
        T["out." + k_] = v_.contiguous()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_file(T, args.out, metadata={"config": json.dumps(cfg), "seed": str(args.seed),
                                     "torch": torch.__version__,
                                     "generator": "bench/drafter_ref.py"})
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(T)} tensors, {size} bytes")
    assert size < (2 << 20 if args.head_dim == 16 else 8 << 20), f"{args.out}: {size} bytes, larger than expected"


if __name__ == "__main__":
    main()
