#!/usr/bin/env bash
# Per-instruction warp-stall samples of the block-wise kernel (tools/ncu_blockwise.py), the
# package's kernel and its variant without scale loads, on a Hopper GPU with ncu on the PATH: where
# in the SASS the consumer warps wait. Writes results/ncu/source/blockwise_<variant>.csv (ncu's
# source page, SASS view: one row per instruction with its sampled stall reasons).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p results/ncu/source
tmp=$(mktemp -d)
for v in real ffma; do
  VARIANT=$v ncu --profile-from-start off --clock-control none --section SourceCounters \
    --section WarpStateStats --import-source no -f -o "$tmp/bw_$v" python3 tools/ncu_blockwise.py
  ncu -i "$tmp/bw_$v.ncu-rep" --page source --csv --print-source sass > "results/ncu/source/blockwise_$v.csv"
done
