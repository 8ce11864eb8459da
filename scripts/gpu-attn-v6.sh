#!/usr/bin/env bash
# gpu-attn-v6.sh: one short device call for the wgmma kernels (v6): the Go
# GPU attention tests with DFLASH_FLEX_FWD=6 DFLASH_FLEX_BWD=6, then dflash
# timings of v4 and v6 (forward and backward) on the issue's cases (no PyTorch peer: docs/PERF.md has its
# numbers from earlier calls; scripts/gpu-attn.sh runs both sides).
#
# Built here first (no Go on the GPU machine):
#   CGO_ENABLED=0 go test -c -o .devbuild/flexcuda.test ./flex/flexcuda
#   CGO_ENABLED=0 go build -o .devbuild/dflash ./cmd/dflash
# then on the device, carry [.devbuild/flexcuda.test, .devbuild/dflash]:
#   bash scripts/gpu-attn-v6.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-attn-v6}
RES=$(mktemp -d)/v6
mkdir -p "$OUT" "$RES"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
T=.devbuild/flexcuda.test
stamp "Go GPU tests, forward v6"
DFLASH_FLEX_FWD=6 DFLASH_FLEX_BWD=6 timeout 60 $T -test.v -test.run "${TESTS:-TestGPUAttention\$}" -test.timeout 59s > "$RES/test-v6.log" 2>&1
echo "test v6 exit $?"
grep -E "^(--- FAIL|FAIL|ok|PASS)|panic|relative error|differ|flex_fwd" "$RES/test-v6.log" | head -30

CACHE=$(mktemp -d)/kernels
CASES=(
  "a_causal_d128 --mask causal --batch 4 --heads 16 --kv-heads 16 --seq 4096 --head-dim 128"
  "b_dflash --mask dflash --batch 1 --heads 32 --kv-heads 8 --anchors 512 --block-size 16 --context 3072 --head-dim 128"
  "c_document --mask document --batch 1 --heads 16 --kv-heads 16 --seq 8192 --doc-len 1024 --head-dim 128"
  "d_window --mask window --batch 1 --heads 16 --kv-heads 16 --seq 16384 --window 1024 --head-dim 128"
  "a_causal_d64 --mask causal --batch 4 --heads 16 --kv-heads 16 --seq 4096 --head-dim 64"
)
stamp "dflash bench"
for c in "${CASES[@]}"; do
  set -- $c; name=$1; shift
  for fv in ${VARIANTS:-4 6}; do
    DFLASH_FLEX_FWD=$fv DFLASH_FLEX_BWD=$fv timeout 30 .devbuild/dflash bench attention --device cuda --cache-dir "$CACHE" --json \
      --reps 20 --reps-fb 10 --warmup 3 --build-reps 5 "$@" > "$RES/ours_${name}_v$fv.json" 2>> "$RES/ours.log"
    echo "$name v$fv exit $? $(python3 -c "import json;d=json.load(open('$RES/ours_${name}_v$fv.json'));print('fwd %.3f f+b %.3f kernels %s'%(d['forward_ms'],d['forward_backward_ms'],[(k['name'],k['registers'],k['local_bytes']) for k in d['compile'].get('kernels',[])]))" 2>&1 | tail -1)"
  done
done
tail -n 5 "$RES/ours.log"
stamp "done"
tar czf "$OUT/v6-results.tar.gz" -C "$(dirname "$RES")" v6
