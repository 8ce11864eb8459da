#!/usr/bin/env bash
# gpu-ops.sh runs the GPU tests of the tensor-op kernels (package
# tensor/tensorcuda) on the GPU machine and prints a summary table: every op
# forward and backward in bf16 and fp32 storage against the float64 CPU
# backend, Gemm/GemmF32Out (cuBLASLt) against the CPU Gemm, and each
# kernel's bandwidth; then the tensor.Backend on those kernels
# (TestGPUBackend*, TestGPUStepNoSync): the conformance suite, attention
# through the tape, a step without copies or synchronisation. (The fused
# AdamW against the CPU backend's AdamWStep is train/traincuda's, in
# scripts/gpu-train.sh.)
# Their failures show as "--- FAIL" lines and make the summary FAIL.
#
# Build here first (the GPU machine has no Go):
#   CGO_ENABLED=0 go test -c -o .devbuild/tensorcuda.test ./tensor/tensorcuda
# then through the device tool run `bash scripts/gpu-ops.sh` with carry
# [".devbuild/tensorcuda.test"]. Results: $OUT/results.jsonl, log:
# $OUT/gpu-ops.log. The last line says PASS or FAIL.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
BIN=.devbuild/tensorcuda.test
LOG=$OUT/gpu-ops.log
export DFLASH_RESULTS=$OUT/results.jsonl
: >"$DFLASH_RESULTS"
: >"$LOG"
if [ ! -x "$BIN" ]; then
	echo "$BIN is missing: build it with CGO_ENABLED=0 go test -c -o $BIN ./tensor/tensorcuda" | tee -a "$LOG"
	exit 1
fi

# Each kernel file builds alone with nvcc (registers and spills in the log),
# with the block shapes the Go launcher passes (tensorcuda's blockShapes;
# TestOpMacrosSupplied checks this line against them).
shapes="-DOP_DW_THREADS=256 -DOP_NORM_VECS=2 -DOP_ROW_VECS=8 -DOP_COLSUM_COLS=32 -DOP_COLSUM_LANES=8 -DOP_DEC_ROWS=16 -DOP_DEC_WARPS=4 -DOP_DEC_MAX_D=128 -DOP_DEC_MAX_SPLITS=1024 -DOP_SK_MAX_WARPS=16"
nvcc_ok=1
if command -v nvcc >/dev/null; then
	tmp=$(mktemp -d)
	for f in kernels/op_*.cu; do
		for bf in 1 0; do
			if ! nvcc -arch=sm_90 -std=c++17 -DOP_BF16=$bf $shapes -Xptxas -v -cubin -o "$tmp/k.cubin" "$f" >>"$LOG" 2>&1; then
				echo "nvcc failed: $f OP_BF16=$bf" | tee -a "$LOG"
				nvcc_ok=0
			fi
		done
	done
	grep -E "[1-9][0-9]* bytes spill" "$LOG" && echo "(register spills above: see $LOG)"
else
	echo "nvcc not found: kernels built by NVRTC only" | tee -a "$LOG"
fi

timeout 540 "$BIN" -test.run GPU -test.v -test.count=1 -test.timeout=530s 2>&1 | tee -a "$LOG" | grep -E "^(=== RUN|--- |\s+--- |PASS|FAIL|ok|panic)|seed|no GPU|no NVRTC|not written|differ|: element"
rc=${PIPESTATUS[0]}

python3 - "$DFLASH_RESULTS" "$rc" "$nvcc_ok" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rc, nvcc_ok = int(sys.argv[2]), sys.argv[3] == "1"
acc = [r for r in rows if r["pkg"] == "tensorcuda"]
bw = [r for r in rows if r["pkg"] == "tensorcuda-bw"]
print()
print("%-4s | %-62s | %s" % ("OK", "CHECK (dtype op shape)", "DETAIL"))
print("-" * 120)
for r in acc:
    if not r["pass"] or r["check"].endswith("AdamW vs CPU AdamWStep"):
        print("%-4s | %-62s | %s" % ("PASS" if r["pass"] else "FAIL", r["check"][:62], r["detail"]))
ops = {}
for r in acc:
    dt, op = r["check"].split(" ", 2)[:2]
    k = (dt, op)
    e = ops.setdefault(k, [0, 0, 0.0])
    e[0] += 1
    e[1] += 0 if r["pass"] else 1
    e[2] = max(e[2], r["metrics"]["max_rel_err"])
print("-" * 120)
print("%-5s %-20s %6s %6s %12s" % ("dtype", "op", "cases", "failed", "max rel err"))
for (dt, op), (n, f, worst) in sorted(ops.items()):
    print("%-5s %-20s %6d %6d %12.3g" % (dt, op, n, f, worst))
print("-" * 120)
print("%-5s %-36s %10s %8s %7s" % ("dtype", "kernel", "us", "GB/s", "%peak"))
for r in bw:
    dt, name = r["check"].split(" ", 1)
    m = r["metrics"]
    print("%-5s %-36s %10.1f %8.0f %6.1f%%" % (dt, name, m["us"], m["gbps"], m["pct_peak"]))
failed = [r for r in acc if not r["pass"]]
ok = rc == 0 and not failed and nvcc_ok and acc
print("summary: %d checks, %d failed, test binary exit %d, nvcc %s -> %s"
      % (len(acc), len(failed), rc, "ok" if nvcc_ok else "FAILED", "PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
