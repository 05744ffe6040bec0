#!/usr/bin/env bash
# H200: Nsight Compute of the decode kernel against SDPA cuDNN and flash at B=16, L_k 1k and 8k
# (GQA 16/8, D=128, bf16), where the decode kernel trails the best peer by 1-4 %
# (lab/2026-12-02-fused-split-merge/). Every launch of the three, caches flushed between
# replays, clocks not locked.
#
#   OUT=/tmp/out bash lab/2026-12-03-decode-b16-profile/ncu.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/out}; W=$OUT/decode; mkdir -p "$W"
start=$(date +%s)
for l_k in 1024 8192; do
  timeout 150 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section LaunchStats --section Occupancy --section WarpStateStats \
    -k "regex:decode_fwd|sdpa|fmha|flash|cudnn" -f -o "$W/b16-$l_k" \
    python3 lab/2026-12-03-decode-b16-profile/target.py 16 $l_k > "$W/b16-$l_k.log" 2>&1
  echo "L_k=$l_k ncu rc=$? [$(($(date +%s) - start)) s]"
  ncu -i "$W/b16-$l_k.ncu-rep" --page details > "$W/b16-$l_k-details.txt" 2>&1
  rm -f "$W/b16-$l_k.ncu-rep"
  grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Grid Size|Block Size|Registers Per" \
    "$W/b16-$l_k-details.txt" | head -60
done
