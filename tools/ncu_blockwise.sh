#!/usr/bin/env bash
# Nsight Compute on the block-wise kernel (tools/ncu_blockwise.py) on a Hopper GPU with ncu on the
# PATH: the package's kernel and its variant without scale loads, tools/_ncu_raw.sh's sections (warp
# states among them) and the scheduler's, as CSV into results/ncu/blockwise_<variant>.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
source tools/_ncu_raw.sh
mkdir -p results/ncu
for v in real ffma; do
  VARIANT=$v "${NCU_RAW[@]}" --section SchedulerStats python3 tools/ncu_blockwise.py > "results/ncu/blockwise_$v.csv"
done
