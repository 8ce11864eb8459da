#!/usr/bin/env bash
# gpu-step-prof.sh: where a GPU training step's time goes, kernel by kernel.
# It runs `dflash bench step --device cuda` (default: the qwen3-8b case of
# issue 14; ARGS overrides the shape) under Nsight Systems and prints the GPU
# time per step of each kernel family (cuBLASLt GEMMs, flex attention, each
# op kernel, memsets and copies), summed over every step the bench ran
# (warm-up included: GPU time does not include compilation) and divided by
# their number.
#
# Build here first: bash scripts/gpu-train.sh --build
# Device call, carry [".devbuild/train"]: bash scripts/gpu-step-prof.sh
# Output: the table on stdout and $OUT/step-prof.csv (per kernel name).
set -uo pipefail
cd "$(dirname "$0")/.."
B=.devbuild/train
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/gpu-step-prof}
mkdir -p "$OUT" "$WORK"
export DFLASH_KERNEL_CACHE=${DFLASH_KERNEL_CACHE:-/tmp/dflash-kernels}
STEPS=${STEPS:-3}
WARMUP=${WARMUP:-1}
ARGS=${ARGS:---target-config qwen3-8b --seq-len 3072 --batch 4 --anchors 512 --block-size 16 --drafter-layers 5}
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
if [ -z "$NSYS" ]; then
	echo "gpu-step-prof: nsys not found"
	exit 1
fi
rm -f "$WORK/step.nsys-rep" "$WORK/step.sqlite"
# shellcheck disable=SC2086
timeout 400 "$NSYS" profile -t cuda --sample none --cpuctxsw none -o "$WORK/step" -f true \
	"$B/dflash" bench step --device cuda $ARGS --steps "$STEPS" --warmup "$WARMUP" --json >"$OUT/step-prof.json" 2>"$OUT/step-prof.log" ||
	{ echo "gpu-step-prof: nsys profile failed"; tail -n 20 "$OUT/step-prof.log"; exit 1; }
"$NSYS" stats --report cuda_gpu_kern_sum,cuda_gpu_mem_time_sum --format csv -o "$WORK/stats" "$WORK/step.nsys-rep" >/dev/null 2>&1
cp "$WORK"/stats_cuda_gpu_kern_sum.csv "$OUT/step-prof.csv" 2>/dev/null
cp "$WORK"/stats_cuda_gpu_mem_time_sum.csv "$OUT/step-prof-mem.csv" 2>/dev/null
python3 - "$OUT" "$((STEPS + WARMUP))" <<'PY'
import csv, json, re, sys
out, steps = sys.argv[1], int(sys.argv[2])
rows = list(csv.DictReader(open(f"{out}/step-prof.csv")))
def family(name):
    n = name.split("(")[0].split("<")[0].strip()
    if re.search(r"gemm|xmma|cutlass|nvjet|sm90_|sm80_", name, re.I):
        return "cuBLASLt GEMM"
    if n.startswith("flex_") or n.startswith("hopper_") or "flex" in n:
        return "flex attention: " + n
    return n
fam, total = {}, 0.0
for r in rows:
    t = float(r["Total Time (ns)"]) / 1e6 / steps
    n = int(r["Instances"]) / steps
    f = family(r["Name"])
    a = fam.setdefault(f, [0.0, 0.0])
    a[0] += t; a[1] += n
    total += t
try:
    for r in csv.DictReader(open(f"{out}/step-prof-mem.csv")):
        t = float(r["Total Time (ns)"]) / 1e6 / steps
        a = fam.setdefault("[" + r["Operation"].strip() + "]", [0.0, 0.0])
        a[0] += t; a[1] += int(r["Count"]) / steps
        total += t
except (OSError, KeyError):
    pass
rep = json.load(open(f"{out}/step-prof.json"))
print(f"bench step: {rep['step_ms']:.1f} ms a step, phases {json.dumps({k: round(v, 1) for k, v in rep['phases_ms'].items()})}")
print(f"GPU time a step (mean over {steps} steps): {total:.1f} ms")
print(f"{'family':58s} {'ms/step':>9s} {'%':>6s} {'launches':>9s}")
for f, (t, n) in sorted(fam.items(), key=lambda kv: -kv[1][0]):
    if t >= 0.05:
        print(f"{f[:58]:58s} {t:9.2f} {100*t/total:6.1f} {n:9.0f}")
PY
