#!/usr/bin/env bash
# H200: two config experiments with `tune` (no --write).
#  1. The mma.sync path (DISABLE_MMA_V3=1): the off-table default 64x64 w4 s3 against the
#     p-in-registers launch (128x64 w8, s3 and s2) over the sweep's grid (lab/2026-11-29-mma-sync-default/).
#  2. Non-causal D=128 on the wgmma path: deeper K/V pipelines and the tutorial's shapes
#     against the table's 64x64 w4 s3 tma (lab/2026-11-29-non-causal-pipeline-depth/).
# Outputs land in $OUT/all.tgz.
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-mma-sync-default/tune_configs.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
start=$(date +%s)
DISABLE_MMA_V3=1 timeout 330 python3 -m flashrepro tune \
  --configs "64x64 w4 s3" "128x64 w8 s3" "128x64 w8 s2" > "$W/tune-mma-sync.txt" 2>&1
echo "mma.sync tune rc=$? [$(($(date +%s) - start)) s]"; grep best "$W/tune-mma-sync.txt"
timeout 220 python3 -m flashrepro tune --head-dims 128 --masks full \
  --configs "64x64 w4 s3 tma" "64x64 w4 s4 tma" "64x128 w4 s3 tma" "128x64 w8 s4 tma" \
  "128x128 w8 s3 tma" > "$W/tune-noncausal.txt" 2>&1
echo "non-causal tune rc=$? [$(($(date +%s) - start)) s]"; grep best "$W/tune-noncausal.txt"
