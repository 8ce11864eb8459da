#!/usr/bin/env bash
# gpu-step-compare.sh: issue 14's side-by-side in one device call. `dflash bench step --device cuda`
# and its PyTorch peer (scripts/gpu-step-peer.sh: bench/step_peer.py, shipped and best modes) on the
# same shapes (seq 3072, batch 4, 512 anchors, block 16, 5 drafter layers, 5 taps), then the ratio
# table: samples/s of dflash over the peer's, and both sides' peaks: dflash held / in use (the
# allocator's PeakBytes / PeakInUseBytes) beside the peer's reserved / allocated
# (torch.cuda.max_memory_reserved / max_memory_allocated), which measure the same things.
#
# Build here first: bash scripts/gpu-train.sh --build; then through the device tool
#   [TARGETS="qwen3-8b qwen3-1.7b"] [MODES="shipped best"] [STEPS=5] bash scripts/gpu-step-compare.sh
# with carry [".devbuild/train.txz"]. JSON reports go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/devbuild.sh
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
TARGETS=${TARGETS:-qwen3-8b qwen3-1.7b}
for t in $TARGETS; do
	for cache in cold warm; do
		[ "$cache" = cold ] && rm -rf "$DFLASH_KERNEL_CACHE"
		timeout 300 "$B/dflash" bench step --device cuda --target-config "$t" --seq-len 3072 --batch 4 \
			--anchors 512 --block-size 16 --drafter-layers 5 --steps "${STEPS:-5}" --warmup 2 --json \
			>"$OUT/dflash_${t}_${cache}.json" 2>"$OUT/dflash_${t}_${cache}.log"
		echo "dflash $t ($cache kernel cache) exit $?"
		grep -v '^\s' "$OUT/dflash_${t}_${cache}.log" | grep -iE 'panic|error' | head -n 5
	done
done
TARGETS="$TARGETS" bash scripts/gpu-step-peer.sh
python3 - "$OUT" $TARGETS <<'PY'
import json, os, sys
out, targets = sys.argv[1], sys.argv[2:]
def load(p):
    return json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) > 0 else None
gib = lambda r, k: f"{r.get(k, 0)/2**30:.1f}"
print(f"{'target':11} {'dflash samp/s':>13} {'held/in use GiB':>15} {'first s cold/warm':>17}  {'peer mode':9} {'peer samp/s':>11} "
      f"{'rsvd/alloc GiB':>14}  {'ratio':>6}")
for t in targets:
    d, w = load(f"{out}/dflash_{t}_cold.json"), load(f"{out}/dflash_{t}_warm.json")
    for mode in ("shipped", "best"):
        p = load(f"{out}/step_peer_{t}_{mode}.json")
        if not d or not p:
            print(f"{t:11} missing: dflash {bool(d)}, peer {mode} {bool(p)}")
            continue
        first = f"{d['first_step_ms']/1e3:.1f}/{(w or d)['first_step_ms']/1e3:.1f}"
        r = w or d
        ours = gib(r, 'peak_device_bytes') + "/" + gib(r, 'peak_device_in_use_bytes')
        theirs = gib(p, 'peak_device_reserved_bytes') + "/" + gib(p, 'peak_device_bytes')
        print(f"{t:11} {r['samples_per_s']:13.2f} {ours:>15} {first:>17}  {mode:9} "
              f"{p['samples_per_s']:11.2f} {theirs:>14}  {r['samples_per_s']/p['samples_per_s']:6.2f}x")
PY
