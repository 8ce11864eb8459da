#!/usr/bin/env bash
# gpu-attn.sh: the one device call for GPU flex attention. Builds the kernels
# with nvcc (resource report + SASS facts), runs the Go GPU test binaries and
# `dflash bench attention --device cuda` when they were built here into
# .devbuild/, then the Python check (correctness vs float64, timing vs
# compiled PyTorch flex_attention) which prints the ratio table last.
# Usage (device): OUT=/some/dir bash scripts/gpu-attn.sh [--skip-bench]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-attn}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
{
  for f in flex_fwd flex_bwd; do
    for d in 64 128 256; do
      echo "== $f D=$d"
      nvcc -arch=sm_90 -std=c++17 -Xptxas -v -cubin -DFLEX_D=$d -o /tmp/$f.$d.cubin kernels/$f.cu 2>&1 | grep -E "error|Function properties|registers|spill"
      cuobjdump -sass /tmp/$f.$d.cubin | grep -oE "HGMMA|HMMA\.[0-9A-Z.]+|LDSM|LDGSTS|LDL|STL" | sort | uniq -c | tr '\n' ' '; echo
    done
  done
} > "$OUT/resources.txt" 2>&1
grep -c HMMA "$OUT/resources.txt" >/dev/null && echo "resources: see resources.txt"
if ls .devbuild/*.test >/dev/null 2>&1; then
  for t in .devbuild/*.test; do
    echo "== $t"; "$t" -test.v -test.run 'GPU|Cuda|CUDA' 2>&1 | tee "$OUT/$(basename "$t").log" | tail -n 25
  done
fi
if [ -x .devbuild/dflash ]; then
  .devbuild/dflash bench attention --device cuda --json 2>&1 | tee "$OUT/dflash-bench.json" | tail -n 20
fi
python3 scripts/flex_gpu_check.py "$@" 2>&1 | tee "$OUT/check.log"
