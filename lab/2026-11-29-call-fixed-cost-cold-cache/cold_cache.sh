#!/usr/bin/env bash
# H200: each kernel's own duration at the article
# problem with a cold cache, as in a timed call: Nsight Compute flushing all caches before each
# kernel (--cache-control all), against warm (none); HBM bytes read and written. 5 back-to-back
# calls each of flashrepro, cuDNN and flash (kernel_durations.py), clocks not locked.
#   OUT=/tmp/out bash lab/2026-11-29-call-fixed-cost-cold-cache/cold_cache.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
for mask in full causal; do
  for cache in all none; do
    timeout 100 ncu --clock-control none --cache-control $cache \
      --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum \
      -k "regex:gluon_ws|cudnn|flash_fwd" --launch-count 15 --csv \
      python3 lab/probes/kernel_durations.py $mask 5 > "$OUT/ncu_${mask}_cache-$cache.csv" 2>&1
    echo "ncu $mask cache=$cache rc=$? [$(($(date +%s) - start)) s]"
    grep -E "gpu__time_duration|dram__bytes" "$OUT/ncu_${mask}_cache-$cache.csv" \
      | awk -F'","' '{print substr($5,1,24), $13, $NF}' | head -45
  done
done
