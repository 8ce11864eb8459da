#!/usr/bin/env bash
# gpu-attn-v5.sh: one short device call for flex attention v5 (docs/PERF.md):
# GPU correctness (deterministic backward: accuracy and bitwise repeat; v5
# forward), then dflash timings of forward v4 vs v5 and atomic vs
# deterministic backward on (a) causal D128 and (b) DFlash, then PyTorch's
# compiled flex_attention on (a) and (b) with few reps; table last.
#
# Built here first (no Go on the GPU machine):
#   CGO_ENABLED=0 go test -c -o .devbuild/flexcuda.test ./flex/flexcuda
#   CGO_ENABLED=0 go build -o .devbuild/dflash ./cmd/dflash
# then on the device, carry [.devbuild]: BUDGET=120 bash scripts/gpu-attn-v5.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-attn-v5}
FINAL=$OUT            # at most 8 files come back: logs and JSON go in one tarball
OUT=$(mktemp -d)/v5
mkdir -p "$OUT" "$FINAL"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
BUDGET=${BUDGET:-120}
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader

stamp "Go GPU tests: deterministic (fwd v5), TestGPUAttention fwd v5, TestGPUAttention default"
T=.devbuild/flexcuda.test
DFLASH_FLEX_FWD=5 timeout 40 $T -test.v -test.run 'TestGPUDeterministicBackward' -test.timeout 39s > "$OUT/test-det.log" 2>&1 &
P1=$!
DFLASH_FLEX_FWD=5 timeout 40 $T -test.v -test.run 'TestGPUAttention$' -test.timeout 39s > "$OUT/test-v5.log" 2>&1 &
P2=$!
timeout 40 $T -test.v -test.run 'TestGPUAttention$' -test.timeout 39s > "$OUT/test-v4.log" 2>&1
echo "test default exit $?"; wait $P1; echo "test det exit $?"; wait $P2; echo "test v5 exit $?"
for f in det v5 v4; do
  echo "-- $f"; grep -E "^(--- FAIL|FAIL|ok|PASS)|panic|relative error|differ" "$OUT/test-$f.log" | head -8
done
grep -hoE "repeat_bit_diffs=map\[[^]]*\]" "$OUT/test-v4.log" | sort | uniq -c | head -6

CACHE=$(mktemp -d)/kernels
A="a_causal_d128 --mask causal --batch 4 --heads 16 --kv-heads 16 --seq 4096 --head-dim 128"
B="b_dflash --mask dflash --batch 1 --heads 32 --kv-heads 8 --anchors 512 --block-size 16 --context 3072 --head-dim 128"
stamp "dflash bench"
# variant: tag, forward version, backward version, flags; b3 = GQA group in one CTA
for c in "$A" "$B"; do
  for v in "v4_atomic 4 4" "v5_atomic 5 4" "v5_det 5 4 --deterministic" "v5_det_b3 5 3 --deterministic" "v4_atomic_again 4 4"; do
    set -- $c; name=$1; shift; args=("$@")
    set -- $v; tag=$1; fv=$2; bv=$3; shift 3
    [ $name = a_causal_d128 ] && [ $tag = v5_det_b3 ] && continue # G1: b3 differs only in grid order
    DFLASH_FLEX_FWD=$fv DFLASH_FLEX_BWD=$bv timeout 20 .devbuild/dflash bench attention --device cuda --cache-dir "$CACHE" --json \
      --reps 20 --reps-fb 12 --warmup 3 --build-reps 5 "${args[@]}" "$@" > "$OUT/ours_${name}_$tag.json" 2>> "$OUT/ours.log"
    echo "$name $tag exit $? $(python3 -c "import json;d=json.load(open('$OUT/ours_${name}_$tag.json'));print('fwd %.3f f+b %.3f spec %s'%(d['forward_ms'],d['forward_backward_ms'],d['spec']))" 2>&1 | tail -1)"
  done
done

LEFT=$(( BUDGET - ($(date +%s) - T0) - 6 ))
stamp "PyTorch peer (${LEFT}s left)"
if [ $LEFT -gt 15 ]; then
  FLEX_PEER_ITERS=10 FLEX_PEER_FB_ITERS=6 FLEX_PEER_NO_CBM=1 timeout $LEFT \
    python3 bench/flex_peer.py --cases a_causal_d128,b_dflash --json "$OUT/peer.json" > "$OUT/peer.log" 2>&1
  echo "peer exit $?"; grep -E '^\{' "$OUT/peer.log" | cut -c1-260
fi
stamp "done"
python3 scripts/flex_v5_table.py "$OUT" | tee "$OUT/table_v5.txt"
cp "$OUT/table_v5.txt" "$FINAL/"
tar czf "$FINAL/v5-results.tar.gz" -C "$(dirname "$OUT")" v5
