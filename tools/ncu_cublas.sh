#!/usr/bin/env bash
# Nsight Compute on what cuBLAS (torch._scaled_mm) runs on the scoreboard's cells, on a Hopper GPU
# with ncu on the PATH: the eight seed shapes and 8192 x 8192 x 8192, per tensor then per row, fast
# accumulation, GPU clocks left as they are. One profiled call per cell, in the order that
# tools/ncu_cublas.py gives, raw metrics as CSV into results/ncu/cublas_cells.csv (one row per kernel;
# ncu's own lines and the script's error checks around them).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
source tools/_ncu_raw.sh
mkdir -p results/ncu
"${NCU_RAW[@]}" python3 tools/ncu_cublas.py > results/ncu/cublas_cells.csv
