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
BIN=${BIN:-$B/dflash} # the dflash binary
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/gpu-step-prof}
mkdir -p "$OUT" "$WORK"
export DFLASH_KERNEL_CACHE=${DFLASH_KERNEL_CACHE:-/tmp/dflash-kernels}
STEPS=${STEPS:-1}
WARMUP=${WARMUP:-0}
ARGS=${ARGS:---target-config qwen3-8b --seq-len 3072 --batch 4 --anchors 512 --block-size 16 --drafter-layers 5}
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
run=("$BIN" bench step --device cuda $ARGS --steps "$STEPS" --warmup "$WARMUP" --json)
if [ -n "$NSYS" ]; then
	rm -f "$WORK/step.nsys-rep"
	timeout 400 "$NSYS" profile -t cuda --sample none --cpuctxsw none -o "$WORK/step" -f true "${run[@]}" >"$OUT/step-prof.json" 2>"$OUT/step-prof.log" ||
		{ echo "gpu-step-prof: nsys profile failed"; tail -n 20 "$OUT/step-prof.log"; exit 1; }
	"$NSYS" stats --report cuda_gpu_kern_sum --format csv -o "$WORK/stats" "$WORK/step.nsys-rep" >/dev/null 2>&1
	python3 - "$WORK/stats_cuda_gpu_kern_sum.csv" "$OUT/step-prof.csv" <<'PY'
import csv, sys
w = csv.writer(open(sys.argv[2], "w"))
w.writerow(["name", "instances", "total_ns", "grid"])
for r in csv.DictReader(open(sys.argv[1])):
    w.writerow([r["Name"], r["Instances"], r["Total Time (ns)"], ""])
PY
elif [ -n "$NCU" ]; then
	# Nsight Compute times every kernel of the run, one by one (one metric: one
	# pass per kernel, clocks left alone).
	timeout 450 "$NCU" --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --print-units base \
		--log-file "$WORK/ncu.csv" "${run[@]}" >"$OUT/step-prof.json" 2>"$OUT/step-prof.log" ||
		{ echo "gpu-step-prof: ncu failed"; tail -n 20 "$OUT/step-prof.log"; tail -n 5 "$WORK/ncu.csv"; exit 1; }
	python3 - "$WORK/ncu.csv" "$OUT/step-prof.csv" <<'PY'
import csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
k = {}
for r in csv.DictReader(lines):
    key = (r["ID"], r["Kernel Name"])
    e = k.setdefault(key, {"name": r["Kernel Name"], "grid": "", "ns": 0.0})
    if r["Metric Name"] == "gpu__time_duration.sum":
        e["ns"] = float(r["Metric Value"].replace(",", ""))
    elif r["Metric Name"] == "launch__grid_size":
        e["grid"] = r["Metric Value"]
w = csv.writer(open(sys.argv[2], "w"))
w.writerow(["name", "instances", "total_ns", "grid"])
for (i, _), e in sorted(k.items(), key=lambda kv: int(kv[0][0])):
    w.writerow([e["name"], 1, e["ns"], e["grid"]])
PY
else
	echo "gpu-step-prof: neither nsys nor ncu found"
	exit 1
fi
python3 - "$OUT" "$((STEPS + WARMUP))" <<'PY'
import csv, json, re, sys
out, steps = sys.argv[1], int(sys.argv[2])
rows = list(csv.DictReader(open(f"{out}/step-prof.csv")))
def family(name):
    n = re.split(r"[(<]", name)[0].strip()
    if re.search(r"gemm|xmma|cutlass|nvjet|sm90_|sm80_", name, re.I):
        return "cuBLASLt GEMM"
    return n
fam, total = {}, 0.0
for r in rows:
    t = float(r["total_ns"]) / 1e6 / steps
    a = fam.setdefault(family(r["name"]), [0.0, 0.0])
    a[0] += t; a[1] += int(r["instances"]) / steps
    total += t
rep = json.load(open(f"{out}/step-prof.json"))
print(f"bench step: {rep['step_ms']:.1f} ms a step, phases {json.dumps({k: round(v, 1) for k, v in rep['phases_ms'].items()})}")
print(f"kernel time per step (all kernels of the run / {steps} steps, setup included): {total:.1f} ms")
print(f"{'family':58s} {'ms/step':>9s} {'%':>6s} {'launches':>9s}")
for f, (t, n) in sorted(fam.items(), key=lambda kv: -kv[1][0]):
    if t >= 0.05:
        print(f"{f[:58]:58s} {t:9.2f} {100*t/total:6.1f} {n:9.1f}")
PY
