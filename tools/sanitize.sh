#!/usr/bin/env bash
# compute-sanitizer over every kernel of the package, on a CUDA GPU (Hopper for Gluon), one process
# per (tool, kernel) so that each report names one kernel:
#   memcheck   out-of-bounds and misaligned global/shared accesses
#   racecheck  shared-memory hazards between threads (--racecheck-report all: hazards and analysis)
#   synccheck  misused barriers
#   initcheck  reads of global memory that nothing wrote
# Kernels: tools/sanitize.py --kernels K for each K of its --list, and min-V for each variant V of
# tools/gluon_race_min.py (the smallest Gluon kernels for racecheck's warp_specialize hazards).
# Tool "none" runs first (WARMUP=0 skips it): every driver once without a sanitizer, which checks the
# kernels uninstrumented and compiles them into Triton's cache, so instrumented runs compile nothing.
#
#   OUT=/tmp/sanitize JOBS=4 bash tools/sanitize.sh
#   TOOLS="racecheck" KERNELS="gluon-cooperative min-ws-idle min-asm-bar1" bash tools/sanitize.sh
#
# Writes $OUT/<tool>_<kernel>.log and $OUT/sanitize_summary.txt: one line per (tool, kernel) with the
# sanitizer's count (memcheck, synccheck, initcheck: "ERROR SUMMARY: N errors"; racecheck:
# "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"), the driver's exit status (124:
# past TIMEOUT) and its checks' tally, and the wall seconds. The exit status is 1 when any count is
# not zero or any driver failed.
# Environment: OUT, TOOLS, KERNELS, WARMUP, JOBS (runs at once, default 1), TIMEOUT (seconds per
# run, default 600), PRINT_LIMIT (reports printed per run, default 20; racecheck's is
# RACECHECK_PRINT_LIMIT, default 1000, as its summary counts the hazards it displayed), SANITIZER (a
# compute-sanitizer to use), PYTHON (default python3), DRIVER_ARGS (more arguments for sanitize.py,
# e.g. "--small": the first call of "gluon" times every configuration, instrumented too).
set -uo pipefail  # no -e: a run that fails is recorded and the others still run
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/sanitize}
PYTHON=${PYTHON:-python3}
TOOLS=${TOOLS:-memcheck racecheck synccheck initcheck}
JOBS=${JOBS:-1}
TIMEOUT=${TIMEOUT:-600}
PRINT_LIMIT=${PRINT_LIMIT:-20}
RACECHECK_PRINT_LIMIT=${RACECHECK_PRINT_LIMIT:-1000}
mkdir -p "$OUT/.lines"
rm -f "$OUT"/.lines/*

find_sanitizer() {
  if [[ -n ${SANITIZER:-} ]]; then echo "$SANITIZER"; return; fi
  local c
  for c in "$(command -v compute-sanitizer)" /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda-*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer/compute-sanitizer; do
    [[ -n $c && -x $c ]] && { echo "$c"; return; }
  done
  # The pip wheels nvidia-cuda-sanitizer-api (CUDA 12: nvidia/cuda_sanitizer_api/compute-sanitizer/,
  # CUDA 13: nvidia/cu13/compute-sanitizer/ and a wrapper in nvidia/cu13/bin/), or one beside
  # Triton's bundled ptxas, in any site-packages of this Python.
  "$PYTHON" - <<'EOF'
import glob, os, site, sys
dirs = [*site.getsitepackages(), site.getusersitepackages()]
try:
    import triton
    dirs.append(os.path.dirname(os.path.dirname(triton.__file__)))
except ImportError:
    pass
for d in dict.fromkeys(dirs):
    for pattern in ("nvidia/cuda_sanitizer_api/compute-sanitizer/compute-sanitizer",
                    "nvidia/cu*/compute-sanitizer/compute-sanitizer", "nvidia/cu*/bin/compute-sanitizer",
                    "triton/backends/nvidia/bin/compute-sanitizer", "nvidia/**/compute-sanitizer"):
        for f in sorted(glob.glob(os.path.join(d, pattern), recursive=True)):
            if os.path.isfile(f) and os.access(f, os.X_OK):
                sys.exit(print(f))
sys.exit(1)
EOF
}

SAN=$(find_sanitizer) || SAN=
if [[ -z $SAN ]]; then
  echo "sanitize.sh: compute-sanitizer not found: not on PATH, not in /usr/local/cuda*/bin, not in" \
       "$PYTHON's site-packages (pip install nvidia-cuda-sanitizer-api), and SANITIZER is not set" >&2
  exit 2
fi
if [[ -z ${KERNELS:-} ]]; then
  KERNELS="$("$PYTHON" tools/sanitize.py --list | tr '\n' ' ')"
  KERNELS+="$("$PYTHON" tools/gluon_race_min.py --list | sed 's/^/min-/' | tr '\n' ' ')"
fi

run_one() {  # tool kernel: run, then write its summary line to $OUT/.lines/
  local tool=$1 kernel=$2 log="$OUT/$1_$2.log" cmd flags start rc count checks seconds
  case $kernel in
    min-*) cmd=("$PYTHON" tools/gluon_race_min.py --variant "${kernel#min-}") ;;
    *) cmd=("$PYTHON" tools/sanitize.py --kernels "$kernel" ${DRIVER_ARGS:-}) ;;
  esac
  case $tool in
    racecheck) flags=(--racecheck-report all --print-limit "$RACECHECK_PRINT_LIMIT") ;;
    *) flags=(--print-limit "$PRINT_LIMIT") ;;
  esac
  start=$(date +%s.%N)
  if [[ $tool == none ]]; then
    timeout -k 30 "$TIMEOUT" "${cmd[@]}" >"$log" 2>&1
  else
    # Without torch's caching allocator every tensor is its own cudaMalloc, so memcheck sees an
    # access past a tensor's end even where the cache would have put another tensor there.
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout -k 30 "$TIMEOUT" "$SAN" --tool "$tool" --target-processes all \
      "${flags[@]}" "${cmd[@]}" >"$log" 2>&1
  fi
  rc=$?
  seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
  if [[ $tool == racecheck ]]; then  # one summary per CUDA process: add them up
    count=$(grep -Eo 'RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\)' \
              "$log" | awk '{h += $3; gsub(/\(/, "", $6); e += $6; w += $8}
                            END {if (NR) printf "%d hazards (%d errors, %d warnings)", h, e, w
                                 else print "no summary"}')
  elif [[ $tool == none ]]; then
    count="-"
  else
    count=$(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$log" |
            awk '{n += $3} END {if (NR) printf "%d errors", n; else print "no summary"}')
  fi
  if [[ $kernel == min-* ]]; then
    checks="$(grep -c ' PASS$' "$log") passed, $(grep -c ' FAIL' "$log") failed"
  else
    checks=$(grep -Eo '[0-9]+ checks, [0-9]+ failed, [0-9]+ kernels skipped' "$log" | tail -1)
  fi
  printf '%-10s %-22s %-36s rc %-3s %7s s  %s\n' "$tool" "$kernel" "$count" "$rc" "$seconds" \
    "${checks:-no tally}" | tee "$OUT/.lines/$tool.$kernel"
}

run_all() {  # tool: every kernel, JOBS at a time
  local kernel
  for kernel in $KERNELS; do
    while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
    run_one "$1" "$kernel" &
  done
  wait
}

{
  gpu=$(nvidia-smi -L 2>/dev/null | head -1)
  echo "sanitize.sh $(date -u '+%Y-%m-%d %H:%M UTC') on ${gpu:-a machine without nvidia-smi}"
  echo "$SAN: $("$SAN" --version 2>&1 | grep -i version | head -1)"
  echo "TOOLS=$TOOLS JOBS=$JOBS TIMEOUT=$TIMEOUT"
} | tee "$OUT/sanitize_header.txt"
TOOLS=$(echo " $TOOLS " | sed 's/ none / /g')
RUN=$TOOLS
[[ ${WARMUP:-1} != 0 ]] && RUN="none $TOOLS"
for tool in $RUN; do run_all "$tool"; done  # "none" first: its runs fill Triton's cache for the rest
{
  cat "$OUT/sanitize_header.txt"
  for tool in $RUN; do for kernel in $KERNELS; do cat "$OUT/.lines/$tool.$kernel"; done; done
} >"$OUT/sanitize_summary.txt"
rm -rf "$OUT/.lines" "$OUT/sanitize_header.txt"
echo "sanitize.sh: summary in $OUT/sanitize_summary.txt"
# 1 when any run reported errors or hazards (or no summary), or a driver did not exit 0
awk 'NR > 3 && ($3 ~ /^[1-9]/ || $3 == "no" || !/ rc 0 /) {bad = 1} END {exit bad}' \
  "$OUT/sanitize_summary.txt"
