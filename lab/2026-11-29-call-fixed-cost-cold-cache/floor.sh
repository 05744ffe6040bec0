#!/usr/bin/env bash
# H200: the fixed cost of a call (floor_probe.py).
#  1. floor_probe.py timing: tiny and one-tile-per-SM problems, side by side with the peers.
#  2. Nsight Compute: each kernel's own duration (back-to-back calls, 4 problems x 3 kernels
#     x 5 calls; cache and clocks not controlled), as lab/2026-11-29-three-consumer-tile/coldstart.sh.
#   OUT=/tmp/out bash lab/2026-11-29-call-fixed-cost-cold-cache/floor.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 200 python3 lab/2026-11-29-call-fixed-cost-cold-cache/floor_probe.py timing > "$OUT/timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -E "^\| b" "$OUT/timing.txt"
timeout 200 ncu --clock-control none --cache-control none \
  --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max \
  -k "regex:gluon_ws|cudnn|flash_fwd" --launch-count 60 --csv \
  python3 lab/2026-11-29-call-fixed-cost-cold-cache/floor_probe.py calls > "$OUT/ncu.csv" 2>&1
echo "ncu rc=$? [$(($(date +%s) - start)) s]"
grep gpu__time_duration "$OUT/ncu.csv" | awk -F'","' '{print substr($5,1,40), $9, $NF}' | head -60
