#!/usr/bin/env bash
# H200: where the tile-boundary time goes.
#  1. ws_side_by_side.py blocks: the kernel at BLOCK_N 128 (s2) and 64 (s2, s3, s4) side by side.
#  2. Nsight Compute's per-instruction warp-stall samples of the default launch at the article
#     problem, non-causal and causal (SourceCounters, WarpStateStats; clocks left alone).
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-persistent-tile-boundary/ncu_blocks.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
start=$(date +%s)
for mask in full causal; do
  timeout 120 ncu --clock-control none --section SourceCounters --section WarpStateStats \
    -k regex:gluon_ws --launch-skip 3 --launch-count 1 -f -o "$W/ws_$mask" \
    python3 lab/probes/ncu_target.py $mask > "$W/ncu_$mask.txt" 2>&1
  echo "ncu $mask rc=$? [$(($(date +%s) - start)) s]"; tail -2 "$W/ncu_$mask.txt"
  ncu -i "$W/ws_$mask.ncu-rep" --page source --print-source sass --csv > "$W/ws_${mask}_sass.csv" 2>&1
  ncu -i "$W/ws_$mask.ncu-rep" --page details > "$W/ws_${mask}_details.txt" 2>&1
  echo "source rows: $(wc -l < "$W/ws_${mask}_sass.csv")"
done
timeout 240 python3 lab/2026-11-29-persistent-tile-boundary/ws_side_by_side.py 30 blocks > "$W/ws_blocks.txt" 2>&1
echo "blocks rc=$? [$(($(date +%s) - start)) s]"; grep -E "ws now|cudnn" "$W/ws_blocks.txt"
