#!/usr/bin/env bash
# gpu-run-bench.sh is issue 26's whole-run benchmark: `dflash train --device cuda` trained for real
# on one H200 as a new user would run it (a Qwen3-8B HF directory, chat data through `data prep`, the
# default evaluation and checkpoint cadence), and where its wall time goes (bench/run_report.py).
#
# Build here first (the GPU machine has no Go): bash scripts/gpu-run-bench.sh --build
# (the dflash binary and the Qwen3 tokenizer files, xz-compressed into .devbuild/runbench.txz), then
# through the device tool, with carry [".devbuild/runbench.txz"], one part per call (each takes about
# 5-8 minutes and a call at most 10):
#   PARTS=packed bash scripts/gpu-run-bench.sh
#   PARTS=buckets bash scripts/gpu-run-bench.sh
#   PARTS=peer bash scripts/gpu-run-bench.sh
# PARTS (default "packed buckets peer") chooses what runs:
# - setup: only what the others make first when $WORK lacks it (below), for a first call of its own;
# - packed: `dflash train` with packed batches (the default), --data.batch-size ${PACK_ROWS:-2} rows a
#   step (PACK_LEN sets --data.pack-len; PACKED_ARGS replaces both);
# - buckets: the same run with --data.pack=false --data.buckets 3 --data.batch-size 4 (BUCKET_ARGS
#   replaces them);
# - start: the start alone, `dflash train` killed once its fourth step's record is written, with an
#   empty kernel cache and then a warm one (its `start` log line: the target's read and upload, the
#   compiles, the GEMM tuning, the first step and its driver allocations; the steps' cumulative times);
# - peer: bench/run_peer.py, the PyTorch peer's step (bench/step_peer.py, --mode ${PEER_MODE:-shipped})
#   at padded lengths 256..3072, weighted by the longest rows of batches of 4 drawn from the data set.
# Before a training part, whatever is missing from $WORK (${WORK:-/tmp/runbench}, local disk; a warm
# machine keeps it between calls) is made: the random-weight Qwen3-8B directory (bench/random_qwen3.py,
# 16 GB), the data set (bench/make_chats.py: ${CHATS:-2500} conversations of real chat lengths, --seed
# ${SEED:-1}) and its `data prep` directory. Both training runs: --drafter.layers 5 --steps
# ${STEPS:-300} and train's defaults otherwise (an evaluation every 100 steps and at the end, a
# checkpoint every 200 and at the end, TensorBoard files, the plot), under timeout ${TRAIN_TIMEOUT:-480}
# s, with an empty kernel cache first (KERNEL_CACHE=warm keeps it); TRAIN_ARGS adds flags to both.
# A run's directory is removed after it (its checkpoints are 12 GB each).
#
# $OUT gets, per part, its directory: packed/ and buckets/ (command.txt, train.log, metrics.jsonl, the
# TensorBoard event file, plot.png, times.json: the process's start, end and exit status), peer/
# (peer.json, peer.log), data/ (the generator's and data prep's summaries, data stats with 3 buckets),
# setup/ (the GPU, the disk, the model's writing); the parts of earlier calls on the same machine are
# copied in too, and report.txt is bench/run_report.py over all of them; all of it is packed into
# $OUT/all.tgz beside report.txt (the device tool brings back 8 files). The last line says PASS or FAIL.
set -uo pipefail
cd "$(dirname "$0")/.."
B=.devbuild/runbench
if [ "${1:-}" = "--build" ]; then
	set -e
	rm -rf "$B" "$B.txz" && mkdir -p "$B/tokenizer"
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags="-s -w" -o "$B/dflash" ./cmd/dflash
	tok=testdata-cache/tokenizers/qwen3
	[ -s "$tok/tokenizer.json" ] && [ -s "$tok/tokenizer_config.json" ] || bash scripts/fetch-testdata.sh
	cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$B/tokenizer/"
	tar -cJf "$B.txz" -C "$(dirname "$B")" "$(basename "$B")"
	du -sh "$B" "$B.txz"
	exit 0
fi
DEVBUILD=$B . scripts/devbuild.sh
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/runbench}
mkdir -p "$OUT" "$WORK/out"
PARTS=${PARTS:-packed buckets peer}
STEPS=${STEPS:-300}
MODEL=$WORK/qwen3-8b PREP=$WORK/prep
status=PASS
fail() { echo "FAIL: $*"; status=FAIL; }
has() { [[ " $PARTS " == *" $1 "* ]]; }

mkdir -p "$OUT/setup"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/setup/gpu.txt"
df -h "$WORK" >"$OUT/setup/disk.txt"

# data makes the data set and its prepared directory in $WORK when they are missing.
data() {
	[ -d "$PREP" ] && return 0
	mkdir -p "$OUT/data"
	python3 bench/make_chats.py "$WORK/chats.jsonl" --n "${CHATS:-2500}" --seed "${SEED:-1}" 2>&1 | tee "$OUT/data/make_chats.txt" ||
		{ fail "make_chats.py"; return 1; }
	# data prep writes its directory atomically: a failed one leaves none.
	"$B/dflash" data prep --tokenizer "$B/tokenizer" --data "$WORK/chats.jsonl" --out "$PREP" >"$OUT/data/prep.txt" 2>&1 ||
		{ fail "data prep"; tail -n 5 "$OUT/data/prep.txt"; return 1; }
	cat "$OUT/data/prep.txt"
	"$B/dflash" data stats --buckets 3 "$PREP" | tee "$OUT/data/stats.txt"
	"$B/dflash" data stats --buckets 3 --json "$PREP" >"$OUT/data/stats.json"
	cp -r "$OUT/data" "$WORK/out/"
}

# model writes the random-weight Qwen3-8B directory in $WORK when it is missing.
model() {
	[ -f "$MODEL/config.json" ] && return 0
	echo "== random-weight Qwen3-8B into $MODEL"
	python3 bench/random_qwen3.py "$MODEL" --config qwen3-8b --tokenizer "$B/tokenizer" 2>&1 | tee "$OUT/setup/model.txt"
	[ -f "$MODEL/config.json" ] || { fail "random_qwen3.py"; return 1; }
	du -sh "$MODEL" | tee -a "$OUT/setup/model.txt"
}

# train NAME FLAGS... runs `dflash train` into $WORK/run-NAME and keeps its logs and metrics in $OUT/NAME.
train() {
	local name=$1 run=$WORK/run-$1 res=$OUT/$1
	shift
	rm -rf "$run" "$res" "$WORK/out/$name" && mkdir -p "$res"
	[ "${KERNEL_CACHE:-cold}" = cold ] && rm -rf "$DFLASH_KERNEL_CACHE"
	local cmd=("$B/dflash" train --device cuda --target "$MODEL" --data "$PREP" --out "$run"
		--drafter.layers 5 --steps "$STEPS" "$@" ${TRAIN_ARGS:-})
	echo "== $name: ${cmd[*]}"
	echo "${cmd[*]}" >"$res/command.txt"
	local start end rc
	start=$(date +%s.%N)
	timeout "${TRAIN_TIMEOUT:-480}" "${cmd[@]}" >"$res/train.log" 2>&1
	rc=$?
	end=$(date +%s.%N)
	printf '{"start": %s, "end": %s, "rc": %d}\n' "$start" "$end" "$rc" >"$res/times.json"
	cp "$run/metrics.jsonl" "$run"/events.out.tfevents.* "$run/plot.png" "$res/" 2>/dev/null
	{ du -sh "$run"/checkpoint-* "$run/drafter"; df -h "$WORK"; } >"$res/sizes.txt" 2>/dev/null
	rm -rf "$run"
	[ "$rc" = 0 ] || { fail "$name: dflash train exit $rc"; grep -v '^step ' "$res/train.log" | tail -n 8; }
	grep -E '^trained|split' "$res/train.log" | tail -n 3
	cp -r "$res" "$WORK/out/"
}

if has setup || has packed || has buckets || has start; then
	model && data || { echo "-> FAIL"; exit 1; }
fi
if has packed; then
	args=(--data.batch-size "${PACK_ROWS:-2}")
	[ -n "${PACK_LEN:-}" ] && args+=(--data.pack-len "$PACK_LEN")
	[ -n "${PACKED_ARGS:-}" ] && read -ra args <<<"$PACKED_ARGS"
	train packed "${args[@]}"
fi
if has buckets; then
	read -ra args <<<"${BUCKET_ARGS:---data.pack=false --data.buckets 3 --data.batch-size 4}"
	train buckets "${args[@]}"
fi
if has start; then
	# The start alone, cold (an empty kernel cache) then warm: each run is
	# killed once its first step's record has logged the start's split.
	mkdir -p "$OUT/start"
	for cache in cold warm; do
		[ "$cache" = cold ] && rm -rf "$DFLASH_KERNEL_CACHE"
		rm -rf "$WORK/run-start"
		"$B/dflash" train --device cuda --target "$MODEL" --data "$PREP" --out "$WORK/run-start" --drafter.layers 5 \
			--steps 5 --data.batch-size "${PACK_ROWS:-2}" --progress off --plot=false >"$OUT/start/$cache.log" 2>&1 &
		pid=$!
		for _ in $(seq 240); do
			[ "$(cat "$WORK/run-start/metrics.jsonl" 2>/dev/null | wc -l)" -ge 4 ] && break
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		echo "start ($cache kernel cache): $(grep -o 'msg=start.*' "$OUT/start/$cache.log" || echo none)"
		grep -o 'msg="checkpoint snapshot memory".*' "$OUT/start/$cache.log"
		cp "$WORK/run-start/metrics.jsonl" "$OUT/start/$cache-metrics.jsonl" 2>/dev/null
		python3 -c 'import json,sys; print("steps 1-4 s:", [round(json.loads(l)["time_steps_s"],3) for l in open(sys.argv[1])])' \
			"$OUT/start/$cache-metrics.jsonl" 2>/dev/null
		grep -q 'msg=start' "$OUT/start/$cache.log" || { fail "start ($cache): no start line"; tail -n 5 "$OUT/start/$cache.log"; }
	done
	rm -rf "$WORK/run-start"
fi
if has peer; then
	echo "== peer: bench/run_peer.py on the data set's lengths"
	data || { echo "-> FAIL"; exit 1; }
	rm -rf "$OUT/peer" "$WORK/out/peer" && mkdir -p "$OUT/peer"
	python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee "$OUT/peer/versions.txt"
	"$B/dflash" data show --tokenizer "$B/tokenizer" -n 100000000 "$PREP" |
		sed -n 's/^=== sample [0-9]*: \([0-9]*\) tokens.*/\1/p' >"$WORK/lengths.txt"
	echo "$(wc -l <"$WORK/lengths.txt") sample lengths"
	timeout "${PEER_TIMEOUT:-480}" python3 bench/run_peer.py --lengths "$WORK/lengths.txt" --mode "${PEER_MODE:-shipped}" \
		${PEER_GRID:+--grid "$PEER_GRID"} --json "$OUT/peer/peer.json" >"$OUT/peer/peer.log" 2>&1 || fail "run_peer.py exit $?"
	grep -E '^(peer|step_peer|  step)' "$OUT/peer/peer.log" | tail -n 20
	[ -s "$OUT/peer/peer.json" ] || { fail "no peer.json"; tail -n 10 "$OUT/peer/peer.log"; }
	cp -r "$OUT/peer" "$WORK/out/"
fi

# The parts of earlier calls on this machine, then the report over everything.
for d in "$WORK"/out/*/; do
	[ -e "$OUT/$(basename "$d")" ] || cp -r "$d" "$OUT/"
done
python3 bench/run_report.py "$OUT" | tee "$OUT/report.txt"
bundle_out report.txt
echo "-> $status"
