"""torch_matmul.py: the PyTorch peer of dflash's cuBLASLt benchmark.

Times torch.matmul on bf16 8192x8192 @ 8192x8192 random-normal matrices the
way gpu.TestGemmThroughput times dflash: 10 warm-up products, then the mean
of 50 products between two CUDA events. Prints one JSON line and, when
$DFLASH_RESULTS is set (scripts/gpu-check.sh), appends it there.
"""
import json
import os

import torch


def main():
    n, warmup, iters = 8192, 10, 50
    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(warmup):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        torch.matmul(a, b, out=c)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end) / iters
    tflops = 2 * n**3 / (ms / 1e3) / 1e12
    rec = {
        "pkg": "torch",
        "check": "torch.matmul bf16 8192^3",
        "pass": True,
        "detail": "torch %s (CUDA %s) on %s" % (torch.__version__, torch.version.cuda, torch.cuda.get_device_name()),
        "metrics": {"torch_ms": ms, "torch_tflops": tflops},
    }
    line = json.dumps(rec)
    print(line, flush=True)
    path = os.environ.get("DFLASH_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
