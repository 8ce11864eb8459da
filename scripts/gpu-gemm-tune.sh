#!/usr/bin/env bash
# gpu-gemm-tune.sh measures cuBLASLt's candidates for the GEMM shapes of the
# 8B drafter training step (issue 14) and checks GEMM tuning, in one device
# call (about 30 s on an H200):
#   1. TestGemmStepShapes: every heuristic candidate of each shape with 32,
#      128 and 256 MiB workspaces, three interleaved rounds; a table of the
#      heuristic's first (#0) against the best by tuning's rule (>2% faster)
#      in ms and TFLOP/s, each candidate's TFLOP/s, and the sum over shapes
#      of the ms per call the best would save.
#   2. TestGPUGemmTuning: DFLASH_GEMM_TUNE's mechanism: candidates timed on
#      scratch (results against float64, the caller's C untouched), the
#      choice saved and taken from disk by a "second process" without
#      timing, and a tuned GEMM replayed as a CUDA graph.
# Build here first: bash scripts/build-device.sh (or bash scripts/gpu-train.sh
# --build, whose gpu.test it takes when .devbuild/runtime has none)
# Device call, carry [".devbuild/runtime"] (or [".devbuild/train.txz"]):
#   bash scripts/gpu-gemm-tune.sh
# Output: the table on stdout and $OUT/gemm-tune.log; $OUT/results.jsonl.
# The last line says PASS or FAIL.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
. scripts/devbuild.sh
BIN=.devbuild/runtime/gpu.test
[ -x "$BIN" ] || BIN=$B/gpu.test
LOG=$OUT/gemm-tune.log
export DFLASH_RESULTS=$OUT/results.jsonl
: >"$DFLASH_RESULTS"
if [ ! -x "$BIN" ]; then
	echo "$BIN is missing: run bash scripts/build-device.sh or bash scripts/gpu-train.sh --build here first" | tee "$LOG"
	exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee "$LOG"
ok=1
DFLASH_GEMM_BENCH=1 "$BIN" -test.v -test.count=1 -test.timeout=300s -test.run='^(TestGemmStepShapes|TestGPUGemmTuning)$' 2>&1 | tee -a "$LOG"
[ "${PIPESTATUS[0]}" -eq 0 ] || ok=0
grep -q -- '--- SKIP' "$LOG" && ok=0
if [ "$ok" = 1 ]; then echo PASS; else echo FAIL; fi
