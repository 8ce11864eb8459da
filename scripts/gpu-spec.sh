#!/usr/bin/env bash
# gpu-spec.sh is the device check of speculative decoding on the GPU (issue 27), in one device call:
#   tests   the spec package's GPU tests (-test.run GPU): TestGPUGreedyLossless (greedy lossless
#           against the target's own greedy decoding on CUDA, argmax ids read on the device) and
#           TestGPUSamplingDistribution (the chi-square test of speculative sampling on CUDA)
#   demo    `dflash demo --device cuda --dir $WORK/demo`: the demo at GPU size, its target,
#           drafter and held-out prompts left in $WORK/demo
#   side    on that demo's target, drafter and held-out prompts, `dflash spec --device cuda` and
#           bench/spec_peer.py (z-lab/dflash's public dflash_generate, batch 1, bf16) one after the
#           other, then bench/spec_side.py's table: acceptance length ours against theirs (within
#           5%), tokens/s at batch 1 (at least 2x theirs), dflash's greedy outputs equal to the target's
#   kernels every op kernel compiled (TestCompileOpKernels) and decoding's on the GPU (tensorcuda:
#           TestGPUDecodeAttention, TestGPUCacheRows,
#           TestGPUDecodeReplay, TestGPUSkinnyGemm) and op_skinny_gemm's bytes per second against
#           cuBLASLt at the 8B shapes (TestGPUSkinnyGemmThroughput)
#   decode  `dflash bench decode --device cuda --target qwen3-8b`: the per-step times of the 8B shape,
#           then one profiled run of each pass (--profile: every op timed, no graphs)
#   batch   (not in the default PARTS) on the demo's files, `dflash spec --device cuda --batch N` for N in
#           $BATCHES (default "1 8"): tokens/s with the drafter and the target alone over each batch's
#           wall time, and every greedy output equal to the target's
#
# Build here first (the GPU machine has no Go and no network):
#   ZLAB_GIT=/work/.mirror/z-lab+dflash/repo bash scripts/gpu-spec.sh --build
# (or ZLAB_SRC=DIR, a checkout of github.com/z-lab/dflash). It builds dflash and spec.test, copies
# z-lab's dflash/model.py (loaded at run time; nothing of it is kept in the repository) and the Go
# source the demo's corpus is read from (GOROOT/src's non-test files; the device has no Go tree),
# into .devbuild/spec, and compresses that to .devbuild/spec.txz, which the device tool carries:
#   command: bash scripts/gpu-spec.sh    carry: [".devbuild/spec.txz"]
# DEMO_FLAGS are more flags of the demo (DEMO_FLAGS="--target-dtype fp8": the twin drafter trained
# on the FP8 target's states, served on the bf16 target, beside the demo's).
# PARTS (default "kernels tests demo side decode") chooses what runs; a warm machine keeps $WORK, so
# PARTS=demo in one call and PARTS="side decode" in the next use the same demo. MAX_NEW (default 96,
# the demo's) is the tokens per prompt of `side`. Logs and JSON land in $OUT (the demo's configs and
# held-out prompts, not its weights), packed into $OUT/all.tgz beside side.txt, decode.txt and demo.txt
# when they are more than the device tool brings back; the last line says PASS or FAIL.
set -uo pipefail
cd "$(dirname "$0")/.."
B=.devbuild/spec
if [ "${1:-}" = "--build" ]; then
	set -e
	rm -rf "$B" "$B.txz" && mkdir -p "$B/zlab/dflash" "$B/goroot"
	if [ -n "${ZLAB_GIT:-}" ]; then
		git --git-dir="$ZLAB_GIT" show HEAD:dflash/model.py >"$B/zlab/dflash/model.py"
	elif [ -n "${ZLAB_SRC:-}" ] && [ -f "$ZLAB_SRC/dflash/model.py" ]; then
		cp "$ZLAB_SRC/dflash/model.py" "$B/zlab/dflash/model.py"
	else
		echo "set ZLAB_GIT to z-lab/dflash's git directory (or ZLAB_SRC to a checkout)" >&2
		exit 1
	fi
	export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
	go build -trimpath -ldflags="-s -w" -o "$B/dflash" ./cmd/dflash
	go test -c -trimpath -ldflags="-s -w" -o "$B/spec.test" ./spec
	go test -c -trimpath -ldflags="-s -w" -o "$B/tensorcuda.test" ./tensor/tensorcuda
	# The files demo.GoCorpus may choose (it filters them again): the demo's --corpus on the device.
	(cd "$(go env GOROOT)" && find src -name '*.go' ! -name '*_test.go' -size -65k -not -path '*/testdata/*' \
		-not -path '*/vendor/*' -print0 | tar --null -cf - -T -) | tar -xf - -C "$B/goroot"
	du -sh "$B"
	tar -cJf "$B.txz" -C "$(dirname "$B")" "$(basename "$B")"
	du -sh "$B.txz"
	exit 0
fi
DEVBUILD=$B
. scripts/devbuild.sh
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/gpu-spec}
D=$WORK/demo
mkdir -p "$OUT" "$WORK"
PARTS=${PARTS:-kernels tests demo side decode}
MAX_NEW=${MAX_NEW:-96}
status=PASS
fail() { echo "FAIL: $*"; status=FAIL; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
for f in "$B/dflash" "$B/spec.test" "$B/tensorcuda.test" "$B/zlab/dflash/model.py"; do
	[ -e "$f" ] || { echo "FAIL: $f missing: run ZLAB_GIT=DIR bash scripts/gpu-spec.sh --build here and carry $B.txz"; exit 1; }
done

if has kernels; then
	echo "== decoding's kernels on the GPU (tensorcuda)"
	(cd tensor/tensorcuda && "../../$B/tensorcuda.test" -test.run 'TestCompileOpKernels|TestGPUDecodeAttention|TestGPUCacheRows|TestGPUDecodeReplay|TestGPUSkinnyGemm$' \
		-test.v -test.timeout 300s) >"$OUT/kernels.log" 2>&1 || fail "decoding's kernel tests"
	grep -E '^(--- |ok|FAIL|PASS)' "$OUT/kernels.log" | tail -n 8
	! grep -q -- '--- SKIP' "$OUT/kernels.log" || fail "decoding's kernel tests skipped (no GPU?)"
	python3 scripts/testfails.py "$OUT/kernels.log" 40
	(cd tensor/tensorcuda && DFLASH_GEMM_BENCH=1 "../../$B/tensorcuda.test" -test.run 'TestGPUSkinnyGemmThroughput' -test.v) \
		>"$OUT/skinny.log" 2>&1 || fail "op_skinny_gemm's throughput"
	grep -E 'op_skinny_gemm .* ms' "$OUT/skinny.log" | sed 's/^ *gpu_skinny_test.go:[0-9]*: /  /'
fi

if has tests; then
	echo "== spec GPU tests (greedy lossless and the sampling distribution on CUDA)"
	(cd spec && "../$B/spec.test" -test.run GPU -test.v -test.timeout 540s) >"$OUT/spec-tests.log" 2>&1 || fail "spec GPU tests"
	grep -E '^(--- |ok|FAIL|PASS)|oracle:' "$OUT/spec-tests.log" | tail -n 20
	! grep -q -- '--- SKIP' "$OUT/spec-tests.log" || fail "spec GPU tests skipped (no GPU?)"
	python3 scripts/testfails.py "$OUT/spec-tests.log" 40
fi

if has demo; then
	echo "== dflash demo --device cuda --dir $D"
	rm -rf "$D"
	start=$SECONDS
	# shellcheck disable=SC2086 # DEMO_FLAGS is words
	"$B/dflash" demo --device cuda --corpus "$B/goroot/src" --dir "$D" --progress off ${DEMO_FLAGS:-} >"$OUT/demo.txt" 2>"$OUT/demo.log" ||
		{ fail "dflash demo --device cuda"; tail -n 20 "$OUT/demo.log"; }
	echo "demo: $((SECONDS - start)) s"
	cat "$OUT/demo.txt"
	mkdir -p "$OUT/demo"
	cp "$D/target/config.json" "$OUT/demo/target-config.json" 2>/dev/null
	cp "$D/drafter/config.json" "$OUT/demo/drafter-config.json" 2>/dev/null
	cp "$D/heldout.jsonl" "$OUT/demo/" 2>/dev/null
fi

if has side; then
	echo "== side by side on the demo's target and drafter: dflash spec --device cuda and z-lab's dflash_generate"
	if [ ! -f "$D/heldout.jsonl" ] || [ ! -f "$D/target/config.json" ] || [ ! -f "$D/drafter/config.json" ]; then
		fail "no demo in $D: run PARTS=demo first (the same warm machine keeps it)"
	else
		"$B/dflash" spec --device cuda --target "$D/target" --drafter "$D/drafter" --prompts "$D/heldout.jsonl" \
			--max-new-tokens "$MAX_NEW" --json --out "$OUT/spec-gen.jsonl" >"$OUT/spec.json" 2>"$OUT/spec.log" ||
			{ fail "dflash spec --device cuda"; tail -n 20 "$OUT/spec.log"; }
		python3 bench/spec_peer.py --zlab-src "$B/zlab" --target "$D/target" --drafter "$D/drafter" --prompts "$D/heldout.jsonl" \
			--max-new "$MAX_NEW" --json "$OUT/peer.json" >"$OUT/peer.log" 2>&1 || fail "bench/spec_peer.py (see peer.log)"
		grep -Ev 'Warning|warn\(|^\s*$' "$OUT/peer.log" | tail -n 8
		if [ -s "$OUT/spec.json" ] && [ -s "$OUT/peer.json" ]; then
			python3 bench/spec_side.py --ours "$OUT/spec.json" --ours-out "$OUT/spec-gen.jsonl" --peer "$OUT/peer.json" \
				--json "$OUT/side.json" | tee "$OUT/side.txt"
			[ "${PIPESTATUS[0]}" = 0 ] || fail "side by side (side.txt)"
		fi
	fi
fi

if has batch; then
	echo "== dflash spec --device cuda --batch N on the demo's target and drafter"
	if [ ! -f "$D/heldout.jsonl" ]; then
		fail "no demo in $D: run PARTS=demo first (the same warm machine keeps it)"
	else
		for n in ${BATCHES:-1 8}; do
			"$B/dflash" spec --device cuda --target "$D/target" --drafter "$D/drafter" --prompts "$D/heldout.jsonl" \
				--max-new-tokens "$MAX_NEW" --batch "$n" --json >"$OUT/spec-batch$n.json" 2>"$OUT/spec-batch$n.log" ||
				{ fail "dflash spec --batch $n"; tail -n 20 "$OUT/spec-batch$n.log"; continue; }
			echo "batch $n: CUDA graphs $(grep -o 'replays=.*' "$OUT/spec-batch$n.log" | tail -n 1), $(grep -c 'captured again' "$OUT/spec-batch$n.log") regions captured again"
			python3 - "$OUT/spec-batch$n.json" <<'PY' || echo "WARN: --batch $n: greedy outputs differ from the target's (bf16 ties, or a bug: see spec-batch$n.json)"
import json, sys
r = json.load(open(sys.argv[1]))
s, b = r["speculative"], r.get("baseline") or {}
print(f"batch {r['batch']}: tau {r['acceptance_length']:.3f}, with the drafter {s['tokens_per_s']:.1f} tokens/s, "
      f"target alone {b.get('tokens_per_s', 0):.1f}, speedup {r.get('speedup', 0):.2f}x, "
      f"{r.get('greedy_matches', 0)} of {r['prompts']} greedy outputs equal the target's")
sys.exit(0 if r["temperature"] > 0 or r.get("greedy_matches") == r["prompts"] else 1)
PY
		done
	fi
fi

if has decode; then
	echo "== dflash bench decode --device cuda --target qwen3-8b"
	"$B/dflash" bench decode --device cuda --target qwen3-8b --json-file "$OUT/decode.json" >"$OUT/decode.txt" 2>"$OUT/decode.log" ||
		{ fail "dflash bench decode"; tail -n 20 "$OUT/decode.log"; }
	cat "$OUT/decode.txt"
	[ -s "$OUT/decode.json" ] && python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1])))[:3000])' "$OUT/decode.json"
	"$B/dflash" bench decode --device cuda --target qwen3-8b --reps 5 --profile >"$OUT/decode-profile.txt" 2>"$OUT/decode-profile.log" ||
		{ fail "dflash bench decode --profile"; tail -n 20 "$OUT/decode-profile.log"; }
	sed -n '/profiled/,$p' "$OUT/decode-profile.txt" | head -n 40
fi
bundle_out side.txt decode.txt demo.txt
echo "$status"
[ "$status" = PASS ]
