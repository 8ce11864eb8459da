#!/usr/bin/env bash
# gpu-fp8.sh is the GPU check of the FP8 target (issue 29, docs/FP8.md) in one device call:
# the FP8 kernels and products against their references (tensorcuda, gpu), the FP8 target's
# hidden states against the CPU's float32 and the bf16 target (model: TestGPUFP8Target, placed and
# loaded from shards), the loader's pieces (TestGPULoadOn), then the 8B step side by side with the
# PyTorch peer in bf16 and with --target-dtype fp8 (scripts/gpu-step-compare.sh), with
# PARTS=bw the norm, SwiGLU and E4M3 producers' bandwidth, with PARTS=train `dflash train --device cuda
# --target-dtype fp8` beside bf16 on the test fixture (100 steps), with PARTS=step the 8B step alone per
# DTYPES (no peer), and with PARTS=profile the FP8 step's ops.
#
# Build here first: bash scripts/gpu-train.sh --build; then through the device tool
#   [PARTS="tests compare"] bash scripts/gpu-fp8.sh
# with carry [".devbuild/train.txz"]. Logs and JSON go to $OUT (bundled into all.tgz).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/devbuild.sh
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
for part in ${PARTS:-tests compare}; do
	case $part in
	tests)
		"$B/tensorcuda.test" -test.run 'TestCompileOpKernels|FP8|E4M3' -test.v >"$OUT/tensorcuda-fp8.log" 2>&1
		echo "tensorcuda FP8 tests exit $?"; grep -E '^(--- |FAIL|ok|PASS)' "$OUT/tensorcuda-fp8.log" | head -20
		"$B/gpu.test" -test.run 'FP8' -test.v >"$OUT/gpu-fp8.log" 2>&1
		echo "gpu FP8 tests exit $?"; grep -E '^(--- |FAIL|ok|PASS)' "$OUT/gpu-fp8.log" | head -20
		(cd model && "../$B/model.test" -test.run 'TestGPUFP8Target|TestGPULoadOn' -test.v) >"$OUT/model-fp8.log" 2>&1
		echo "model FP8 tests exit $?"; grep -E '^(--- |FAIL|ok|PASS)|fp8 error|panic' "$OUT/model-fp8.log" | head -40
		;;
	bw)
		"$B/tensorcuda.test" -test.run 'TestGPUOpsBandwidth' -test.v >"$OUT/tensorcuda-bw.log" 2>&1
		echo "tensorcuda bandwidth exit $?"; grep -E 'check "(bf16|f32) (RMSNorm|SwiGLUPacked|QuantizeRows)' "$OUT/tensorcuda-bw.log" | sed 's/ map\[.*//'
		;;
	train)
		# dflash train end to end with the FP8 target beside bf16 (the fixture's small Qwen3: hidden 128).
		work=$(mktemp -d)
		for dt in bf16 fp8; do
			"$B/dflash" train --device cuda --target-dtype "$dt" --target "$B/fixture/target" --data "$B/fixture/conv.jsonl" \
				--out "$work/run-$dt" --steps 100 --eval-every 50 --save-every 50 --progress off --plot=false --drafter.layers 2 \
				--drafter.block-size 8 --drafter.anchors 32 --data.batch-size 4 >"$OUT/train-$dt.log" 2>&1
			echo "train --target-dtype $dt exit $?"; tail -n 3 "$OUT/train-$dt.log"
			cp "$work/run-$dt/metrics.jsonl" "$OUT/metrics-$dt.jsonl" 2>/dev/null
		done
		python3 - "$OUT" <<'PY'
import json, sys
def run(dt):
    tr, ev = {}, []
    for line in open(f"{sys.argv[1]}/metrics-{dt}.jsonl"):
        m = json.loads(line)
        if m.get("kind") == "train":
            tr[m["step"]] = m["loss"]
        elif m.get("kind") == "eval":
            ev.append((m["step"], m.get("loss")))
    return tr, ev
(b, be), (f, fe) = run("bf16"), run("fp8")
s = sorted(set(b) & set(f))
mean = lambda r, lo, hi: sum(r[k] for k in s if lo <= k <= hi) / len([k for k in s if lo <= k <= hi])
n = s[-1]
print(f"train loss, first 10 steps: bf16 {mean(b, 1, 10):.4f} fp8 {mean(f, 1, 10):.4f}; last 20: bf16 {mean(b, n-19, n):.4f} fp8 {mean(f, n-19, n):.4f}")
print("eval (step, loss): bf16", be, "fp8", fe)
PY
		;;
	compare)
		TARGETS=${TARGETS:-qwen3-8b} bash scripts/gpu-step-compare.sh 2>&1 | tee "$OUT/compare.txt"
		;;
	step)
		# The 8B step alone, per DTYPES (no peer: a ratio needs compare's peer in the same call).
		for dt in ${DTYPES:-fp8}; do
			timeout 200 "$B/dflash" bench step --device cuda --target-config qwen3-8b --target-dtype "$dt" --seq-len 3072 --batch 4 \
				--anchors 512 --block-size 16 --drafter-layers 5 --steps 5 --warmup 2 >"$OUT/step-$dt.txt" 2>"$OUT/step-$dt.log"
			echo "step $dt exit $?"; head -30 "$OUT/step-$dt.txt"
		done
		;;
	profile)
		timeout 300 "$B/dflash" bench step --device cuda --target-config qwen3-8b --target-dtype fp8 --seq-len 3072 --batch 4 \
			--anchors 512 --block-size 16 --drafter-layers 5 --steps 3 --warmup 1 --profile >"$OUT/profile-fp8.txt" 2>"$OUT/profile-fp8.log"
		echo "profile exit $?"; head -60 "$OUT/profile-fp8.txt"
		;;
	esac
done
bundle_out compare.txt
