#!/usr/bin/env bash
# gpu-attn.sh: the one device call for GPU flex attention (issue 6).
#
# Built here first (no Go on the GPU machine):
#   CGO_ENABLED=0 go test -c -o .devbuild/flexcuda.test ./flex/flexcuda
#   CGO_ENABLED=0 go build -o .devbuild/dflash ./cmd/dflash
# then run on the device with carry [.devbuild/flexcuda.test, .devbuild/dflash]:
#   bash scripts/gpu-attn.sh          (BUDGET=seconds bounds the whole run, default 465)
#
# It runs, in order: the Go GPU tests (correctness vs the CPU float64
# reference, score-tensor gradients of both backward kernels at every head
# dimension, GPU block-mask builders, 100 calls with one compile per
# specialisation); `dflash bench attention --device cuda` on the issue's cases
# in a fresh kernel cache (cold compile + timing), then each case again with
# --compile-only in a new process (warm from disk); bench/flex_peer.py
# (PyTorch compiled flex_attention) on identical shapes, which also runs each
# call dflash saved (--save: inputs, mask tensors, outputs, gradients) through
# flex_attention and reports the relative errors; and prints the ratio
# table (scripts/flex_ratio.py). nvcc's resource report and SASS facts of the
# generated sources (TestWriteSources) are gathered meanwhile on the CPU. Results: $OUT/results.tgz,
# $OUT/go-test.log, $OUT/table.txt. With an older build in .devbuild/old
# (dflash and its flex_cases.sh), the cases also run on it in the same call
# and $OUT/table-old.txt is its ratio table.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-attn}
RES=$(mktemp -d)/gpu-attn
mkdir -p "$OUT" "$RES"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$RES/gpu.txt"

# nvcc resources and SASS of the generated sources (causal mask, both
# kernels, every head dimension; CPU only, in the background).
SRC=$(mktemp -d)
DFLASH_FLEX_WRITE_SOURCES=$SRC .devbuild/flexcuda.test -test.run '^TestWriteSources$' > /dev/null 2>&1
(
  for f in "$SRC"/*.cu; do
    arch="-arch=sm_90"
    case $(basename "$f") in hopper_*) arch="-gencode=arch=compute_90a,code=sm_90a" ;; esac
    echo "== $(basename "$f" .cu)"
    nvcc $arch -std=c++17 -Xptxas -v -cubin -o "$f.cubin" "$f" 2>&1 | grep -E "error|Function properties|registers|spill|C75"
    cuobjdump -sass "$f.cubin" | grep -oE "HGMMA|HMMA\.[0-9A-Z.]+|LDSM|LDGSTS|LDL|STL" | sort | uniq -c | tr '\n' ' '; echo
    rm -f "$f.cubin"
  done
) > "$RES/resources.txt" 2>&1 &
NVCC_PID=$!

stamp "Go GPU tests"
if [ -x .devbuild/flexcuda.test ]; then
  timeout 260 .devbuild/flexcuda.test -test.v -test.run 'GPU' -test.timeout 255s > "$OUT/go-test.log" 2>&1
  echo "go test exit $?"
  grep -E "^(--- |PASS|FAIL|ok)|empty_rows=|relative error|differs|NaN|fully masked|compiles|compiled|block mask 512|panic|seed" "$OUT/go-test.log" | head -80
else
  echo "missing .devbuild/flexcuda.test"
fi

. scripts/flex_cases.sh
CACHE=$(mktemp -d)/kernels
SAVE=$(mktemp -d) # saved calls (hundreds of MB; not brought back)
stamp "dflash bench (cold cache $CACHE)"
if [ -x .devbuild/dflash ]; then
  for c in "${CASES[@]}"; do
    set -- $c; name=$1; shift
    # --save: the last call's inputs and outputs, for the PyTorch comparison below
    timeout 60 .devbuild/dflash bench attention --device cuda --cache-dir "$CACHE" --json --save "$SAVE/ours_$name.safetensors" "$@" \
      > "$RES/ours_$name.json" 2>> "$RES/ours.log"
    echo "$name exit $? $(python3 -c "import json,sys;d=json.load(open('$RES/ours_$name.json'));print('fwd %.3f ms fwd+bwd %.3f ms prepare %.0f ms compiles %d'%(d['forward_ms'],d['forward_backward_ms'],d['compile']['prepare_ms'],d['compile']['compiles']))" 2>&1 | tail -1)"
  done
  stamp "dflash bench --compile-only (warm from disk)"
  for c in "${CASES[@]}"; do
    set -- $c; name=$1; shift
    timeout 30 .devbuild/dflash bench attention --device cuda --cache-dir "$CACHE" --json --compile-only "$@" > "$RES/ours_${name}_warm.json" 2>> "$RES/ours.log"
  done
  tail -n 5 "$RES/ours.log"
  # A same-call baseline: an older build in .devbuild/old (dflash and the
  # flex_cases.sh it was built with), timed on its own cold cache.
  if [ -x .devbuild/old/dflash ]; then
    stamp "baseline .devbuild/old/dflash"
    OLDCACHE=$(mktemp -d)/kernels
    ( . .devbuild/old/flex_cases.sh
      for c in "${CASES[@]}"; do
        set -- $c; name=$1; shift
        timeout 40 .devbuild/old/dflash bench attention --device cuda --cache-dir "$OLDCACHE" --json "$@" > "$RES/ours_${name}_old.json" 2>> "$RES/old.log"
        echo "$name (old) exit $?"
      done )
  fi
else
  echo "missing .devbuild/dflash"
fi

LEFT=$(( ${BUDGET:-465} - ($(date +%s) - T0) ))
stamp "PyTorch peer (${LEFT}s left)"
timeout $(( LEFT > 30 ? LEFT : 30 )) python3 bench/flex_peer.py --json "$RES/peer.json" --check "$SAVE" > "$RES/peer.log" 2>&1
echo "peer exit $?"; grep -vE "Warning|warn\(" "$RES/peer.log" | cut -c1-400 | tail -n 8
rm -rf "$SAVE"

wait $NVCC_PID
stamp "done"
echo; echo "== nvcc resources (CUDA on the device)"; cat "$RES/resources.txt"
echo; echo "== ratio table"
python3 scripts/flex_ratio.py "$RES" | tee "$OUT/table.txt"
if ls "$RES"/ours_*_old.json > /dev/null 2>&1; then
  echo; echo "== ratio table of the baseline build (.devbuild/old), same call"
  python3 scripts/flex_ratio.py "$RES" _old | tee "$OUT/table-old.txt"
fi
cp "$OUT/go-test.log" "$RES/" 2>/dev/null
tar czf "$OUT/results.tgz" -C "$(dirname "$RES")" gpu-attn
