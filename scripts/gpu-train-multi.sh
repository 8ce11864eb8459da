#!/usr/bin/env bash
# gpu-train-multi.sh is the GPU check of data-parallel training through NCCL,
# in one device call on a machine of kind nvidia-h200-x2:
#   1. model/dflash's TestGPUDataParallel: two ranks on two GPUs train a small
#      drafter (head dim 64) for 5 steps; the ranks' master weights must be equal
#      bit for bit after every step and match one GPU with the same global batch
#      (two micro-batches) within the test's stated tolerances;
#   2. `dflash train --device cuda` on the fixture of scripts/gpu-train.sh for
#      STEPS steps (default 50) three ways: one process on --gpus 0,1 (global
#      batch 2x4), one GPU with --grad-accum 2 (the same global batch), and two
#      processes of one rank each (--rank/--world-size/--rendezvous on
#      127.0.0.1, LOCAL_RANK picking the GPU); the losses side by side (loss.txt).
#
#   here (has Go):  bash scripts/gpu-train.sh --build
#   device tool:    kind "nvidia-h200-x2", carry [".devbuild/train.txz"],
#                   command: bash scripts/gpu-train-multi.sh
#
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, as scripts/gpu-multi.sh).
# Logs, metrics and loss.txt land in $OUT; checkpoints in $WORK. The last line
# says PASS or FAIL.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/devbuild.sh
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/gpu-train-multi}
STEPS=${STEPS:-50}
mkdir -p "$OUT" "$WORK"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
status=PASS
fail() { echo "FAIL: $*"; status=FAIL; }
if [[ ! -x $B/dflash || ! -x $B/dflash.test || ! -d $B/fixture ]]; then
	echo "gpu-train-multi: $B is incomplete: run bash scripts/gpu-train.sh --build here and carry .devbuild/train.txz" >&2
	exit 1
fi
nvidia-smi -L

echo "== TestGPUDataParallel"
(cd model/dflash && "../../$B/dflash.test" -test.run 'TestGPUDataParallel$' -test.v) >"$OUT/dataparallel.log" 2>&1 ||
	fail "TestGPUDataParallel"
grep -E -- '--- |gpu_dataparallel_test' "$OUT/dataparallel.log" | tail -n 20
grep -q -- '--- SKIP' "$OUT/dataparallel.log" && fail "TestGPUDataParallel skipped (needs 2 GPUs)"

COMMON=(train --device cuda --target "$B/fixture/target" --data "$B/fixture/conv.jsonl" --steps "$STEPS" --eval-every 25
	--save-every 0 --progress off --plot=false --drafter.layers 2 --drafter.block-size 8 --drafter.anchors 32
	--data.batch-size 4 --drafter.export F32)
run() { # name, extra flags...
	local name=$1 start=$SECONDS
	shift
	rm -rf "$WORK/run-$name"
	echo "== dflash train: $name"
	"$B/dflash" "${COMMON[@]}" --out "$WORK/run-$name" "$@" >"$OUT/train-$name.log" 2>&1 || fail "train $name"
	echo "$name: $((SECONDS - start)) s"
	tail -n 3 "$OUT/train-$name.log"
	cp "$WORK/run-$name/metrics.jsonl" "$OUT/metrics-$name.jsonl" 2>/dev/null
}
run gpus01 --gpus 0,1
run gpu0 --gpus 0 --grad-accum 2

echo "== dflash train: two processes"
rm -rf "$WORK/run-procs"
start=$SECONDS
for r in 0 1; do
	LOCAL_RANK=$r "$B/dflash" "${COMMON[@]}" --out "$WORK/run-procs" --rank "$r" --world-size 2 \
		--rendezvous 127.0.0.1:29517 >"$OUT/train-procs-rank$r.log" 2>&1 &
	pids[$r]=$!
done
for r in 0 1; do wait "${pids[$r]}" || fail "train two processes, rank $r"; done
echo "procs: $((SECONDS - start)) s"
tail -n 3 "$OUT/train-procs-rank0.log"
cp "$WORK/run-procs/metrics.jsonl" "$OUT/metrics-procs.jsonl" 2>/dev/null

python3 - "$OUT" >"$OUT/loss.txt" <<'PY' || fail "loss comparison"
import json, os, sys
out = sys.argv[1]
def losses(name):
    p = f"{out}/metrics-{name}.jsonl"
    r = {}
    if os.path.exists(p):
        for line in open(p):
            m = json.loads(line)
            if m.get("kind") == "train":
                r[m["step"]] = m["loss"]
    return r
runs = {"2 GPUs, 1 process": losses("gpus01"), "1 GPU, grad-accum 2": losses("gpu0"), "2 processes": losses("procs")}
steps = sorted(set.intersection(*(set(r) for r in runs.values())))
if not steps:
    sys.exit("no common steps: " + ", ".join(f"{k}: {len(v)}" for k, v in runs.items()))
print("step  " + "  ".join(f"{k:>20}" for k in runs))
for s in steps:
    if s == 1 or s % 5 == 0:
        print(f"{s:4d}  " + "  ".join(f"{r[s]:20.4f}" for r in runs.values()))
def mean(r, lo, hi):
    v = [r[s] for s in steps if lo <= s <= hi]
    return sum(v) / len(v)
n = steps[-1]
for k, r in runs.items():
    print(f"{k}: first 5 steps mean {mean(r, 1, 5):.4f}, last 10 mean {mean(r, n-9, n):.4f}")
# Two ranks in one process or in two see the same weights, data and anchors at
# step 1 (the one-GPU run draws its second micro-batch's anchors elsewhere in
# the stream, so its curve matches only statistically).
a, p = runs["2 GPUs, 1 process"], runs["2 processes"]
if abs(a[1] - p[1]) > 1e-3 * p[1]:
    sys.exit(f"step 1 loss {a[1]} with 2 ranks in one process, {p[1]} in two: want equal")
if mean(a, n-9, n) > mean(a, 1, 5):
    sys.exit("the loss on 2 GPUs did not go down")
PY
cat "$OUT/loss.txt"
echo "-> $status"
