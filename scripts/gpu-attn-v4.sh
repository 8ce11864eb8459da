#!/usr/bin/env bash
# gpu-attn-v4.sh: one device call comparing flex attention kernel versions
# v3 and v4 (docs/PERF.md) against PyTorch's compiled flex_attention.
#
# Built here first (no Go on the GPU machine):
#   CGO_ENABLED=0 go test -c -o .devbuild/flexcuda.test ./flex/flexcuda
#   CGO_ENABLED=0 go build -o .devbuild/dflash ./cmd/dflash
# then on the device, carry [.devbuild]: BUDGET=300 bash scripts/gpu-attn-v4.sh
#
# Order: nvcc resource reports of each variant (background, CPU); the Go GPU
# tests with the default variants and, alongside, TestGPUAttention with v3
# (DFLASH_FLEX_FWD=3 DFLASH_FLEX_BWD=3); `dflash bench attention` on cases
# (a) D128, (b), (d), (a) D64 for v3 and v4; then bench/flex_peer.py on the
# same cases with the remaining time; ratio tables last. Results under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-attn-v4}
RES=$OUT/res
mkdir -p "$RES"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
BUDGET=${BUDGET:-300}
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$RES/gpu.txt"

(
  for spec in "flex_fwd 128 -DFLEX_FWD_MT=1" "flex_fwd 128 -DFLEX_FWD_MT=2 -DFLEX_FWD_ORDER=1" \
              "flex_fwd 64 -DFLEX_FWD_MT=1" "flex_fwd 64 -DFLEX_FWD_MT=2 -DFLEX_FWD_ORDER=1" \
              "flex_bwd 128 -DFLEX_BWD_ORDER=0" "flex_bwd 128 -DFLEX_BWD_ORDER=1" \
              "flex_bwd 128 -DFLEX_GROUP=4 -DFLEX_BWD_ORDER=1 -DFLEX_BWD_SPLIT=1" "flex_bwd 64 -DFLEX_BWD_ORDER=1"; do
    set -- $spec; f=$1; d=$2; shift 2
    echo "== $f D=$d $*"
    nvcc -arch=sm_90 -std=c++17 -Xptxas -v -cubin -DFLEX_D=$d "$@" -o "$RES/k.cubin" kernels/$f.cu 2>&1 | grep -A2 -E "for (flex_fwd|flex_bwd_dkdv)$" | grep -E "error|registers|spill"
    cuobjdump -sass "$RES/k.cubin" | grep -oE "HGMMA|HMMA\.[0-9A-Z.]+|LDSM|LDL|STL|RED\.[A-Z0-9.]+" | sort | uniq -c | tr '\n' ' '; echo
  done
  rm -f "$RES/k.cubin"
) > "$RES/resources.txt" 2>&1 &
NVCC_PID=$!

stamp "Go GPU tests (default variants; v3 TestGPUAttention alongside)"
DFLASH_FLEX_FWD=3 DFLASH_FLEX_BWD=3 timeout 100 .devbuild/flexcuda.test -test.v -test.run 'TestGPUAttention' -test.timeout 95s > "$OUT/go-test-v3.log" 2>&1 &
V3_PID=$!
timeout 100 .devbuild/flexcuda.test -test.v -test.run 'GPU' -test.timeout 95s > "$OUT/go-test.log" 2>&1
echo "go test (default) exit $?"
wait $V3_PID; echo "go test (v3 TestGPUAttention) exit $?"
grep -E "^(--- |PASS|FAIL|ok)|panic" "$OUT/go-test.log" | head -30
grep -E "^(--- FAIL|FAIL|ok|PASS)|panic" "$OUT/go-test-v3.log" | head -10
grep -E "relative error|rel" "$OUT/go-test.log" | head -12

CASES=(
  "b_dflash --mask dflash --batch 1 --heads 32 --kv-heads 8 --anchors 512 --block-size 16 --context 3072 --head-dim 128"
  "a_causal_d128 --mask causal --batch 4 --heads 16 --kv-heads 16 --seq 4096 --head-dim 128"
  "d_window --mask window --batch 1 --heads 16 --kv-heads 16 --seq 16384 --window 1024 --head-dim 128"
  "a_causal_d64 --mask causal --batch 4 --heads 16 --kv-heads 16 --seq 4096 --head-dim 64"
)
CACHE=$(mktemp -d)/kernels # not under $OUT: the image files would crowd out the results
stamp "dflash bench v3 / v4"
for c in "${CASES[@]}"; do
  set -- $c; name=$1; shift
  for v in 3 4; do
    DFLASH_FLEX_FWD=$v DFLASH_FLEX_BWD=$v timeout 40 .devbuild/dflash bench attention --device cuda --cache-dir "$CACHE" --json \
      --reps 20 --reps-fb 12 --warmup 3 --build-reps 5 "$@" > "$RES/ours_${name}_v$v.json" 2>> "$RES/ours.log"
    echo "$name v$v exit $? $(python3 -c "import json;d=json.load(open('$RES/ours_${name}_v$v.json'));print('fwd %.3f ms fwd+bwd %.3f ms bwd %.3f prepare %.0f ms; %s'%(d['forward_ms'],d['forward_backward_ms'],d['forward_backward_ms']-d['forward_ms'],d['compile']['prepare_ms'],' '.join('%s:%dr/%dB'%(k['name'],k['registers'],k['local_bytes']) for k in d['compile']['kernels'][:3])))" 2>&1 | tail -1)"
  done
done
tail -n 3 "$RES/ours.log"

LEFT=$(( BUDGET - ($(date +%s) - T0) - 12 ))
stamp "PyTorch peer (${LEFT}s left)"
FLEX_PEER_ITERS=20 FLEX_PEER_FB_ITERS=12 FLEX_PEER_NO_CBM=1 timeout $(( LEFT > 20 ? LEFT : 20 )) \
  python3 bench/flex_peer.py --cases b_dflash,a_causal_d128,d_window,a_causal_d64 --json "$RES/peer.json" > "$RES/peer.log" 2>&1
echo "peer exit $?"; grep -E '^\{' "$RES/peer.log" | cut -c1-300

wait $NVCC_PID
stamp "done"
echo "== nvcc resources (CUDA on the device)"; cat "$RES/resources.txt"
for v in 3 4; do
  echo; echo "== ratio table v$v"
  python3 scripts/flex_ratio.py "$RES" "_v$v" a_causal_d128,b_dflash,d_window,a_causal_d64 2>&1 | grep -vE "^  |^DFlash block|^PyTorch \(b\)" | tee "$OUT/table_v$v.txt"
done
