#!/usr/bin/env bash
# H200: why a cold cache costs the ws kernel more than cuDNN (cold_cache.sh). Nsight Compute's warp-stall reasons (per issued instruction) for
# flashrepro and cuDNN at the article problem, cold (--cache-control all) and warm (none):
# "no_instruction" counts warps waiting for instruction fetch; "long_scoreboard" for global
# memory; "barrier"/"membar"/"wait" for synchronization. 2 calls each, clocks not locked.
#   OUT=/tmp/out bash lab/2026-11-29-call-fixed-cost-cold-cache/stalls.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
for mask in full causal; do
  for cache in all none; do
    timeout 120 ncu --clock-control none --cache-control $cache \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum" \
      -k "regex:gluon_ws|cudnn" --launch-count 4 --csv \
      python3 lab/probes/kernel_durations.py $mask 2 > "$OUT/stalls_${mask}_cache-$cache.csv" 2>&1
    echo "ncu $mask cache=$cache rc=$? [$(($(date +%s) - start)) s]"
  done
done
for f in "$OUT"/stalls_*.csv; do
  echo "== $f"
  grep -E "gpu__time|no_instruction|long_scoreboard|_barrier_|membar|_wait_|lg_throttle|math_pipe|mio_throttle|short_scoreboard|sleeping|branch_resolving|dispatch|imc_miss|drain" "$f" \
    | awk -F'","' '{sub("smsp__average_warps_issue_stalled_", "", $13); sub("_per_issue_active.ratio", "", $13); print $1, substr($5,1,12), $13, $NF}' | tr -d '"'
done
