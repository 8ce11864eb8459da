#!/usr/bin/env bash
# gpu-train.sh is the GPU check of training on the device (issue 13), in one
# device call: the CUDA backend's GPU tests and those of training on it
# (train/traincuda: train.Params on the CUDA backend, its fused AdamW,
# norm and checkpoints, against the CPU backend's and PyTorch), the drafter step on CUDA against
# the float64 golden (head dim 64, generated here by bench/drafter_ref.py), the
# targets' hidden states on CUDA against transformers (scripts/golden_hf_gpu.py),
# `dflash train` for STEPS steps on the CUDA backend and on the CPU with the same
# configuration (their loss curves side by side), a --deterministic run killed
# with SIGKILL and resumed against the same run straight through (bit for bit),
# and `dflash bench step --device cuda` for the qwen3-0.6b, qwen3-8b (also
# --drafter-only) and qwen3-1.7b shapes.
# The training runs' TensorBoard event files are checked against their
# metrics.jsonl with tensorboard itself (scripts/tb_check.py).
#
# Build here first (the GPU machine has no Go): bash scripts/gpu-train.sh --build
# then through the device tool run `bash scripts/gpu-train.sh` with carry
# [".devbuild/train.txz"] (the binaries xz-compressed: uncompressed they pass
# the carry limit). Everything lands in $OUT: logs, the d64 golden file (commit
# it as model/dflash/testdata/golden_drafter_d64.safetensors), the runs' metrics,
# the loss table (loss.txt) and the bench step JSON; bulky outputs (checkpoints,
# the transformers models) stay in $WORK. The last line says PASS or FAIL.
# PARTS (default "tests golden train resume bench"; "speceval" adds --spec-eval-every's check on the GPU,
# "base" adds the 8B step beside a previous build's
# (--build-base REV builds it); "profile" adds
# scripts/gpu-step-prof.sh, "compare" scripts/gpu-step-compare.sh) chooses what runs; TRAIN_ARGS adds
# flags to both training runs (default none: packed batches, one shape, the
# passes replayed as CUDA graphs after the first step; each step's pad_frac in
# the metrics; TRAIN_ARGS="--data.pack=false --data.buckets 3" for length buckets).
set -uo pipefail
cd "$(dirname "$0")/.."
B=.devbuild/train
if [ "${1:-}" = "--build-base" ]; then
	# The dflash binary of revision ${2:-HEAD}, for PARTS=base.
	set -e
	rev=${2:-HEAD} tmp=$(mktemp -d)
	git worktree add -q --detach "$tmp" "$rev"
	(cd "$tmp" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags="-s -w" -o dflash ./cmd/dflash)
	mkdir -p .devbuild/base && rm -f .devbuild/base/dflash .devbuild/base/dflash.xz
	xz -c "$tmp/dflash" >.devbuild/base/dflash.xz
	git worktree remove --force "$tmp"
	echo "base build of $(git rev-parse --short "$rev"): .devbuild/base/dflash.xz (carry it)"
	exit 0
fi
if [ "${1:-}" = "--build" ]; then
	set -e
	rm -rf "$B" && mkdir -p "$B"
	export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
	go build -trimpath -ldflags="-s -w" -o "$B/dflash" ./cmd/dflash
	go test -c -trimpath -ldflags="-s -w" -o "$B/tensorcuda.test" ./tensor/tensorcuda
	go test -c -trimpath -ldflags="-s -w" -o "$B/traincuda.test" ./train/traincuda
	go test -c -trimpath -ldflags="-s -w" -o "$B/gpu.test" ./gpu
	go test -c -trimpath -ldflags="-s -w" -o "$B/model.test" ./model
	go test -c -trimpath -ldflags="-s -w" -o "$B/dflash.test" ./model/dflash
	go test -c -trimpath -ldflags="-s -w" -o "$B/flexcuda.test" ./flex/flexcuda
	go test -c -trimpath -ldflags="-s -w" -o "$B/spec.test" ./spec
	go test -count=1 -run TestWriteTrainFixture ./cmd/dflash -train-fixture "$PWD/$B/fixture" >/dev/null
	du -sh "$B"
	# The binaries are more than the device tool carries (64 MiB with the tree); compressed they fit.
	tar -cJf "$B.txz" -C "$(dirname "$B")" "$(basename "$B")"
	du -sh "$B.txz"
	exit 0
fi
. scripts/devbuild.sh
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-/tmp/gpu-train}
mkdir -p "$OUT" "$WORK"
PARTS=${PARTS:-tests golden train resume bench}
STEPS=${STEPS:-200}
TRAIN_ARGS=${TRAIN_ARGS-}
status=PASS
fail() { echo "FAIL: $*"; status=FAIL; }
has() { [[ " $PARTS " == *" $1 "* ]]; }

if has tests; then
	echo "== tensorcuda GPU tests"
	"$B/tensorcuda.test" -test.run 'GPU' -test.v >"$OUT/tensorcuda.log" 2>&1 || fail "tensorcuda GPU tests"
	grep -E '^(--- |ok|FAIL|PASS)' "$OUT/tensorcuda.log" | tail -n 30
	python3 scripts/testfails.py "$OUT/tensorcuda.log" 40
	echo "== traincuda GPU tests (AdamW, train.Params, against the CPU backend and PyTorch)"
	"$B/traincuda.test" -test.run 'GPU' -test.v >"$OUT/traincuda.log" 2>&1 || fail "traincuda GPU tests"
	grep -E '^(--- |ok|FAIL|PASS)' "$OUT/traincuda.log" | tail -n 30
	python3 scripts/testfails.py "$OUT/traincuda.log" 40
	echo "== flexcuda GPU tests of the block-mask builders and attention (packed DFlash masks)"
	"$B/flexcuda.test" -test.v -test.timeout 300s -test.run 'TestGPUDFlashPackedBuilders|TestGPUBlockMaskBuilders|TestGPUAttention$' >"$OUT/flexcuda.log" 2>&1 || fail "flexcuda GPU tests"
	grep -E '^(--- |ok|FAIL|PASS)' "$OUT/flexcuda.log" | tail -n 30
	python3 scripts/testfails.py "$OUT/flexcuda.log" 40
	echo "== decoding on CUDA: the target against the CPU, greedy speculative decoding lossless"
	(cd model && "../$B/model.test" -test.run 'TestGPUDecode|TestGPUTargetBackward' -test.v) >"$OUT/model-decode.log" 2>&1 || fail "TestGPUDecode, TestGPUDecodeRows, TestGPUTargetBackward"
	grep -E '^(--- |ok|FAIL|PASS)' "$OUT/model-decode.log" | tail -n 10
	(cd spec && "../$B/spec.test" -test.run 'TestGPUGreedyLossless' -test.v) >"$OUT/spec.log" 2>&1 || fail "TestGPUGreedyLossless"
	grep -E '^(--- |ok|FAIL|PASS)|oracle:' "$OUT/spec.log" | tail -n 10
	python3 scripts/testfails.py "$OUT/spec.log" 40
	echo "== the evaluation cache on CUDA: the same metrics, the target at the first evaluation only, freed"
	(cd model/dflash && "../../$B/dflash.test" -test.run 'TestGPUEvalCache$' -test.v) >"$OUT/dflash-evalcache.log" 2>&1 || fail "TestGPUEvalCache"
	grep -E '^(--- |ok|FAIL|PASS)|evaluation [0-9]' "$OUT/dflash-evalcache.log" | tail -n 10
	python3 scripts/testfails.py "$OUT/dflash-evalcache.log" 40
	echo "== gpu package GPU tests (graphs, Replay, staged uploads, allocator)"
	(cd gpu && ../"$B/gpu.test" -test.v) >"$OUT/gpu.log" 2>&1 || fail "gpu GPU tests"
	grep -E '^(--- |ok|FAIL|PASS)' "$OUT/gpu.log" | grep -v SKIP | tail -n 30
	python3 scripts/testfails.py "$OUT/gpu.log" 40
fi

if has golden; then
	echo "== drafter golden at head dim 64 (float64 PyTorch reference)"
	python3 bench/drafter_ref.py --head-dim 64 --out "$OUT/golden_drafter_d64.safetensors" >"$OUT/drafter_ref.log" 2>&1 ||
		{ fail "drafter_ref.py"; tail -n 8 "$OUT/drafter_ref.log"; }
	(cd model/dflash && DFLASH_DRAFTER_GPU_GOLDEN="$OUT/golden_drafter_d64.safetensors" "../../$B/dflash.test" -test.run 'TestGPUGolden$' -test.v) \
		>"$OUT/dflash-golden.log" 2>&1 || fail "TestGPUGolden"
	grep -E -- '--- |golden_test|gpu_golden' "$OUT/dflash-golden.log" | tail -n 30
	echo "== targets against transformers on CUDA"
	python3 scripts/golden_hf_gpu.py --out "$WORK/hf" >"$OUT/golden_hf_gpu.log" 2>&1 || fail "golden_hf_gpu.py"
	grep 'transformers bf16' "$OUT/golden_hf_gpu.log"
	(cd model && DFLASH_HF_GPU_GOLDEN="$WORK/hf" "../$B/model.test" -test.run 'TestGPUGoldenHF' -test.v) >"$OUT/model-golden.log" 2>&1 || fail "TestGPUGoldenHF"
	grep -E -- '--- |hidden state' "$OUT/model-golden.log" | tail -n 30
fi

if has train; then
	for dev in cuda cpu; do
		echo "== dflash train --device $dev, $STEPS steps"
		start=$SECONDS
		"$B/dflash" train --device "$dev" --target "$B/fixture/target" --data "$B/fixture/conv.jsonl" --out "$WORK/run-$dev" \
			--steps "$STEPS" --eval-every 50 --save-every 100 --progress off --plot=false --drafter.layers 2 --drafter.block-size 8 \
			--drafter.anchors 32 --data.batch-size 4 --drafter.export F32 $TRAIN_ARGS >"$OUT/train-$dev.log" 2>&1 || fail "train --device $dev"
		echo "$dev: $((SECONDS - start)) s"; tail -n 4 "$OUT/train-$dev.log"; grep -E 'bucket steps|kernel cache' "$OUT/train-$dev.log"
		cp "$WORK/run-$dev/metrics.jsonl" "$OUT/metrics-$dev.jsonl" 2>/dev/null
		python3 scripts/tb_check.py "$WORK/run-$dev" || fail "TensorBoard event files of train --device $dev"
	done
	python3 - "$OUT" >"$OUT/loss.txt" <<'PY' || fail "loss comparison"
import json, sys
out = sys.argv[1]
def losses(dev):
    r = {}
    for line in open(f"{out}/metrics-{dev}.jsonl"):
        m = json.loads(line)
        if m.get("kind") == "train":
            r[m["step"]] = m["loss"]
    return r
g, c = losses("cuda"), losses("cpu")
steps = sorted(set(g) & set(c))
print("step  loss cuda  loss cpu  rel diff")
worst = 0
for s in steps:
    d = abs(g[s] - c[s]) / c[s]
    worst = max(worst, d)
    if s % 20 == 0 or s == 1:
        print(f"{s:4d}  {g[s]:9.4f}  {c[s]:8.4f}  {d:8.2e}")
def mean(r, lo, hi):
    v = [r[s] for s in steps if lo <= s <= hi]
    return sum(v) / len(v)
n = steps[-1]
print(f"first 10 steps mean: cuda {mean(g, 1, 10):.4f} cpu {mean(c, 1, 10):.4f}; last 20: cuda {mean(g, n-19, n):.4f} cpu {mean(c, n-19, n):.4f}; worst step rel diff {worst:.3g}")
for dev in ("cuda", "cpu"):
    last = [json.loads(l) for l in open(f"{out}/metrics-{dev}.jsonl") if '"kind":"train"' in l][-1]
    print(dev, "last step:", ", ".join(f"{k} {last[k]:.4g}" for k in ("samples_per_s", "tokens_per_s", "tflops", "mfu",
          "device_mem_bytes", "device_mem_peak_bytes", "compiles") if k in last))
PY
	cat "$OUT/loss.txt"
fi

if has resume; then
	# Issue 14's resume check: a --deterministic run killed with SIGKILL after its first checkpoint,
	# then --resume, must end bit-identical to the same run straight through.
	args=(train --device cuda --deterministic --target "$B/fixture/target" --data "$B/fixture/conv.jsonl" --steps "$STEPS"
		--save-every 20 --eval-every 0 --progress off --plot=false --drafter.layers 2 --drafter.block-size 8
		--drafter.anchors 32 --data.batch-size 4 --drafter.export F32 $TRAIN_ARGS)
	echo "== resume after SIGKILL (--deterministic, $STEPS steps)"
	rm -rf "$WORK/det-a" "$WORK/det-b" # a warm machine keeps the last call's
	"$B/dflash" "${args[@]}" --out "$WORK/det-a" >"$OUT/det-a.log" 2>&1 || fail "deterministic run"
	"$B/dflash" "${args[@]}" --out "$WORK/det-b" >"$OUT/det-b.log" 2>&1 &
	pid=$!
	# Killed as soon as its first checkpoint is there: a warm run makes 200 steps in seconds.
	for _ in $(seq 6000); do ls -d "$WORK/det-b"/checkpoint-* >/dev/null 2>&1 && break; sleep 0.01; done
	kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
	echo "killed after: $(ls -d "$WORK/det-b"/checkpoint-* 2>/dev/null | tr '\n' ' ')"
	"$B/dflash" "${args[@]}" --out "$WORK/det-b" --resume >"$OUT/det-b-resume.log" 2>&1 || fail "--resume"
	grep -m1 resumed "$OUT/det-b-resume.log"
	from=$(grep -m1 -o 'resumed .*step=[0-9]*' "$OUT/det-b-resume.log" | grep -o '[0-9]*$')
	[ -n "$from" ] && [ "$from" -lt "$STEPS" ] || fail "the resumed run started at step '${from}', not before step $STEPS: the kill came after the run's end"
	# The killed run logged points past its checkpoint: TensorBoard must drop them (SessionLog START).
	python3 scripts/tb_check.py "$WORK/det-b" || fail "TensorBoard event files of the resumed run"
	if cmp -s "$WORK/det-a/drafter/model.safetensors" "$WORK/det-b/drafter/model.safetensors"; then
		echo "resumed run: drafter bit-identical to the straight run"
	else
		fail "resumed run's drafter differs from the straight run's"
	fi
fi

if has bench; then
	echo "== bench step --device cuda"
	"$B/dflash" bench step --device cuda --target-config qwen3-0.6b --seq-len 1024 --batch 2 --anchors 128 --drafter-layers 2 \
		--steps 5 --warmup 2 --json >"$OUT/bench-0.6b.json" 2>"$OUT/bench-0.6b.log" || { fail "bench step qwen3-0.6b"; grep -v '^\s' "$OUT/bench-0.6b.log" | head -n 20; }
	"$B/dflash" bench step --device cuda --target-config qwen3-8b --seq-len 3072 --batch 4 --anchors 512 --block-size 16 \
		--drafter-layers 5 --steps 5 --warmup 2 --json >"$OUT/bench-8b.json" 2>"$OUT/bench-8b.log" || { fail "bench step qwen3-8b"; grep -v '^\s' "$OUT/bench-8b.log" | head -n 20; }
	case8b=(--seq-len 3072 --batch 4 --anchors 512 --block-size 16 --drafter-layers 5 --steps 5 --warmup 2 --json)
	DFLASH_CUDA_GRAPHS=0 "$B/dflash" bench step --device cuda --target-config qwen3-8b "${case8b[@]}" >"$OUT/bench-8b-nographs.json" 2>"$OUT/bench-8b-nographs.log" ||
		{ fail "bench step qwen3-8b without graphs"; grep -v '^\s' "$OUT/bench-8b-nographs.log" | head -n 20; }
	"$B/dflash" bench step --device cuda --target-config qwen3-8b --drafter-only "${case8b[@]}" >"$OUT/bench-8b-drafter.json" 2>"$OUT/bench-8b-drafter.log" ||
		{ fail "bench step qwen3-8b --drafter-only"; grep -v '^\s' "$OUT/bench-8b-drafter.log" | head -n 20; }
	"$B/dflash" bench step --device cuda --target-config qwen3-1.7b "${case8b[@]}" >"$OUT/bench-1.7b.json" 2>"$OUT/bench-1.7b.log" ||
		{ fail "bench step qwen3-1.7b"; grep -v '^\s' "$OUT/bench-1.7b.log" | head -n 20; }
	python3 - "$OUT" <<'PY'
import json, sys, os
for name in ("0.6b", "8b", "8b-nographs", "8b-drafter", "1.7b"):
    p = f"{sys.argv[1]}/bench-{name}.json"
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        continue
    r = json.load(open(p))
    ph = r["phases_ms"]
    print(f"qwen3-{name}: step {r['step_ms']:.1f} ms, {r['samples_per_s']:.2f} samples/s, MFU {100*r['mfu']['step']:.1f}%, "
          f"phases {json.dumps({k: round(v, 1) for k, v in ph.items()})}, peak device {r.get('peak_device_bytes', 0)/2**30:.1f} GiB, "
          f"step arena peak in use {r.get('step_arena_bytes', 0)/2**30:.1f} GiB, reserved {r.get('step_arena_reserved_bytes', 0)/2**30:.1f} GiB "
          f"(most {r.get('step_arena_most_reserved_bytes', 0)/2**30:.1f} GiB, "
          f"{'in place' if r.get('step_arena_in_place') else 'in chunks'}), "
          f"first step {r.get('first_step_ms', 0)/1e3:.1f} s, loss {r['loss']:.3f}, regions {r.get('replays')}, per step {r.get('per_step')}")
PY
fi

if has base; then
	# The 8B step of this build beside a previous build's (issue 25: a redesign keeps the step within 2%):
	# BASE (default .devbuild/base/dflash, from `bash scripts/gpu-train.sh --build-base REV`) and this build
	# alternate, three runs each, and the median step times are compared.
	BASE=${BASE:-.devbuild/base/dflash}
	[ -x "$BASE" ] || { [ -f "$BASE.xz" ] && xz -dk "$BASE.xz"; }
	if [ -x "$BASE" ]; then
		echo "== bench step qwen3-8b: this build beside $BASE"
		case8b=(--target-config qwen3-8b --seq-len 3072 --batch 4 --anchors 512 --block-size 16 --drafter-layers 5 --steps 5 --warmup 2 --json)
		for i in 1 2 3; do
			"$BASE" bench step --device cuda "${case8b[@]}" >"$OUT/base-8b-old-$i.json" 2>/dev/null || fail "base build bench step"
			"$B/dflash" bench step --device cuda "${case8b[@]}" >"$OUT/base-8b-new-$i.json" 2>/dev/null || fail "bench step"
		done
		python3 - "$OUT" <<'PY' || fail "this build's 8B step is more than 2% slower than the base build's"
import json, statistics, sys
out = sys.argv[1]
def med(kind):
    return statistics.median(json.load(open(f"{out}/base-8b-{kind}-{i}.json"))["step_ms"] for i in (1, 2, 3))
old, new = med("old"), med("new")
print(f"qwen3-8b step: base {old:.1f} ms, this build {new:.1f} ms, ratio {new/old:.4f}")
sys.exit(0 if new <= 1.02 * old else 1)
PY
	else
		fail "no base build at $BASE"
	fi
fi

if has speceval; then
	# Issue 27 item 4: --spec-eval-every on the GPU. Two --deterministic runs, with spec evaluations every 20
	# steps and without: the same loss at every step bit for bit, spec_tau in the eval records of steps
	# 20, 40, ... and the last, the same graph captures (decoding between steps leaves the step arena and
	# the allocator so that training's graphs replay) and no "captured again" warning.
	args=(train --device cuda --deterministic --target "$B/fixture/target" --data "$B/fixture/conv.jsonl" --steps "$STEPS"
		--eval-every 20 --progress off --plot=false --drafter.layers 2 --drafter.block-size 8 --drafter.anchors 32
		--data.batch-size 4 --spec-prompts 8 --spec-max-new-tokens 64 $TRAIN_ARGS)
	echo "== --spec-eval-every on the GPU ($STEPS steps, --deterministic, with and without)"
	rm -rf "$WORK/spec-0" "$WORK/spec-20"
	for every in 0 20; do
		"$B/dflash" "${args[@]}" --spec-eval-every "$every" --out "$WORK/spec-$every" >"$OUT/speceval-$every.log" 2>&1 || fail "train --spec-eval-every $every"
		cp "$WORK/spec-$every/metrics.jsonl" "$OUT/metrics-speceval-$every.jsonl" 2>/dev/null
	done
	grep -q 'captured again' "$OUT/speceval-20.log" && fail "a CUDA graph was captured again with spec evaluations"
	grep -E 'eval @' "$OUT/speceval-20.log" | tail -n 3
	python3 - "$OUT" <<'PY' || fail "spec evaluations changed training"
import json, sys
out = sys.argv[1]
def recs(every):
    return [json.loads(l) for l in open(f"{out}/metrics-speceval-{every}.jsonl")]
a, b = recs(0), recs(20)
la = [(r["step"], r["loss"]) for r in a if r["kind"] == "train"]
lb = [(r["step"], r["loss"]) for r in b if r["kind"] == "train"]
assert la == lb, f"losses differ: first at {next(((x, y) for x, y in zip(la, lb) if x != y), None)}"
spec = [r for r in b if r["kind"] == "eval" and "spec_tau" in r]
assert spec and all(1 <= r["spec_tau"] <= 8 and "spec_pos_7" in r and r["spec_tokens_per_s"] > 0 for r in spec), spec
caps = [[r.get("graph_captures") for r in x if r["kind"] == "train"][-1] for x in (a, b)]
assert caps[0] == caps[1], f"graph captures {caps[0]} without spec evaluations, {caps[1]} with"
evals = {r["step"]: r["time_eval_s"] for r in b if r["kind"] == "eval"}
print(f"losses of {len(la)} steps identical; spec_tau at steps {[r['step'] for r in spec]}: "
      + ", ".join(f"{r['spec_tau']:.3f}" for r in spec) + f" (simulated tau {spec[-1]['tau']:.3f}); graph captures {caps[1]}")
print(f"eval time with spec: {evals[max(evals)]:.1f} s in all; steps {[r for r in b if r['kind'] == 'train'][-1]['time_steps_s']:.1f} s")
PY
fi

if has profile; then
	echo "== bench step --profile (qwen3-8b)"
	bash scripts/gpu-step-prof.sh || fail "bench step --profile"
fi

if has compare; then
	echo "== bench step beside the PyTorch peer (scripts/gpu-step-compare.sh, TARGETS=${TARGETS:-qwen3-8b qwen3-1.7b})"
	bash scripts/gpu-step-compare.sh || fail "gpu-step-compare.sh"
fi
echo "-> $status"
