#!/usr/bin/env bash
# gpu-step-compare.sh: issue 14's side-by-side in one device call. `dflash bench step --device cuda`
# and its PyTorch peer (scripts/gpu-step-peer.sh: bench/step_peer.py, shipped and best modes) on the
# same shapes (seq 3072, batch 4, 512 anchors, block 16, 5 drafter layers, 5 taps), then the ratio
# table: samples/s of dflash over the peer's, and both sides' peaks: dflash held / in use (the
# allocator's PeakBytes / PeakInUseBytes) beside the peer's reserved / allocated
# (torch.cuda.max_memory_reserved / max_memory_allocated), which measure the same things.
#
# Build here first: bash scripts/gpu-train.sh --build; then through the device tool
#   [TARGETS="qwen3-8b qwen3-1.7b"] [DTYPES="bf16 fp8"] [MODES="shipped best"] [STEPS=5] bash scripts/gpu-step-compare.sh
# DTYPES are dflash's --target-dtype runs: the first with a cold and a warm kernel cache, the others
# warm; an fp8 row adds its taps' relative errors against the bf16 target (docs/FP8.md), and fp8+exact
# is fp8 with DFLASH_FP8_FAST_ACCUM=0 (products promoted to fp32 along K; fast accumulation is the default).
# with carry [".devbuild/train.txz"]. JSON reports go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/devbuild.sh
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
TARGETS=${TARGETS:-qwen3-8b qwen3-1.7b}
DTYPES=${DTYPES:-bf16 fp8}
first_dt=${DTYPES%% *}
for t in $TARGETS; do
	for dt in $DTYPES; do
		caches=warm
		[ "$dt" = "$first_dt" ] && caches="cold warm"
		for cache in $caches; do
			[ "$cache" = cold ] && rm -rf "$DFLASH_KERNEL_CACHE"
			fast=1
			[ "$dt" != "${dt%+exact}" ] && fast=0
			DFLASH_FP8_FAST_ACCUM=$fast timeout 300 "$B/dflash" bench step --device cuda --target-config "$t" --target-dtype "${dt%+*}" --seq-len 3072 --batch 4 \
				--anchors 512 --block-size 16 --drafter-layers 5 --steps "${STEPS:-5}" --warmup 2 --json \
				>"$OUT/dflash_${t}_${dt}_${cache}.json" 2>"$OUT/dflash_${t}_${dt}_${cache}.log"
			echo "dflash $t $dt ($cache kernel cache) exit $?"
			grep -v '^\s' "$OUT/dflash_${t}_${dt}_${cache}.log" | grep -iE 'panic|error' | head -n 5
		done
	done
done
TARGETS="$TARGETS" bash scripts/gpu-step-peer.sh
python3 - "$OUT" "$first_dt" "$DTYPES" $TARGETS <<'PY'
import json, os, sys
out, first, dtypes, targets = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
def load(p):
    return json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) > 0 else None
gib = lambda r, k: f"{r.get(k, 0)/2**30:.1f}"
print(f"{'target':11} {'dtype':8} {'dflash samp/s':>13} {'step ms':>8} {'tgt fwd ms':>10} {'held/in use GiB':>15} {'first s cold/warm':>17}  "
      f"{'peer mode':9} {'peer samp/s':>11} {'rsvd/alloc GiB':>14}  {'ratio':>6}")
for t in targets:
    cold = load(f"{out}/dflash_{t}_{first}_cold.json")
    for dt in dtypes:
        r = load(f"{out}/dflash_{t}_{dt}_warm.json") or (cold if dt == first else None)
        for mode in ("shipped", "best"):
            p = load(f"{out}/step_peer_{t}_{mode}.json")
            if not r or not p:
                print(f"{t:11} {dt:8} missing: dflash {bool(r)}, peer {mode} {bool(p)}")
                continue
            first_s = f"{cold['first_step_ms']/1e3:.1f}/" if cold and dt == first else "-/"
            first_s += f"{r['first_step_ms']/1e3:.1f}"
            ours = gib(r, 'peak_device_bytes') + "/" + gib(r, 'peak_device_in_use_bytes')
            theirs = gib(p, 'peak_device_reserved_bytes') + "/" + gib(p, 'peak_device_bytes')
            print(f"{t:11} {dt:8} {r['samples_per_s']:13.2f} {r['step_ms']:8.1f} {r['phases_ms']['target_forward']:10.1f} {ours:>15} {first_s:>17}  "
                  f"{mode:9} {p['samples_per_s']:11.2f} {theirs:>14}  {r['samples_per_s']/p['samples_per_s']:6.2f}x")
        if r and r.get("tap_rel_err"):
            print(f"{'':11} {dt:8} taps {r['taps']}: relative error against bf16 " + " ".join(f"{e:.4f}" for e in r["tap_rel_err"]))
PY
