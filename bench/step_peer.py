#!/usr/bin/env python3
"""step_peer.py: the PyTorch peer of `dflash bench step` (issue 14, "Speed, side by side").

One DFlash drafter training step (docs/DRAFTER.md) done the way the PyTorch trainers do it
(/work/shared/PEERS.md), timed phase by phase, for the shapes of recipe/stepbench:

- target: HF transformers Qwen3ForCausalLM with random weights, bf16, eval, no grad, built on the
  device. --mode shipped runs the whole forward with the LM head and output_hidden_states=True (as
  the trainers ship); --mode best keeps only layers 0..deepest tap, captures the taps with forward
  hooks and skips the final norm and the LM head.
- drafter: N Qwen3 layers with KV injection, bf16 parameters for compute and fp32 master weights in
  AdamW (clip 1.0, as SpecForge), attention through torch.compile(flex_attention), the DFlash block
  mask built with create_block_mask every step (not compiled; --compile-mask compiles it, which
  the issue measured at a 167 s first step), the drafter layers compiled in --mode best; chunked cross-entropy with the frozen target LM head under
  activation checkpointing, slot weights exp(-(s-1)/gamma).
- anchors: a fixed count per row drawn every step, uniformly without replacement, among the
  positions t with loss_mask[t] = loss_mask[t+1] = 1 (docs/DRAFTER.md 4.2); the data is random ids
  whose first seq_len/8 tokens are the prompt (loss mask 0), like stepbench.

Phases (each ends with a CUDA event; the host waits once, at the step's end, as a training loop that
logs its loss every step does, so they add up to the step): input_assembly
(anchors, labels, weights, block ids and positions), target_forward, block_mask, drafter_forward,
backward, optimizer. Unlike stepbench, whose drafter_forward contains the mask build, the mask is a
phase of its own here (phases_ms.block_mask, also block_mask_ms). The first step (compilation) is
timed apart and is not among the warmup or timed steps. The FLOP count and MFU follow docs/PERF.md,
"Drafter training step" (step_flops below): useful work only, so the layers after the deepest tap,
the target's LM head and the unlabelled LM-head rows that --mode shipped computes count for nothing.

    python3 bench/step_peer.py --target-config qwen3-8b --mode shipped --json out.json
    python3 bench/step_peer.py --check-only          # a tiny shape, one step, and a check of the
                                                     # drafter's logits against bench/drafter_ref.py
"""
import argparse
import inspect
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_shapes import QWEN3_VOCAB, TARGETS  # noqa: E402  (recipe/stepbench/targets.go's shapes)
from step_peer_model import (Drafter, MasterAdamW, assemble, chunked_loss, dflash_mask_mod,  # noqa: E402
                             init_drafter, make_batch, rope_cos_sin, sample_anchors)

# The check-only shape: small enough to compile and run in seconds on a CPU.
CHECK_SHAPE = (64, 128, 6, 4, 2, False)
H200_BF16_PEAK_TFLOPS = 989  # NVIDIA datasheet, dense bf16, as the PyTorch trainer states its MFU


def default_taps(L, k):
    """dflash.DefaultTaps: [L/2] for one tap, else round-half-even(1 + i(L-4)/(k-1))."""
    if k == 1:
        return [L // 2]
    return [int(round(1 + i * (L - 4) / (k - 1))) for i in range(k)]  # Python's round is half-even


def default_gamma(B):
    return {16: 7.0, 10: 5.0, 8: 4.0}.get(B, B / 2)


# ---------------------------------------------------------------- the target

def build_target(shape, V, head_dim, dev, mode, taps):
    """A random-weight bf16 Qwen3ForCausalLM built on dev; returns (model, full parameter count)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    H, I, L, nh, nkv, tied = shape
    kw = dict(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=L,
              num_attention_heads=nh, num_key_value_heads=nkv, head_dim=head_dim, rms_norm_eps=1e-6,
              max_position_embeddings=40960, tie_word_embeddings=tied, attention_bias=False, use_cache=False)
    if "rope_parameters" in inspect.signature(Qwen3Config.__init__).parameters:  # transformers 5
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6}
    else:
        kw["rope_theta"] = 1e6
    cfg = Qwen3Config(**kw)
    cfg._attn_implementation = "sdpa"  # the trainers' default attention for the target
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(dev):
            model = Qwen3ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    with torch.no_grad():  # cheap random init on the device (HF's own init may be skipped)
        for p in model.parameters():
            p.normal_(0.0, 0.02) if p.dim() == 2 else p.fill_(1.0)
    model.eval().requires_grad_(False)
    params = sum(p.numel() for p in model.parameters())
    if mode == "best":
        depth = max(taps) + 1
        model.model.layers = nn.ModuleList(list(model.model.layers)[:depth])
        model.model.norm = nn.Identity()
    return model, params


class TapHooks:
    """Forward hooks that keep the outputs of the tapped decoder layers (--mode best)."""

    def __init__(self, layers, taps):
        self.out = {}
        for t in sorted(set(taps)):
            layers[t].register_forward_hook(self._hook(t))

    def _hook(self, t):
        def f(_mod, _inp, output):
            self.out[t] = output[0] if isinstance(output, tuple) else output
        return f


def target_taps(model, hooks, ids, taps, mode):
    """The tapped hidden states [R, S, H] in tap order, without gradients."""
    with torch.no_grad():
        if mode == "shipped":
            out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
            hs = out.hidden_states  # hs[t+1] is layer t's output (taps < L-1: before the final norm)
            L = len(model.model.layers)
            if len(hs) != L + 1:
                sys.exit(f"output_hidden_states gave {len(hs)} tensors, want {L + 1} (embeddings + {L} layers)")
            return [hs[t + 1] for t in taps], out.logits
        model.model(input_ids=ids, use_cache=False)
        return [hooks.out[t] for t in taps], None


# ---------------------------------------------------------------- FLOPs (docs/PERF.md)

def step_flops(shape, D, taps, n_layers, R, S, anchors, B, label_rows, V):
    """stepbench.StepFLOPs: a multiply-add is 2; norms, RoPE, SwiGLU, softmax not counted.

    W = 2 nh D H + 2 nkv D H + 3 H I (q, o, k, v, gate, up, down), T = R S
    target forward   = (t_max + 1) (2 W T + 4 D nh R S(S+1)/2)
    drafter forward  = F + L_d (G + A) + M;   backward = F + 2 L_d (G + A) + M
      F = 2 T k H H (fc), G = 2 T 2 nkv D H + 2 R n B W (context k, v; every block-row projection),
      A = 4 D nh P with P = sum over live blocks of B (a_j + B), M = 2 n_lab H V (LM head rows with a label).
    """
    H, I, _, nh, nkv, _ = shape
    q, kv = nh * D, nkv * D
    T = R * S
    W = 2 * q * H + 2 * kv * H + 3 * H * I
    tf = (max(taps) + 1) * (2 * W * T + 4 * D * nh * R * S * (S + 1) / 2)
    Fc = 2 * T * len(taps) * H * H
    G = 2 * T * 2 * kv * H + 2 * R * anchors.shape[1] * B * W
    P = float((B * (anchors.clamp(max=S).double() + B)).sum())  # no dead blocks: every row is full length
    A = 4 * D * nh * P
    M = 2 * label_rows * H * V
    return {"target_forward": tf, "drafter_forward": Fc + n_layers * (G + A) + M,
            "drafter_backward": Fc + 2 * n_layers * (G + A) + M}


# ---------------------------------------------------------------- one step, timed

class Phases:
    """Phase boundaries: a CUDA event on CUDA (perf_counter on a CPU); ms() waits for the last one."""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"
        self.marks = []

    def mark(self, name):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append((name, e))
        else:
            self.marks.append((name, time.perf_counter()))

    def ms(self):
        """{phase: ms} for every mark after the first (a phase is named by the mark ending it)."""
        if self.cuda:
            self.marks[-1][1].synchronize()
        out = {}
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            out[name] = a.elapsed_time(b) if self.cuda else (b - a) * 1e3
        return out


class Peer:
    """The target, the drafter, the optimizer and the data of one benchmark."""

    def __init__(self, a, shape, V, D, dev):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        self.a, self.shape, self.V, self.D, self.dev = a, shape, V, D, dev
        H, I, L, nh, nkv, _ = shape
        self.taps = a.taps or default_taps(L, a.drafter_layers)
        bad = [t for t in self.taps if not 0 <= t < L - 1]
        if bad:
            sys.exit(f"--taps {self.taps}: layer {bad[0]} is outside 0..{L - 2} (the last layer's output "
                     f"comes after the final norm in output_hidden_states)")
        self.gen = torch.Generator(device=dev).manual_seed(a.seed)
        torch.manual_seed(a.seed)
        self.target, self.target_params = build_target(shape, V, D, dev, a.mode, self.taps)
        self.hooks = TapHooks(self.target.model.layers, self.taps) if a.mode == "best" else None
        self.E = self.target.model.embed_tokens.weight
        self.W_lm = self.target.lm_head.weight
        with torch.device(dev):  # no slow CPU init of a billion parameters
            d = Drafter(H, I, nh, nkv, D, a.drafter_layers, len(self.taps))
        init_drafter(d)
        self.drafter = d.to(torch.bfloat16)
        self.opt = MasterAdamW(self.drafter.parameters())
        self.ids, self.loss_mask = make_batch(a.batch, a.seq_len, V, dev, self.gen)
        cands = a.seq_len - 1 - a.seq_len // 8
        if a.anchors > cands:
            sys.exit(f"--anchors {a.anchors}: a --seq-len {a.seq_len} sequence has only {cands} anchor candidates")
        self.anchors_buf = torch.zeros(a.batch, a.anchors, dtype=torch.long, device=dev)
        self.mask_mod = dflash_mask_mod(self.anchors_buf, a.seq_len, a.block_size)
        torch._dynamo.config.recompile_limit = 64  # as SpecForge
        if a.mode == "best":  # the compiled layers compile flex_attention inside them
            self.attn = flex_attention
            self.cbm = torch.compile(create_block_mask) if a.compile_mask else create_block_mask
            for layer in self.drafter.layers:
                layer.compile(dynamic=False)
        else:
            self.attn = torch.compile(flex_attention, dynamic=False)
            self.cbm = torch.compile(create_block_mask) if a.compile_mask else create_block_mask
        self.gamma = default_gamma(a.block_size)

    def build_mask(self):
        a = self.a
        nB = a.anchors * a.block_size
        return self.cbm(self.mask_mod, a.batch, None, nB, a.seq_len + nB, device=self.dev)

    def step(self):
        """One training step; returns ({phase: ms}, loss, anchors, label rows)."""
        a, dev = self.a, self.dev
        ph = Phases(dev)
        ph.mark("start")
        anchors = sample_anchors(self.loss_mask, a.anchors, self.gen)
        self.anchors_buf.copy_(anchors)
        blk, pos_blk, lab, weights = assemble(self.ids, self.loss_mask, anchors, a.block_size, self.V - 1, self.gamma)
        S = a.seq_len
        pos_kv = torch.cat([torch.arange(S, device=dev).expand(a.batch, S), pos_blk], dim=1)
        rope_q = rope_cos_sin(pos_blk, self.D, 1e6, torch.bfloat16)
        rope_k = rope_cos_sin(pos_kv, self.D, 1e6, torch.bfloat16)
        z0 = self.E[blk]
        ph.mark("input_assembly")
        taps, logits = target_taps(self.target, self.hooks, self.ids, self.taps, a.mode)
        del logits  # the shipped trainers compute it and throw it away
        ph.mark("target_forward")
        bm = self.build_mask()
        ph.mark("block_mask")
        o = self.drafter(taps, z0, rope_q, rope_k, bm, self.attn)
        loss = chunked_loss(o, self.W_lm, lab, weights, a.loss_chunk_blocks)
        ph.mark("drafter_forward")
        loss.backward()
        ph.mark("backward")
        self.opt.step()
        ph.mark("optimizer")
        return ph.ms(), float(loss), anchors, int((weights > 0).sum())


def run(a, shape, V, D, dev):
    """Builds the peer, runs the first step, warmup and timed steps; returns the report dict."""
    peer = Peer(a, shape, V, D, dev)
    t0 = time.perf_counter()
    peer.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(a.warmup):
        peer.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    steps, flops = [], None
    for _ in range(a.steps):
        ms, loss, anchors, label_rows = peer.step()
        steps.append(ms)
        f = step_flops(shape, D, peer.taps, a.drafter_layers, a.batch, a.seq_len, anchors, a.block_size, label_rows, V)
        flops = f if flops is None else {k: flops[k] + f[k] for k in f}
    flops = {k: v / a.steps for k, v in flops.items()}
    phases = {k: sum(s[k] for s in steps) / a.steps for k in steps[0]}
    totals = [sum(s.values()) for s in steps]
    step_ms = sum(totals) / a.steps
    peak = a.peak_tflops or H200_BF16_PEAK_TFLOPS
    mfu = lambda fl, ms: fl / (ms / 1e3) / (peak * 1e12) if ms > 0 else 0.0
    H, I, L, nh, nkv, tied = shape
    r = {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "mode": a.mode, "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "target": a.target_config,
        "target_shape": {"hidden_size": H, "intermediate_size": I, "num_hidden_layers": L,
                         "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": D,
                         "vocab_size": V, "tie_word_embeddings": tied},
        "target_params": float(peer.target_params),
        "target_layers_run": L if a.mode == "shipped" else max(peer.taps) + 1,
        "taps": peer.taps, "drafter_layers": a.drafter_layers,
        "drafter_params": float(sum(p.numel() for p in peer.drafter.parameters())),
        "seq_len": a.seq_len, "batch": a.batch, "anchors": a.anchors, "block_size": a.block_size,
        "loss_chunk": a.loss_chunk_blocks * a.block_size, "steps": a.steps, "warmup": a.warmup,
        "phases_ms": phases, "step_ms": step_ms, "step_min_ms": min(totals), "step_max_ms": max(totals),
        "block_mask_ms": phases["block_mask"], "first_step_ms": first_ms,
        "tokens_per_s": a.batch * a.seq_len / (step_ms / 1e3), "samples_per_s": a.batch / (step_ms / 1e3),
        "peak_device_bytes": torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0,
        "peak_device_reserved_bytes": torch.cuda.max_memory_reserved(dev) if dev.type == "cuda" else 0,
        "flops": flops, "peak_tflops": peak,
        "peak_source": "--peak-tflops" if a.peak_tflops else "H200 dense bf16, NVIDIA datasheet",
        "mfu": {"step": mfu(sum(flops.values()), step_ms),
                "target_forward": mfu(flops["target_forward"], phases["target_forward"]),
                "drafter_forward_backward": mfu(flops["drafter_forward"] + flops["drafter_backward"],
                                                phases["drafter_forward"] + phases["backward"])},
        "loss": loss,
    }
    return r, peer


def print_report(r):
    p = r["phases_ms"]
    print(f"step_peer {r['target']} mode={r['mode']} seq {r['seq_len']} batch {r['batch']} anchors {r['anchors']} "
          f"block {r['block_size']} drafter layers {r['drafter_layers']} taps {r['taps']} on {r['device']}")
    print("  " + "  ".join(f"{k} {v:.1f}" for k, v in p.items()) + "  (ms)")
    print(f"  step {r['step_ms']:.1f} ms (min {r['step_min_ms']:.1f}, max {r['step_max_ms']:.1f})  "
          f"{r['samples_per_s']:.2f} samples/s  MFU {100 * r['mfu']['step']:.1f}% "
          f"(target {100 * r['mfu']['target_forward']:.1f}%, drafter f+b {100 * r['mfu']['drafter_forward_backward']:.1f}%)  "
          f"peak allocated {r['peak_device_bytes'] / 2**30:.1f} GiB, reserved {r['peak_device_reserved_bytes'] / 2**30:.1f} GiB  first step {r['first_step_ms'] / 1e3:.1f} s  loss {r['loss']:.4f}")


# ---------------------------------------------------------------- --check-only

def check_against_reference(peer, shape, V, D):
    """The drafter's logits in fp32 against bench/drafter_ref.py's float64 forward, same inputs."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    old = torch.get_default_dtype()
    import drafter_ref  # sets the default dtype to float64
    torch.set_default_dtype(old)
    a, dev = peer.a, peer.dev
    torch.backends.cuda.matmul.allow_tf32 = False
    H, I, L, nh, nkv, _ = shape
    B, M = a.block_size, V - 1
    d32 = Drafter(H, I, nh, nkv, D, a.drafter_layers, len(peer.taps)).to(dev)
    names = [n for n, _ in peer.drafter.named_parameters()]
    d32.load_state_dict(dict(zip(names, peer.opt.master)))  # the fp32 master weights
    anchors = sample_anchors(peer.loss_mask, a.anchors, peer.gen)
    peer.anchors_buf.copy_(anchors)
    blk, pos_blk, _, _ = assemble(peer.ids, peer.loss_mask, anchors, B, M, peer.gamma)
    S = a.seq_len
    pos_kv = torch.cat([torch.arange(S, device=dev).expand(a.batch, S), pos_blk], dim=1)
    E, W = peer.E.float(), peer.W_lm.float()
    gen = torch.Generator(device=dev).manual_seed(a.seed + 1)
    taps = [torch.randn(a.batch, S, H, device=dev, generator=gen) for _ in peer.taps]
    from torch.nn.attention.flex_attention import flex_attention
    with torch.no_grad():
        o = d32(taps, E[blk], rope_cos_sin(pos_blk, D, 1e6, torch.float32), rope_cos_sin(pos_kv, D, 1e6, torch.float32),
                peer.build_mask(), torch.compile(flex_attention, dynamic=False))
        got = (o @ W.T).view(a.batch, a.anchors, B, V).double().cpu()
    cfg = {"hidden_size": H, "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": D,
           "rms_norm_eps": 1e-6, "rope_theta": 1e6, "num_hidden_layers": a.drafter_layers,
           "dflash_config": {"block_size": B, "mask_token_id": M}}
    P = {k: v.detach().double().cpu() for k, v in d32.state_dict().items()}
    live = torch.ones(a.batch, a.anchors, dtype=torch.bool)
    want, _ = drafter_ref.forward(P, cfg, [t.double().cpu() for t in taps], peer.ids.cpu(), anchors.cpu(), live,
                                  E.double().cpu(), W.double().cpu())
    err = float((got - want).abs().max() / want.abs().max())
    print(f"check: drafter logits (fp32, flex) against bench/drafter_ref.py (float64, dense mask): "
          f"max rel err {err:.2e} (bound 1e-3)")
    if not err < 1e-3:
        sys.exit("check-only: the drafter disagrees with the reference")


# ---------------------------------------------------------------- main

def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target-config", default="qwen3-8b", choices=sorted(TARGETS))
    ap.add_argument("--mode", default="shipped", choices=["shipped", "best"])
    ap.add_argument("--seq-len", type=int, default=3072)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--anchors", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--drafter-layers", type=int, default=5)
    ap.add_argument("--taps", default="", help="comma-separated 0-based target layers (default: the recipe's spread)")
    ap.add_argument("--loss-chunk-blocks", type=int, default=128, help="blocks per cross-entropy chunk (SpecForge: 128)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (their means are reported)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps after the first (compiling) step")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile-mask", action="store_true",
                    help="torch.compile create_block_mask too (a much longer first step)")
    ap.add_argument("--peak-tflops", type=float, default=0, help="MFU denominator (0: H200 dense bf16, 989)")
    ap.add_argument("--device", default="", help="cuda or cpu (default: cuda when present)")
    ap.add_argument("--json", metavar="FILE", help="write the report as JSON")
    ap.add_argument("--check-only", action="store_true",
                    help="a tiny shape, one step, and the drafter checked against bench/drafter_ref.py")
    a = ap.parse_args()
    for flag, v, lo in [("seq-len", a.seq_len, 16), ("batch", a.batch, 1), ("anchors", a.anchors, 1),
                        ("block-size", a.block_size, 2), ("drafter-layers", a.drafter_layers, 1),
                        ("loss-chunk-blocks", a.loss_chunk_blocks, 1), ("steps", a.steps, 1), ("warmup", a.warmup, 0)]:
        if v < lo:
            ap.error(f"--{flag} {v}: must be >= {lo}")
    try:
        a.taps = [int(t) for t in a.taps.split(",")] if a.taps else []
    except ValueError:
        ap.error(f"--taps {a.taps!r}: want comma-separated integers")
    return a


def main():
    a = parse()
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    shape, V, D = TARGETS[a.target_config], QWEN3_VOCAB, 128
    if a.check_only:
        shape, V, D = CHECK_SHAPE, 1000, 16
        a.target_config, a.seq_len, a.batch, a.anchors, a.block_size = "check", 64, 2, 8, 4
        a.drafter_layers, a.loss_chunk_blocks, a.steps, a.warmup = 2, 4, 1, 0
    r, peer = run(a, shape, V, D, dev)
    print_report(r)
    if a.check_only:
        if not (0.5 * math.log(V) < r["loss"] < 2 * math.log(V)):
            sys.exit(f"check-only: loss {r['loss']} is not near ln(V) = {math.log(V):.3f} (random weights)")
        check_against_reference(peer, shape, V, D)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
