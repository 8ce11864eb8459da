#!/usr/bin/env bash
# gpu-step-peer.sh: the PyTorch peer of `dflash bench step` (bench/step_peer.py, issue 14's
# side-by-side). Runs --check-only in both modes (a tiny shape, one step, the drafter's logits
# checked against bench/drafter_ref.py), then the issue's qwen3-1.7b and qwen3-8b cases (seq 3072,
# batch 4, 512 anchors, block 16, 5 drafter layers, 5 taps) in --mode shipped and --mode best, each
# under a time limit, and prints one table. Needs torch (2.11) and transformers (5.x); no Go.
#
#   [CASE_TIMEOUT=200] [STEPS=5] [WARMUP=2] [TARGETS="qwen3-1.7b qwen3-8b"] [MODES="shipped best"]
#   bash scripts/gpu-step-peer.sh
# JSON reports go to ${OUT:-/tmp}/step_peer_<target>_<mode>.json.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
for m in shipped best; do
  timeout 180 python3 bench/step_peer.py --check-only --mode "$m" 2>&1 | tail -6
  echo "check-only ($m) exit ${PIPESTATUS[0]}"
done
files=()
for t in ${TARGETS:-qwen3-1.7b qwen3-8b}; do
  for m in ${MODES:-shipped best}; do
    f=$dir/step_peer_${t}_${m}.json
    rm -f "$f"
    timeout "${CASE_TIMEOUT:-200}" python3 bench/step_peer.py --target-config "$t" --mode "$m" --seq-len 3072 \
      --batch 4 --anchors 512 --block-size 16 --drafter-layers 5 --steps "${STEPS:-5}" --warmup "${WARMUP:-2}" \
      --json "$f" > "$dir/step_peer_${t}_${m}.log" 2>&1
    echo "$t $m exit $?"
    tail -4 "$dir/step_peer_${t}_${m}.log"
    [ -s "$f" ] && files+=("$f")
  done
done
[ ${#files[@]} -gt 0 ] && python3 - "${files[@]}" <<'PY'
import json, sys
cols = ["target_forward", "block_mask", "drafter_forward", "backward", "optimizer"]
print(f"{'target':11} {'mode':8} {'step ms':>8} {'samp/s':>7} {'MFU%':>5} {'rsvd/alloc GiB':>14} {'first s':>7}  "
      + " ".join(f"{c[:10]:>10}" for c in cols))
for f in sys.argv[1:]:
    r = json.load(open(f))
    p = r["phases_ms"]
    print(f"{r['target']:11} {r['mode']:8} {r['step_ms']:8.1f} {r['samples_per_s']:7.2f} {100 * r['mfu']['step']:5.1f} "
          f"{r.get('peak_device_reserved_bytes', 0) / 2**30:8.1f}/{r['peak_device_bytes'] / 2**30:5.1f} {r['first_step_ms'] / 1e3:7.1f}  "
          + " ".join(f"{p[c]:10.1f}" for c in cols))
PY
