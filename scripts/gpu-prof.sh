#!/usr/bin/env bash
# gpu-prof.sh: Nsight Compute summaries of the flex attention kernels on one
# case, for finding what limits them (stall reasons, pipe utilisation).
#
# Built here first: CGO_ENABLED=0 go build -o .devbuild/dflash ./cmd/dflash
# Device call, carry [.devbuild/dflash]:
#   bash scripts/gpu-prof.sh [kernel regex] [dflash bench arguments...]
# Default: flex_fwd|flex_bwd_dkdv on case (a), causal B4 H16 S4096 D128.
set -uo pipefail
cd "$(dirname "$0")/.."
K=${1:-'regex:flex_fwd|flex_bwd_dkdv'}
shift || true
ARGS=("$@")
if [ ${#ARGS[@]} -eq 0 ]; then
  ARGS=(--mask causal --batch 4 --heads 16 --kv-heads 16 --seq 4096 --head-dim 128)
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$NCU" ]; then
  echo "gpu-prof: ncu not found" >&2
  exit 1
fi
# One launch of each kernel after the warm-up; clocks left alone.
timeout 240 "$NCU" --clock-control none -k "$K" --launch-skip 2 --launch-count ${NCU_COUNT:-2} \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  .devbuild/dflash bench attention --device cuda --reps 3 --reps-fb 2 --warmup 1 --build-reps 1 "${ARGS[@]}" 2>&1 |
  grep -vE '^\s*$|----' | grep -E '==PROF==|flex_|Throughput|Pipe|Stall|Warp Cycles|Issued|Eligible|Active Warps|Registers|Shared Memory|Duration|Elapsed|Executed Ipc|Issue Slots|No Eligible|L1/TEX|L2 Hit|DRAM|Bank|Achieved|Theoretical|OPT|Block Limit|One or More' | cut -c1-170
