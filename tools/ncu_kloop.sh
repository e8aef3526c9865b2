#!/usr/bin/env bash
# Nsight Compute on the long K loop of chapter 07 (tools/ncu_kloop.py, CELL=kloop), on a Hopper GPU
# with ncu on the PATH: 4608 x 12288 x 12288 per tensor, fast accumulation, GPU clocks left as they
# are. One profiled launch per kernel, raw metrics as CSV (ncu's own lines and the script's error
# check first) into results/ncu/:
#   kloop_cublas            what torch._scaled_mm runs (its name says its tile and cluster)
#   kloop_gluon_128x256     gluon_ws_kernel, cooperative, 128x256x128 tiles, 3 stages
#   kloop_pingpong_128x128  gluon_pingpong_kernel, 128x128x128 tiles, 6 stages, stores of 32 columns
#   kloop_tma_128x256       tma_host_kernel, 128x256x128 tiles, 4 stages, epilogue in halves
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
source tools/_ncu_raw.sh
mkdir -p results/ncu
for v in cublas gluon_128x256 pingpong_128x128 tma_128x256; do
  VARIANT=$v "${NCU_RAW[@]}" python3 tools/ncu_kloop.py > "results/ncu/kloop_$v.csv"
done
