#!/usr/bin/env bash
# Nsight Compute on the per-row cell of chapter 07, on a Hopper GPU with ncu on the PATH:
# 4608 x 3072 x 12288 per row, fast accumulation, GPU clocks left as they are. One profiled launch per
# kernel (tools/ncu_kloop.py, CELL=row), raw metrics as CSV, with the bytes through L2 and read from
# DRAM, into results/ncu/:
#   row_cublas            what torch._scaled_mm runs per row (128 x 128 tiles, programs in clusters)
#   row_gluon_128x128     gluon_ws_kernel, cooperative, the same 128x128x128 tiles, 6 stages
#   row_gluon_128x256     gluon_ws_kernel, cooperative, 128x256x128 tiles, 3 stages
#   row_pingpong_128x128  gluon_pingpong_kernel, 128x128x128 tiles, 6 stages, stores of 32 columns
#   row_stacked_192x128   gluon_stacked_kernel, three 64-row blocks of A: 192x128x128 tiles, 4 stages
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
source tools/_ncu_raw.sh
mkdir -p results/ncu
for v in cublas gluon_128x128 gluon_128x256 pingpong_128x128 stacked_192x128; do
  CELL=row VARIANT=$v "${NCU_RAW[@]}" --metrics lts__t_bytes.sum,dram__bytes_read.sum python3 tools/ncu_kloop.py \
    > "results/ncu/row_$v.csv"
done
