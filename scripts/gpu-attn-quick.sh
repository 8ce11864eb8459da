#!/usr/bin/env bash
# gpu-attn-quick.sh: the short device call used for each kernel step in
# docs/PERF.md: the Go GPU attention tests, then dflash's timings of every
# case of scripts/flex_cases.sh (no PyTorch timings: scripts/gpu-attn.sh
# runs both sides), optionally a check against PyTorch on inputs saved from
# Go, and Nsight Compute stall reasons of case (a).
#
# Built here first (no Go on the GPU machine):
#   CGO_ENABLED=0 go test -c -o .devbuild/flexcuda.test ./flex/flexcuda
#   CGO_ENABLED=0 go build -o .devbuild/dflash ./cmd/dflash
# then on the device, carry [.devbuild/flexcuda.test, .devbuild/dflash]
# (or the training build, [".devbuild/train.txz"] of gpu-train.sh --build):
#   [TEST_VARIANTS="default portable"] [TEST_TIMEOUT=150] [VARIANTS="hopper portable hopper/portable"] [CASES_ONLY=a_causal_d128,b_dflash]
#   [PEER=a_causal_d256] [SAVE=b_dflash] [NCU=1] bash scripts/gpu-attn-quick.sh
# TEST_VARIANTS runs the tests and VARIANTS times each case once per listed
# kernel choice, side by side in the same call. A choice is "default"
# (nothing set), "K" (DFLASH_FLEX_FWD and DFLASH_FLEX_BWD both K, hopper or
# portable) or "F/B" (forward F, backward B); the tuning switches that once
# followed a choice are gone (kernels/dev/README.md). SAVE saves
# one call of each listed case (default version) and compares it with
# PyTorch's flex_attention on those inputs (bench/flex_peer.py --check).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .devbuild/flexcuda.test ]; then # the training build's binaries
  . scripts/devbuild.sh
  cp "$B/flexcuda.test" "$B/dflash" .devbuild/ || exit 1
fi
. scripts/flex_cases.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
# venv sets env to the environment of kernel choice $1.
venv() {
  env=()
  local v=$1
  [ "$v" = default ] && return
  env+=(DFLASH_FLEX_FWD=${v%%/*} DFLASH_FLEX_BWD=${v##*/})
}
for v in ${TEST_VARIANTS:-default}; do
  venv "$v"
  T=${TEST_TIMEOUT:-150}
  env "${env[@]}" timeout $T .devbuild/flexcuda.test -test.v -test.run 'TestGPUAttention$|TestGPUDeterministic|TestGPUSpecialisation|TestGPUScoreTensorGrads|TestGPUChecked' \
    -test.timeout $((T - 1))s > /tmp/gpu-quick-test.log 2>&1
  echo "tests ($v) exit $?"
  grep -E -- '^(--- |PASS|FAIL|ok)|panic' /tmp/gpu-quick-test.log | sort | uniq -c | head -12
  grep -E -- 'FAIL|Error|error' /tmp/gpu-quick-test.log | head -8 | cut -c1-300
  grep -A4 'running tests' /tmp/gpu-quick-test.log
  [ -n "${OUT:-}" ] && cp /tmp/gpu-quick-test.log "$OUT/attn-tests-${v//[^a-zA-Z0-9=_-]/_}.log"
done
C=$(mktemp -d)
for c in "${CASES[@]}"; do
  set -- $c
  n=$1
  shift
  [ -n "${CASES_ONLY:-}" ] && [[ ",$CASES_ONLY," != *",$n,"* ]] && continue
  for v in ${VARIANTS:-default}; do
    venv "$v"
    env "${env[@]}" timeout 30 .devbuild/dflash bench attention --device cuda --cache-dir "$C" --json \
      --reps 20 --reps-fb 10 --warmup 3 --build-reps 2 "$@" > /tmp/gpu-quick.json 2>/tmp/gpu-quick.err
    echo "$n $v exit $? $(python3 -c "import json;d=json.load(open('/tmp/gpu-quick.json'));print('fwd %.3f f+b %.3f'%(d['forward_ms'],d['forward_backward_ms']), d['spec'], [(k['name'],k['registers'],k['local_bytes']) for k in d['compile']['kernels'] if k['name'] in ('flex_fwd','flex_bwd_dkdv')])" 2>&1 | tail -1) $(tail -c 300 /tmp/gpu-quick.err)"
  done
done
if [ -n "${SAVE:-}" ]; then # dflash's outputs against PyTorch on the same inputs
  S=$(mktemp -d)
  for c in "${CASES[@]}"; do
    set -- $c
    n=$1
    shift
    [[ ",$SAVE," != *",$n,"* ]] && continue
    timeout 60 .devbuild/dflash bench attention --device cuda --cache-dir "$C" --json --reps 2 --reps-fb 1 --warmup 1 --build-reps 1 \
      --save "$S/ours_$n.safetensors" "$@" > /dev/null 2>/tmp/gpu-quick.err || { echo "save $n failed"; tail -5 /tmp/gpu-quick.err; }
  done
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/flex_peer.py --cases "$SAVE" --check "$S" --check-only 2>&1 | grep -E '^\{|Error' | cut -c1-600
fi
if [ -n "${PEER:-}" ]; then # PyTorch compiled flex_attention on these cases (comma list)
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/flex_peer.py --cases "$PEER" --json /tmp/gpu-quick-peer.json 2>&1 | grep -E '^\{' | cut -c1-300
fi
if [ "${NCU:-0}" = 1 ]; then
  NCUB=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  set -- ${CASES[0]}
  shift
  # launches 1-4 are the forward timing runs; then forward, backward pairs
  timeout 120 "$NCUB" --clock-control none -k 'regex:flex_fwd|flex_bwd_dkdv' --launch-skip 5 --launch-count 2 \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,gpu__time_duration.sum' \
    .devbuild/dflash bench attention --device cuda --reps 3 --reps-fb 2 --warmup 1 --build-reps 1 "$@" 2>&1 |
    grep -E 'flex_|stalled|pipe|duration' | awk '$NF+0 > 0.05 || /pipe|duration|flex_/' | sed 's/smsp__average_warps_issue_stalled_//' | cut -c1-120
fi
