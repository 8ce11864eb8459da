#!/usr/bin/env bash
# gpu-multi.sh runs the multi-GPU checks of issue 7 in ONE device call on a
# machine of kind nvidia-h200-x2 (it runs on one GPU too, and says what it
# could not check). Two steps:
#
#   here (has Go):   bash scripts/gpu-multi.sh build
#   device tool:     kind "nvidia-h200-x2", timeout_s 600,
#                    carry [".devbuild/multi"], command: bash scripts/gpu-multi.sh
#
# On the GPU machine it runs, each process with NVLink multicast off
# (NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1;
# a run with any of them set otherwise, or NCCL_ALGO naming NVLS, is refused):
#   1. nvidia-smi -L, nvidia-smi topo -m, nvlink status, torch's GPU count;
#   2. dflash nccl check --gpus 2: one process, one worker per GPU, all-reduce
#      sum 4K..1G in bf16 and f32 checked exactly, busBw per size, and the
#      kernel cache (both workers ask at once: 1 compile, 2 module loads);
#   3. the same check as two processes of one rank each, rank 0 handing out
#      the NCCL unique id over TCP on 127.0.0.1; checksums must match step 2;
#   4. the ncclcheck GPU tests (host digests, kernel cache);
#   5. NCCL's all_reduce_perf if present (256M, bf16 and float), and always
#      bench/torch_allreduce.py (2 spawned processes, torch.distributed on
#      loopback, 256M bf16 and f32, exact check, busBw, result SHA-256);
#   6. a summary: each check PASS/FAIL and busBw at 256 MiB side by side.
# Outputs under $OUT: summary.txt, summary.json, and logs.tar.gz holding
# single.json, rank0.json, rank1.json, torch.json, nccl-tests-*.txt, the NCCL
# debug files and a .log per step (the device tool returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
B=.devbuild/multi

if [[ ${1:-} == build ]]; then
	set -e
	mkdir -p "$B"
	export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
	go build -trimpath -ldflags="-s -w" -o "$B/dflash" ./cmd/dflash
	go test -c -trimpath -ldflags="-s -w" -o "$B/ncclcheck.test" ./ncclcheck
	ls -l "$B"
	exit 0
fi

# --- NVLink multicast stays off in this shell and everything it starts ---
declare -A MC=([NCCL_NVLS_ENABLE]=0 [TORCH_SYMM_MEM_DISABLE_MULTICAST]=1 [NVSHMEM_DISABLE_NVLS]=1)
for k in "${!MC[@]}"; do
	v=${!k:-}
	if [[ -n $v && $v != "${MC[$k]}" ]]; then
		echo "gpu-multi: refusing to run: $k=$v would turn NVLink multicast on (must be ${MC[$k]} or unset)" >&2
		exit 1
	fi
	export "$k=${MC[$k]}"
done
if [[ ${NCCL_ALGO:-} =~ (^|[,:;[:space:]])[Nn][Vv][Ll][Ss] ]]; then
	echo "gpu-multi: refusing to run: NCCL_ALGO=$NCCL_ALGO names NVLS" >&2
	exit 1
fi
MCENV=(env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1)

OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DFLASH_KERNEL_CACHE=off
if [[ ! -x $B/dflash ]]; then
	echo "gpu-multi: $B/dflash missing: run 'bash scripts/gpu-multi.sh build' here and carry $B" >&2
	exit 1
fi
STEPS=$OUT/steps.jsonl
: >"$STEPS"
# Every step's limit is cut to what is left of the budget (default 540 s,
# under the device call's 600 s), so the summary always gets to run.
BUDGET_END=$(($(date +%s) + ${GPU_MULTI_BUDGET:-540}))

# step NAME TIMEOUT LOG CMD...: runs CMD with the multicast variables set,
# its output to LOG (and the console, last lines), records the exit code.
step() {
	local name=$1 limit=$2 log=$3
	shift 3
	echo "=== $name: $*"
	local t0 rc ms left
	left=$((BUDGET_END - $(date +%s) - 15))
	if ((left < limit)); then limit=$left; fi
	if ((limit < 5)); then
		echo "=== $name: skipped, out of time" | tee "$log"
		printf '{"step": "%s (skipped: out of time)", "rc": 124, "seconds": 0}\n' "$name" >>"$STEPS"
		return 0
	fi
	t0=$(date +%s%N)
	timeout "$limit" "${MCENV[@]}" "$@" >"$log" 2>&1
	rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	tail -n 25 "$log"
	printf '{"step": "%s", "rc": %d, "seconds": %d.%03d}\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) >>"$STEPS"
	echo "--- $name: exit $rc"
	return 0
}

# 1. the machine
step "nvidia-smi -L" 20 "$OUT/smi.log" nvidia-smi -L
step "nvidia-smi topo -m" 20 "$OUT/topo.log" nvidia-smi topo -m
step "nvidia-smi nvlink -s" 20 "$OUT/nvlink.log" nvidia-smi nvlink -s
step "torch sees" 60 "$OUT/torch-env.log" python3 -c 'import torch, os; print("cuda devices", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version(), "torch", torch.__version__); print({k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")})'
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "GPUs: $NGPU"
NR=$((NGPU >= 2 ? 2 : 1))

# 2. one process, one worker per GPU
export NCCL_DEBUG=INFO NCCL_DEBUG_FILE=$OUT/nccl-single.%h.%p.txt
step "dflash nccl check, 1 process x $NR GPUs" 240 "$OUT/single.log" \
	sh -c "$B/dflash nccl check --gpus $NR --sizes 4K..1G --dtype bf16,f32 --timeout 220s --json >$OUT/single.json"

# 3. one rank per process, unique id over TCP on loopback
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export DFLASH_JOB_TOKEN=gpu-multi-$$-$RANDOM NCCL_DEBUG_FILE=$OUT/nccl-multi.%h.%p.txt
if ((NR == 2)); then
	step "dflash nccl check, 2 processes x 1 rank" 240 "$OUT/multi.log" sh -c "
		$B/dflash nccl check --rank 0 --nranks 2 --coordinator 127.0.0.1:$PORT --sizes 4K..1G --dtype bf16,f32 --timeout 220s --json >$OUT/rank0.json 2>$OUT/rank0.log &
		p0=\$!
		$B/dflash nccl check --rank 1 --nranks 2 --coordinator 127.0.0.1:$PORT --sizes 4K..1G --dtype bf16,f32 --timeout 220s --json >$OUT/rank1.json 2>$OUT/rank1.log &
		p1=\$!
		wait \$p0; r0=\$?; wait \$p1; r1=\$?
		echo rank0 exit \$r0, rank1 exit \$r1; cat $OUT/rank0.log $OUT/rank1.log | grep -v 'NCCL INFO' | tail -20
		test \$r0 = 0 -a \$r1 = 0"
fi
unset NCCL_DEBUG NCCL_DEBUG_FILE

# 4. the package's GPU tests
step "ncclcheck GPU tests" 180 "$OUT/ncclcheck-test.log" "$B/ncclcheck.test" -test.v -test.count=1 -test.run GPU -test.timeout 170s

# 5. peers: NCCL's all_reduce_perf (if the image has it) and torch.distributed
ARP=$(command -v all_reduce_perf || ls /usr/local/bin/all_reduce_perf /opt/nccl-tests/build/all_reduce_perf /usr/local/nccl-tests/build/all_reduce_perf /workspace/nccl-tests/build/all_reduce_perf 2>/dev/null | head -1)
if [[ -n $ARP && $NR == 2 ]]; then
	for d in bfloat16 float; do
		step "all_reduce_perf $d 256M" 120 "$OUT/nccl-tests-$d.txt" "$ARP" -b 256M -e 256M -g 2 -d $d -o sum -n 20 -w 5 -c 1
	done
else
	echo "all_reduce_perf: not found on this machine (searched PATH and the usual nccl-tests folders)" | tee "$OUT/nccl-tests-absent.txt"
fi
if ((NR == 2)); then
	step "torch.distributed all_reduce 256M" 240 "$OUT/torch.log" python3 bench/torch_allreduce.py --gpus 2 --sizes 256M --dtype bf16,f32 --out "$OUT/torch.json"
fi

# 6. summary
python3 - "$OUT" "$NGPU" <<'PY' | tee "$OUT/summary.txt"
import glob, json, os, re, sys
out, ngpu = sys.argv[1], int(sys.argv[2])

def load(name):
    p = os.path.join(out, name)
    try:
        with open(p) as f:
            return json.loads(f.read())
    except Exception as e:
        return {"_error": "%s: %s" % (name, e)}

steps = [json.loads(l) for l in open(os.path.join(out, "steps.jsonl")) if l.strip()]
single, r0, r1, torch = load("single.json"), load("rank0.json"), load("rank1.json"), load("torch.json")
checks = []
def check(name, ok, detail=""):
    checks.append((name, "PASS" if ok else "FAIL", detail))

def rows(rep):
    return {(r["dtype"], r["bytes"]): r for r in rep.get("rows", [])}

def exact(rep):
    rs = rep.get("rows", [])
    return bool(rs) and all(r["exact"] and r["agree"] for r in rs)

print("GPUs on this machine: %d" % ngpu)
for s in steps:
    print("step %-45s exit %3d  %6.1f s" % (s["step"], s["rc"], s["seconds"]))
print()
if "_error" in single:
    check("single-process check ran", False, single["_error"])
else:
    n = single["nranks"]
    check("single-process all-reduce exact, %d ranks, %d rows (bf16+f32, 4K..1G)" % (n, len(single["rows"])), exact(single),
          "; ".join(single.get("failures") or []) or "every element equals the integer sum")
    kc = single.get("kernel_cache") or {}
    check("kernel cache: %d workers ask at once -> 1 compile, 1 module per device" % n, bool(kc.get("pass")), kc.get("detail", "not run"))
    check("multicast variables seen by NCCL's getenv", single.get("env") == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}, str(single.get("env")))
if ngpu >= 2:
    for name, rep in (("rank 0", r0), ("rank 1", r1)):
        if "_error" in rep:
            check("two processes: %s ran" % name, False, rep["_error"])
        else:
            check("two processes: %s exact" % name, exact(rep), "; ".join(rep.get("failures") or []) or "ok")
    cs = [rep.get("checksum") for rep in (single, r0, r1)]
    check("checksum: single process == rank 0 == rank 1", None not in cs and len(set(cs)) == 1, " / ".join(str(c)[:16] for c in cs))
    if "_error" not in torch:
        check("torch.distributed result exact", bool(torch.get("pass")), "")
        for t in torch.get("rows", []):
            d = rows(single).get((t["dtype"], t["bytes"]))
            check("torch %s %s result bytes == dflash's (SHA-256)" % (t["dtype"], t["size"]), d is not None and d["sha256"] == t["sha256"],
                  "%s vs %s" % (t["sha256"][:16], d["sha256"][:16] if d else "missing"))
    else:
        check("torch.distributed ran", False, torch["_error"])
else:
    print("BLOCKED: fewer than 2 GPUs: the two-GPU all-reduce, the two-process run and the peers were not run")

print("%-4s | %-78s | %s" % ("OK", "CHECK", "DETAIL"))
print("-" * 140)
for name, ok, detail in checks:
    print("%-4s | %-78s | %s" % (ok, name, detail))

# bus bandwidth per size, single process (and two processes)
if "rows" in single:
    print()
    print("dflash all-reduce (sum), %d ranks: busBw GB/s = 2(n-1)/n * bytes / time; time per call in us" % single["nranks"])
    m = rows(r0) if "rows" in r0 else {}
    print("%-5s %6s | %10s %9s | %10s %9s" % ("dtype", "size", "1 proc us", "busBw", "2 proc us", "busBw"))
    for r in single["rows"]:
        o = m.get((r["dtype"], r["bytes"]))
        b = r["bytes"]
        size = "%dG" % (b >> 30) if b >= 1 << 30 else "%dM" % (b >> 20) if b >= 1 << 20 else "%dK" % (b >> 10)
        print("%-5s %6s | %10.1f %9.2f | %10s %9s" % (r["dtype"], size, r["time_us"], r["busbw_gbs"],
              "%.1f" % o["time_us"] if o else "-", "%.2f" % o["busbw_gbs"] if o else "-"))

# the 256 MiB comparison
peers = {}
for d, label in (("bfloat16", "bf16"), ("float", "f32")):
    p = os.path.join(out, "nccl-tests-%s.txt" % d)
    if os.path.exists(p):
        for line in open(p):
            f = line.split()
            if len(f) >= 13 and f[0] == str(256 << 20):
                peers[("nccl-tests all_reduce_perf (out-of-place)", label)] = float(f[7])
for t in torch.get("rows", []):
    if t["bytes"] == 256 << 20:
        peers[("torch.distributed all_reduce (in-place)", t["dtype"])] = t["busbw_gbs"]
table = []
for label, rep in (("dflash, 1 process (out-of-place)", single), ("dflash, 2 processes (out-of-place)", r0)):
    for (dt, b), r in rows(rep).items():
        if b == 256 << 20:
            peers[(label, dt)] = r["busbw_gbs"]
if peers:
    print()
    print("busBw at 256 MiB, GB/s (NCCL's definition; n = %s)" % single.get("nranks", "?"))
    print("%-45s %10s %10s" % ("implementation", "bf16", "f32"))
    impls = []
    for (impl, _) in peers:
        if impl not in impls:
            impls.append(impl)
    for impl in impls:
        print("%-45s %10s %10s" % (impl, *("%.1f" % peers[(impl, dt)] if (impl, dt) in peers else "-" for dt in ("bf16", "f32"))))
    ref = [k for k in impls if k.startswith("nccl-tests")] or [k for k in impls if k.startswith("torch")]
    if ref:
        for dt in ("bf16", "f32"):
            a, b = peers.get(("dflash, 1 process (out-of-place)", dt)), peers.get((ref[0], dt))
            if a and b:
                print("dflash 1 process / %s, %s: %.3f" % (ref[0].split(" (")[0], dt, a / b))
if not os.path.exists(os.path.join(out, "nccl-tests-bfloat16.txt")):
    print("all_reduce_perf: not run (not on this machine, or fewer than 2 GPUs); torch.distributed is the peer")

# what NCCL said about NVLS and transports
lines = []
for p in sorted(glob.glob(os.path.join(out, "nccl-*.txt"))):
    if "tests" in p:
        continue
    for l in open(p, errors="replace"):
        if re.search(r"NVLS|nvls|via P2P|via SHM|NCCL_NVLS_ENABLE|NCCL version", l):
            lines.append(os.path.basename(p) + ": " + l.strip())
if lines:
    print()
    print("NCCL INFO lines on NVLS and transports (first 12):")
    for l in lines[:12]:
        print("  " + l)
fails = [c for c in checks if c[1] != "PASS"]
print()
print("summary: %d checks, %d failed%s" % (len(checks), len(fails), "" if ngpu >= 2 else "; BLOCKED (fewer than 2 GPUs)"))
json.dump({"gpus": ngpu, "checks": [{"check": c[0], "result": c[1], "detail": c[2]} for c in checks], "busbw_256M": {"%s|%s" % k: v for k, v in peers.items()}},
          open(os.path.join(out, "summary.json"), "w"), indent=1)
PY

# The device tool brings back at most 8 files: keep the two summaries loose
# and pack everything else into one archive.
(cd "$OUT" && find . -maxdepth 1 -type f ! -name 'summary.*' ! -name logs.tar.gz ! -name .pack -printf '%P\n' >.pack &&
	tar czf logs.tar.gz -T .pack && xargs rm -f <.pack && rm -f .pack)
