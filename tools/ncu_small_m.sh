#!/usr/bin/env bash
# Nsight Compute on the small-M schedules of chapter 05, on a Hopper GPU with ncu on the PATH:
# 512 x 12288 x 3072 per tensor, fast accumulation, 128x128x128 tiles through pointers, 4 warps,
# 6 stages, GPU clocks left as they are. One profiled launch per schedule, raw metrics as CSV
# (ncu's own lines and the script's error check first) into results/ncu/:
#   persistent_96     the persistent kernel, 96 whole tiles on 96 SMs
#   persistent_132    the same on 512 x 12288 x 4224: 132 whole tiles on 132 SMs
#   split_in_step_4   split_kernel, every tile in 4 pieces: 384 units on 132 programs
#   streamk_132       streamk_kernel on 132 programs
#   streamk_132_lanes the same in 4 lanes, one per row of tiles (launch_streamk(..., lanes=True))
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
METRICS='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_active.avg,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum'
mkdir -p results/ncu
for pair in persistent:persistent_96 whole132:persistent_132 split4:split_in_step_4 streamk132:streamk_132 \
            streamk132lanes:streamk_132_lanes; do
  VARIANT=${pair%%:*} ncu -k 'regex:persistent_kernel|split_kernel|streamk_kernel' --launch-skip 1 --launch-count 1 \
    --clock-control none --csv --page raw --metrics "$METRICS" python3 tools/ncu_small_m.py \
    > "results/ncu/small_m_${pair#*:}.csv"
done
