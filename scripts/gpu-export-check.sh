#!/usr/bin/env bash
# gpu-export-check.sh loads dflash exports with z-lab's public DFlash model
# code on the device and decodes with z-lab's own loop (issue 28): for each
# export, bench/zlab_load.py loads it with DFlashDraftModel.from_pretrained
# (a missing, unexpected or misshapen tensor fails), checks every parameter
# against model.safetensors, decodes the held-out prompts greedily with
# dflash_generate and prints the acceptance length; `dflash spec` decodes the
# same prompts on the CPU and its acceptance length is printed beside it.
# The exports: the drafter of `dflash demo --quick` (F32, demo's export) and a
# drafter `dflash train` trains for a few steps on the demo's target (BF16,
# train's export).
#
# Build here first (the GPU machine has no Go and no network):
#   ZLAB_SRC=DIR bash scripts/gpu-export-check.sh --build
# where DIR holds z-lab's dflash/model.py (a checkout of github.com/z-lab/dflash;
# ZLAB_GIT=GITDIR takes it from a git directory instead, HEAD's dflash/model.py).
# It builds dflash, makes the two exports and copies model.py, all into
# .devbuild/export (git-ignored; nothing of z-lab's is kept in the repository).
# Then through the device tool: `bash scripts/gpu-export-check.sh` with carry
# [".devbuild/export"]. Logs and JSON land in $OUT; the last line says PASS or FAIL.
set -uo pipefail
cd "$(dirname "$0")/.."
E=.devbuild/export
if [ "${1:-}" = "--build" ]; then
	set -e
	rm -rf "$E" && mkdir -p "$E/zlab/dflash"
	if [ -n "${ZLAB_GIT:-}" ]; then
		git --git-dir="$ZLAB_GIT" show HEAD:dflash/model.py >"$E/zlab/dflash/model.py"
	elif [ -n "${ZLAB_SRC:-}" ] && [ -f "$ZLAB_SRC/dflash/model.py" ]; then
		cp "$ZLAB_SRC/dflash/model.py" "$E/zlab/dflash/model.py"
	else
		echo "set ZLAB_SRC to a directory with z-lab's dflash/model.py (or ZLAB_GIT to its git directory)" >&2
		exit 1
	fi
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags="-s -w" -o "$E/dflash" ./cmd/dflash
	go build -o "$E/dflash-here" ./cmd/dflash
	"$E/dflash-here" demo --quick --dir "$E/demo-full" --progress off >"$E/demo.txt" 2>"$E/demo.log"
	mkdir -p "$E/demo"
	mv "$E/demo-full/target" "$E/demo-full/drafter" "$E/demo-full/heldout.jsonl" "$E/demo/"
	"$E/dflash-here" train --target "$E/demo/target" --data docs/conversations.example.jsonl --out "$E/train-full" \
		--steps 20 --drafter.block-size 8 --data.max-len 512 --drafter.export BF16 --tensorboard=false \
		>"$E/train.txt" 2>"$E/train.log"
	mv "$E/train-full/drafter" "$E/train-drafter"
	rm -rf "$E/demo-full" "$E/train-full" "$E/.train-full.lock" "$E/dflash-here"
	du -sh "$E"
	exit 0
fi
OUT=${OUT:-$(mktemp -d)}
ZLAB_SRC=${ZLAB_SRC:-$E/zlab}
mkdir -p "$OUT"
status=PASS
fail() { echo "FAIL: $*"; status=FAIL; }
for f in "$E/dflash" "$E/demo/target/config.json" "$E/demo/drafter/config.json" "$E/train-drafter/config.json" "$ZLAB_SRC/dflash/model.py"; do
	[ -e "$f" ] || { echo "FAIL: $f missing: run ZLAB_SRC=DIR bash scripts/gpu-export-check.sh --build here and carry $E"; exit 1; }
done
python3 -c 'import torch, transformers, safetensors; print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())'

# check NAME DRAFTER DTYPE: z-lab's load and decode of one export, then dflash spec on the same prompts.
check() {
	local name=$1 drafter=$2 dtype=$3
	echo "== $name: $drafter in z-lab's DFlashDraftModel ($dtype)"
	python3 bench/zlab_load.py --zlab-src "$ZLAB_SRC" --target "$E/demo/target" --drafter "$drafter" \
		--prompts "$E/demo/heldout.jsonl" --max-new-tokens 96 --dtype "$dtype" --json "$OUT/zlab-$name.json" \
		>"$OUT/zlab-$name.log" 2>&1 || fail "$name: z-lab load or decode (see zlab-$name.log)"
	grep -v '^\s*$' "$OUT/zlab-$name.log" | grep -Ev 'Warning|warn\(' | tail -n 12
	echo "-- $name: dflash spec on the same prompts (CPU)"
	"$E/dflash" spec --target "$E/demo/target" --drafter "$drafter" --prompts "$E/demo/heldout.jsonl" \
		--max-new-tokens 96 --json >"$OUT/spec-$name.json" 2>"$OUT/spec-$name.log" || fail "$name: dflash spec"
	python3 - "$OUT/spec-$name.json" "$OUT/zlab-$name.json" <<'EOF' || fail "$name: comparing"
import json, sys
s = json.load(open(sys.argv[1]))
z = json.load(open(sys.argv[2]))
print(f"acceptance length: z-lab {z['acceptance_length']:.3f} ({z['blocks']} blocks), "
      f"dflash spec {s['acceptance_length']:.3f} ({s['rounds']} rounds); "
      f"greedy equal to the target: z-lab {z['equal_to_target']}/{len(z['prompts'])}, dflash {s['greedy_matches']}/{s['prompts']}")
EOF
}
check demo "$E/demo/drafter" float32
check train "$E/train-drafter" bfloat16
echo "$status"
[ "$status" = PASS ]
