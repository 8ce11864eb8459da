#!/usr/bin/env bash
# gpu-step-prof.sh: where a GPU training step's time goes, op by op. It runs
# `dflash bench step --device cuda --profile` (default: the qwen3-8b case of
# issue 14; ARGS overrides the shape): the timed steps, then one more step
# with every op of the CUDA backend between two events, summed by phase and
# label (op, shape, dtypes), GEMMs with their TFLOP/s.
#
# Build here first: bash scripts/gpu-train.sh --build
# Device call, carry [".devbuild/train.txz"]: bash scripts/gpu-step-prof.sh
# Output: the table on stdout and in $OUT/step-prof.txt (the 60 largest kinds
# of op; `--json` instead of the table lists every one), the log beside it.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/devbuild.sh
BIN=${BIN:-$B/dflash} # the dflash binary
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
ARGS=${ARGS:---target-config qwen3-8b --seq-len 3072 --batch 4 --anchors 512 --block-size 16 --drafter-layers 5}
# shellcheck disable=SC2086
timeout "${TIMEOUT:-300}" "$BIN" bench step --device cuda $ARGS --steps "${STEPS:-3}" --warmup "${WARMUP:-1}" --profile \
	>"$OUT/step-prof.txt" 2>"$OUT/step-prof.log" || { echo "gpu-step-prof: bench step failed"; tail -n 20 "$OUT/step-prof.log"; exit 1; }
cat "$OUT/step-prof.txt"
