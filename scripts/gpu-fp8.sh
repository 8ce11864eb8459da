#!/usr/bin/env bash
# gpu-fp8.sh is the GPU check of the FP8 target (issue 29, docs/FP8.md) in one device call:
# the FP8 kernels and products against their references (tensorcuda, gpu), the FP8 target's
# hidden states against the CPU's float32 and the bf16 target (model: TestGPUFP8Target, placed and
# loaded from shards), the loader's pieces (TestGPULoadOn), then the 8B step side by side with the
# PyTorch peer in bf16 and with --target-dtype fp8 (scripts/gpu-step-compare.sh), and with
# PARTS=profile the FP8 step's ops.
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
	compare)
		TARGETS=${TARGETS:-qwen3-8b} bash scripts/gpu-step-compare.sh 2>&1 | tee "$OUT/compare.txt"
		;;
	profile)
		timeout 300 "$B/dflash" bench step --device cuda --target-config qwen3-8b --target-dtype fp8 --seq-len 3072 --batch 4 \
			--anchors 512 --block-size 16 --drafter-layers 5 --steps 3 --warmup 1 --profile >"$OUT/profile-fp8.txt" 2>"$OUT/profile-fp8.log"
		echo "profile exit $?"; head -60 "$OUT/profile-fp8.txt"
		;;
	esac
done
bundle_out compare.txt
