#!/usr/bin/env bash
# H200: the ws kernel's cold start.
#  1. coldstart_probe.py timing: the producer holding back all but the first loads of a
#     program until they land (variants qk0, qqk0) against the kernel now, 6 problems.
#  2. coldstart_probe.py parity: both variants, ws_probe's 44 cases.
#  3. Nsight Compute: each kernel's own duration and SM clock, back-to-back calls of
#     flashrepro, cuDNN and flash at the article problem (cache and clocks not controlled).
#   OUT=/tmp/out bash lab/2026-11-29-three-consumer-tile/coldstart.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 200 python3 lab/2026-11-29-three-consumer-tile/coldstart_probe.py timing > "$OUT/timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -v Warning "$OUT/timing.txt" | grep -v "samples = "
for mask in full causal; do
  timeout 90 ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max \
    -k "regex:gluon_ws|cudnn|flash_fwd" --launch-count 15 --csv \
    python3 lab/probes/kernel_durations.py $mask 5 > "$OUT/ncu_$mask.csv" 2>&1
  echo "ncu $mask rc=$? [$(($(date +%s) - start)) s]"
  grep -E "gpu__time_duration|per_second" "$OUT/ncu_$mask.csv" | cut -c1-60,200-400 | head -32
done
timeout 150 python3 lab/2026-11-29-three-consumer-tile/coldstart_probe.py parity > "$OUT/parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s] ok=$(grep -c '| ok' "$OUT/parity.txt") fail=$(grep -c FAIL "$OUT/parity.txt")"
