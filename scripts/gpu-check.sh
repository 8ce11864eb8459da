#!/usr/bin/env bash
# gpu-check.sh runs every GPU check of the GPU runtime and kernel cache on
# the GPU machine, in one call, and prints a summary table. It builds
# nothing: run scripts/build-device.sh here first, then through the device
# tool run `bash scripts/gpu-check.sh` with carry [".devbuild/runtime"].
#
# Checks: dflash doctor (cold, then warm from disk); the runtime's plain
# kernels (kernels/saxpy.cu and the test kernels gpu/testdata/elementwise.cu,
# jit/testdata/attn_fwd_f32.cu) build alone with nvcc; the test binaries of
# cuda, jit and gpu (NVRTC compile+load+launch, 8 goroutines -> 1 compile, second process -> 0
# compiles, graph replay, allocator reuse, cuBLASLt vs float64, NCCL,
# foreign-thread check, cache timings); cuBLASLt bf16 8192^3 against
# torch.matmul (bench/torch_matmul.py), twice, alternating; dflash cache
# ls/stats/clear. Results: $OUT/results.jsonl, logs: $OUT/gpu-check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
B=.devbuild/runtime
export DFLASH_RESULTS=$OUT/results.jsonl
: >"$DFLASH_RESULTS"
export DFLASH_KERNEL_CACHE
DFLASH_KERNEL_CACHE=$(mktemp -d)/kernels
export PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
LOG=$OUT/gpu-check.log
: >"$LOG"

# step NAME CMD...: runs CMD, logs its output, records pass/fail by exit code.
step() {
	local name=$1
	shift
	echo "=== $name: $*" | tee -a "$LOG"
	local t0 t1 rc
	t0=$(date +%s.%N)
	"$@" 2>&1 | tee -a "$LOG"
	rc=${PIPESTATUS[0]}
	t1=$(date +%s.%N)
	python3 - "$name" "$rc" "$t0" "$t1" >>"$DFLASH_RESULTS" <<'PY'
import json, sys
name, rc, t0, t1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
print(json.dumps({"pkg": "step", "check": name, "pass": rc == 0, "detail": "exit %d" % rc,
                  "metrics": {"seconds": round(t1 - t0, 2)}}))
PY
	return 0
}

step "nvidia-smi" nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
step "dflash doctor (cold cache)" $B/dflash doctor
step "dflash doctor (warm: kernel from disk)" $B/dflash doctor
$B/dflash doctor --json >"$OUT/doctor.json" 2>>"$LOG"

for f in kernels/saxpy.cu gpu/testdata/elementwise.cu jit/testdata/attn_fwd_f32.cu; do
	step "nvcc builds $f alone" nvcc -arch=sm_90 -Xptxas -v -cubin -o "/tmp/$(basename "$f" .cu).cubin" "$f"
done

step "cuda.test" $B/cuda.test -test.v -test.count=1 -test.timeout=60s
step "jit.test" $B/jit.test -test.v -test.count=1 -test.timeout=90s
for round in 1 2; do
	step "gemm bench round $round: dflash" env DFLASH_GEMM_BENCH=1 $B/gpu.test -test.v -test.count=1 -test.timeout=60s -test.run='^TestGemmThroughput$'
	step "gemm bench round $round: torch" python3 bench/torch_matmul.py
done
step "gpu.test" $B/gpu.test -test.v -test.count=1 -test.timeout=90s

step "dflash cache ls" $B/dflash cache ls
step "dflash cache stats" $B/dflash cache stats
step "dflash cache clear" $B/dflash cache clear

python3 - "$DFLASH_RESULTS" <<'PY' | tee "$OUT/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
checks = [r for r in rows if r["pkg"] != "step"]
steps = [r for r in rows if r["pkg"] == "step"]

def fmt(m):
    out = []
    for k, v in (m or {}).items():
        out.append("%s=%s" % (k, ("%.4g" % v) if isinstance(v, float) else v))
    return " ".join(out)

print()
print("%-4s | %-72s | %s" % ("OK", "CHECK", "DETAIL / NUMBERS"))
print("-" * 150)
for r in steps:
    print("%-4s | %-72s | %s %s" % ("PASS" if r["pass"] else "FAIL", "step: " + r["check"], r["detail"], fmt(r["metrics"])))
for r in checks:
    print("%-4s | %-72s | %s | %s" % ("PASS" if r["pass"] else "FAIL", "[%s] %s" % (r["pkg"], r["check"]), r["detail"], fmt(r["metrics"])))

# cuBLASLt against torch.matmul, best of the two alternating rounds each
ours = [r["metrics"] for r in checks if r["check"].startswith("dflash cuBLASLt bf16")]
torch = [r["metrics"] for r in checks if r["pkg"] == "torch"]
ok = True
if ours and torch:
    heur = max(m["heuristic_tflops"] for m in ours)
    tuned = max(m["tuned_tflops"] for m in ours)
    th = max(m["torch_tflops"] for m in torch)
    best = max(heur, tuned)
    ratio = best / th
    print("-" * 150)
    print("cuBLASLt bf16 8192^3: dflash heuristic %.1f TFLOP/s, tuned %.1f TFLOP/s; torch.matmul %.1f TFLOP/s; ratio %.3f (heuristic alone %.3f) -> %s"
          % (heur, tuned, th, ratio, heur / th, "PASS (>= 0.9)" if ratio >= 0.9 else "FAIL (< 0.9)"))
    ok = ratio >= 0.9
else:
    print("cuBLASLt vs torch: missing results -> FAIL")
    ok = False
failed = [r for r in rows if not r["pass"]]
print("summary: %d checks, %d steps, %d failed%s" % (len(checks), len(steps), len(failed), "" if ok else "; GEMM ratio not met"))
PY
