#!/usr/bin/env bash
# H200: Nsight Compute's per-instruction warp-stall samples of the default
# launch at B=16 (the article problem otherwise, non-causal): 16 rounds of tiles per SM, so
# the tile transitions outweigh the kernel's cold start (ncu_blocks.sh profiled B=2: two rounds).
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-persistent-tile-boundary/ncu_b16.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
start=$(date +%s)
timeout 150 ncu --clock-control none --section SourceCounters --section WarpStateStats \
  -k regex:gluon_ws --launch-skip 3 --launch-count 1 -f -o "$W/ws_b16" \
  python3 lab/probes/ncu_target.py full 5 16 > "$W/ncu_b16.txt" 2>&1
echo "ncu rc=$? [$(($(date +%s) - start)) s]"; tail -2 "$W/ncu_b16.txt"
ncu -i "$W/ws_b16.ncu-rep" --page source --print-source sass --csv > "$W/ws_b16_sass.csv" 2>&1
ncu -i "$W/ws_b16.ncu-rep" --page details > "$W/ws_b16_details.txt" 2>&1
rm -f "$W/ws_b16.ncu-rep"; gzip -9 "$W/ws_b16_sass.csv"
echo "done [$(($(date +%s) - start)) s]"; grep -E "Duration|Warp Cycles Per Issued" "$W/ws_b16_details.txt"
