#!/usr/bin/env bash
# H200: Nsight Compute's per-instruction warp-stall samples (SourceCounters) and warp states
# of the default launch at three sweep points: D=64 non-causal L=4096 B=4 (192x128, three
# consumers), D=64 causal L=1024 B=16 (128x128, two consumers), D=128 non-causal L=4096 B=4
# (128x128, two consumers; the comparison). One launch each, after two warm-up calls.
#
#   OUT=/tmp/out bash lab/2026-12-03-d64-stall-samples/ncu.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
start=$(date +%s)
for point in "64 full 4096 4" "64 causal 1024 16" "128 full 4096 4"; do
  name=$(echo "$point" | tr ' ' '-')
  timeout 200 ncu --clock-control none --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats \
    -k regex:gluon_ws --launch-skip 2 --launch-count 1 -f -o "$W/$name" \
    python3 lab/2026-12-03-d64-stall-samples/target.py $point > "$W/$name.log" 2>&1
  echo "$name ncu rc=$? [$(($(date +%s) - start)) s]"
  ncu -i "$W/$name.ncu-rep" --page source --print-source sass --csv > "$W/$name-sass.csv" 2>&1
  ncu -i "$W/$name.ncu-rep" --page details > "$W/$name-details.txt" 2>&1
  rm -f "$W/$name.ncu-rep"; gzip -9 "$W/$name-sass.csv"
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible" "$W/$name-details.txt"
done
echo "done [$(($(date +%s) - start)) s]"
