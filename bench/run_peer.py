#!/usr/bin/env python3
"""run_peer.py: the PyTorch peer's samples/s on a data set's length distribution (issue 26's whole-run benchmark).

    python3 bench/run_peer.py --lengths FILE [--grid 256,512,...,3072] [--mode shipped] [--json OUT]

The PyTorch trainers (/work/shared/PEERS.md) pad each batch's rows to its longest, batch 4. This times
bench/step_peer.py's step (its Peer and run, unchanged; the target built anew for each length) at each
padded length of --grid, with min(512, the candidates) anchors a row as the peer draws them, then
replays --epochs epochs of the data set: the lengths of FILE (one a line, the token counts of the
prepared samples) shuffled with --seed and cut into batches of --batch, each batch costing the step time
at its longest row, interpolated linearly between the grid's lengths (below the first, the first's).
The peer's samples/s is the samples over the sum of those times.

It is the peer's steps alone: no evaluation, checkpoint or start-up, and no recompilation, although
a trainer that pads to each batch's longest row meets a new length at almost every step and its
torch.compile(dynamic=False) recompiles for each (or falls back after the recompile limit). So it is
an upper bound on the peer's throughput, to hold against dflash's steps-only samples/s, and its wall
samples/s after its own stalls would be lower.
"""
import argparse
import bisect
import gc
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_shapes import TARGETS  # noqa: E402

MAX_ANCHORS = 512


def peer_args(a, seq_len):
    cands = seq_len - 1 - seq_len // 8  # make_batch's prompt is the first seq_len/8 tokens
    return argparse.Namespace(
        target_config=a.target_config, mode=a.mode, seq_len=seq_len, batch=a.batch,
        anchors=min(MAX_ANCHORS, cands), block_size=a.block_size, drafter_layers=a.drafter_layers, taps=[],
        loss_chunk_blocks=a.loss_chunk_blocks, steps=a.steps, warmup=a.warmup, seed=a.seed, compile_mask=False,
        peak_tflops=0, device="", json=None, check_only=False)


def interp(grid, ms, n):
    """Step ms at padded length n: linear between grid points, the first point's below it, the last
    segment's line above it."""
    if n <= grid[0]:
        return ms[0]
    i = min(bisect.bisect_left(grid, n), len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    return ms[i - 1] + (ms[i] - ms[i - 1]) * (n - lo) / (hi - lo)


def batches(lengths, batch, epochs, seed):
    """[(rows, longest row)] of epochs shuffles of lengths in batches of batch (the last may be short)."""
    rng, out = random.Random(seed), []
    for _ in range(epochs):
        order = lengths[:]
        rng.shuffle(order)
        out += [(len(order[i:i + batch]), max(order[i:i + batch])) for i in range(0, len(order), batch)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", required=True, help="token counts of the samples, one a line")
    ap.add_argument("--grid", default="256,512,768,1024,1536,2048,2560,3072", help="padded lengths to time")
    ap.add_argument("--target-config", default="qwen3-8b", choices=sorted(TARGETS))
    ap.add_argument("--mode", default="shipped", choices=["shipped", "best"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--drafter-layers", type=int, default=5)
    ap.add_argument("--loss-chunk-blocks", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per length")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps per length after its first")
    ap.add_argument("--epochs", type=int, default=10, help="shuffles of the data set replayed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="FILE", help="write the report as JSON")
    a = ap.parse_args()
    lengths = [int(x) for x in open(a.lengths).read().split()]
    grid = sorted({int(x) for x in a.grid.split(",")})
    if not lengths or not grid or grid[0] < 16:
        ap.error("want lengths and a grid of lengths of at least 16")
    import torch
    import step_peer  # torch and transformers: the GPU machine's
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape, V, D = TARGETS[a.target_config], step_peer.QWEN3_VOCAB, 128
    t0, points = time.perf_counter(), []
    for n in grid:
        pa = peer_args(a, n)
        r, peer = step_peer.run(pa, shape, V, D, dev)
        step_peer.print_report(r)
        points.append({"len": n, "anchors": pa.anchors, "step_ms": r["step_ms"], "first_step_ms": r["first_step_ms"],
                       "peak_device_reserved_bytes": r["peak_device_reserved_bytes"]})
        del peer
        torch._dynamo.reset()  # compiled code of the next length only; none holding this drafter
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    ms = [p["step_ms"] for p in points]
    bs = batches(lengths, a.batch, a.epochs, a.seed)
    seconds = sum(interp(grid, ms, m) for _, m in bs) / 1e3
    samples = sum(rows for rows, _ in bs)
    maxima = sorted(m for _, m in bs)
    rep = {"target": a.target_config, "mode": a.mode, "batch": a.batch, "device": r["device"], "torch": r["torch"],
           "transformers": r["transformers"], "lengths_file": a.lengths, "samples_in_file": len(lengths),
           "epochs": a.epochs, "grid": points, "batches": len(bs), "samples": samples, "seconds": seconds,
           "samples_per_s": samples / seconds,
           "batch_longest": {"p50": maxima[len(maxima) // 2], "p90": maxima[int(0.9 * len(maxima))],
                             "mean": sum(maxima) / len(maxima)},
           "wall_s": time.perf_counter() - t0}
    print(f"peer {a.mode}: {rep['samples_per_s']:.2f} samples/s over {len(bs)} batches of {a.batch} "
          f"(longest row: median {rep['batch_longest']['p50']}, p90 {rep['batch_longest']['p90']}); "
          "step ms by padded length " + ", ".join(f"{p['len']}: {p['step_ms']:.0f}" for p in points))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
