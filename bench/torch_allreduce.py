#!/usr/bin/env python3
"""torch_allreduce.py: the PyTorch peer of `dflash nccl check`.

Spawns one process per GPU (no torchrun) that join a torch.distributed NCCL
group on loopback, all-reduce (sum) the same inputs dflash uses, check the
result exactly, hash it the way dflash does, and time it the way dflash
does: CUDA events around ITERS back-to-back all-reduces after WARMUP, the
slowest rank counting, busBw = bytes/time * 2(n-1)/n (NCCL's definition).

Inputs (see ncclcheck/doc.go): rank r of n holds, at element i,
  v_r(i) = 1 + (i + 7r) mod p,  p = min(31, 256 // n)
so every partial sum is an integer <= 256, exact in bf16 and f32. The
SHA-256 of the result bytes (little-endian) equals dflash's row digest.

NVLink multicast is kept off before torch is imported (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1); a run with one
of them set otherwise is refused. Children inherit the environment.

Usage: python3 bench/torch_allreduce.py [--gpus 2] [--sizes 256M] [--dtype bf16,f32]
                                        [--iters 0] [--warmup 5] [--out FILE]
Prints one JSON object (rank 0) on stdout; --out writes it to FILE too.
"""
import argparse
import hashlib
import json
import os
import socket
import sys

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def guard_multicast():
    bad = []
    for k, v in MULTICAST_OFF.items():
        cur = os.environ.get(k, "")
        if cur == "":
            os.environ[k] = v
        elif cur != v:
            bad.append(f"{k}={cur!r} must be {v!r} or unset")
    algo = os.environ.get("NCCL_ALGO", "")
    for part in algo.split(";"):
        part = part.split(":", 1)[-1].strip()
        if part.startswith("^"):
            continue
        if any(a.strip().lower() in ("nvls", "nvlstree") for a in part.split(",")):
            bad.append(f"NCCL_ALGO={algo!r} names an NVLS algorithm")
    if bad:
        sys.exit("torch_allreduce: NVLink multicast must stay off: " + "; ".join(bad))


guard_multicast()  # before torch (and NCCL) is imported

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def parse_size(s):
    s = s.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if mult > 1 else s) * mult


def fmt_size(n):
    for unit, sh in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << sh and n % (1 << sh) == 0:
            return f"{n >> sh}{unit}"
    return str(n)


def auto_iters(nbytes):
    return int(min(500, max(20, (1 << 30) // nbytes)))


def inputs(rank, n, count, device, dtype):
    p = min(31, 256 // n)
    i = torch.arange(count, device=device, dtype=torch.int64)
    return (1 + (i + 7 * rank) % p).to(dtype)


def expected(n, count, device):
    p = min(31, 256 // n)
    i = torch.arange(count, device=device, dtype=torch.int64)
    s = torch.zeros(count, device=device, dtype=torch.int64)
    for r in range(n):
        s += 1 + (i + 7 * r) % p
    return s


def worker(rank, world, port, args, q):
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", world_size=world, rank=rank, device_id=dev)
    rows = []
    for dname in args.dtype.split(","):
        dname = {"bf16": "bf16", "f32": "f32", "fp32": "f32"}[dname.strip()]  # dflash's names
        dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[dname]
        esize = torch.tensor([], dtype=dtype).element_size()
        for nbytes in [parse_size(s) for s in args.sizes.split(",")]:
            count = nbytes // esize
            x = inputs(rank, world, count, dev, dtype)
            work = x.clone()
            dist.all_reduce(work)  # sum, in place
            torch.cuda.synchronize()
            exact = bool(torch.equal(work.to(torch.int64), expected(world, count, dev)))
            digest = hashlib.sha256(work.cpu().view(torch.uint8).numpy().tobytes()).hexdigest()
            for _ in range(args.warmup):
                dist.all_reduce(work)
            iters = args.iters or auto_iters(nbytes)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                dist.all_reduce(work)
            stop.record()
            stop.synchronize()
            t = torch.tensor([start.elapsed_time(stop) / 1e3 / iters], device=dev, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank counts
            ok = torch.tensor([1 if exact else 0], device=dev)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            sec = t.item()
            algbw = nbytes / sec / 1e9
            rows.append({"dtype": dname, "bytes": nbytes, "size": fmt_size(nbytes), "count": count,
                         "exact": bool(ok.item()), "sha256": digest, "iters": iters, "time_us": sec * 1e6,
                         "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world - 1) / world})
            del x, work
    if rank == 0:
        q.put({"impl": "torch.distributed", "torch": torch.__version__,
               "nccl": ".".join(map(str, torch.cuda.nccl.version())), "world": world,
               "gpu": torch.cuda.get_device_name(0),
               "env": {k: os.environ.get(k) for k in MULTICAST_OFF}, "rows": rows})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--sizes", default="256M", help="comma-separated sizes in bytes (K, M, G suffixes)")
    ap.add_argument("--dtype", default="bf16,f32")
    ap.add_argument("--iters", type=int, default=0, help="0: enough for about 1 GiB, 20..500 (as dflash)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    have = torch.cuda.device_count()
    if have < args.gpus:
        sys.exit(f"torch_allreduce: --gpus {args.gpus} but torch sees {have} GPU(s)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.start_processes(worker, args=(args.gpus, port, args, q), nprocs=args.gpus, join=True, start_method="spawn")
    res = q.get(timeout=60)
    res["pass"] = all(r["exact"] for r in res["rows"])
    line = json.dumps(res)
    print(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")
    sys.exit(0 if res["pass"] else 1)


if __name__ == "__main__":
    main()
