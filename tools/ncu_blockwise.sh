#!/usr/bin/env bash
# Nsight Compute on the block-wise kernel (tools/ncu_blockwise.py) on a Hopper GPU with ncu on the
# PATH: the package's kernel and its variant without scale loads, warp state statistics and
# per-instruction stall samples, as CSV into results/ncu/blockwise_<variant>.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p results/ncu
for v in real ffma; do
  VARIANT=$v ncu --profile-from-start off --clock-control none --csv --page raw \
    --section WarpStateStats --section SchedulerStats --section LaunchStats \
    python3 tools/ncu_blockwise.py > "results/ncu/blockwise_$v.csv"
done
