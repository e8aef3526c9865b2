# Sourced by tools/ncu_cublas.sh, tools/ncu_kloop.sh and tools/ncu_row.sh: ncu on the calls a script
# marks with cudaProfilerStart/Stop (tools/_ncu.py), GPU clocks left as they are, raw metrics as CSV.
NCU_RAW=(ncu --profile-from-start off --clock-control none --csv --page raw
  --section SpeedOfLight --section LaunchStats --section MemoryWorkloadAnalysis
  --section ComputeWorkloadAnalysis --section WarpStateStats)
