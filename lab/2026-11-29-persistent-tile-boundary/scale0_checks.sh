#!/usr/bin/env bash
# H200: scale=0 and ws stress checks before the fix (one command; outputs under $OUT).
#  1. scale0_checks.py: attention(scale=0.0) through the Gluon kernels (expected today: the
#     Gluon cases FAIL with NaN output), and the persistent ws kernel with many tiles per
#     program for every allowed (block_n, stages) x D x dtype x mask, GQA (expected: pass).
#  2. lab/probes/fallback_timing.py: the Triton kernel at the ws table entry's tiles (D=96/80,
#     bottom-right Lq > Lk) against 64x64 w4 s3 tma and 128x64 w8 s3 tma.
#
#   OUT=/tmp/out bash lab/2026-11-29-persistent-tile-boundary/scale0_checks.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 400 python3 -m pytest -q -rfE -n 8 -p no:cacheprovider lab/2026-11-29-persistent-tile-boundary/scale0_checks.py \
  > "$OUT/checks.txt" 2>&1
echo "checks rc=$? [$(($(date +%s) - start)) s]"; grep -E "^(FAILED|ERROR)" "$OUT/checks.txt" | cut -c1-150; tail -1 "$OUT/checks.txt"
timeout 150 python3 lab/probes/fallback_timing.py > "$OUT/fallback_timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; cat "$OUT/fallback_timing.txt"
