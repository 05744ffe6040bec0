#!/usr/bin/env bash
# H200: the Gluon overlap kernel through the API, and the mma.sync default's open D=96 point
# (lab/2026-11-29-mma-sync-default/):
#  1. GPU tests of the new launches: the parity matrix for the overlap (Gluon) configs, the
#     check that they run the Gluon kernel, the mma.sync children, the config rules.
#  2. `tune` through the API: Triton's 64x64 TMA default tiles against fa3-overlap, D 64/128,
#     L 512..16384, causal and not (no --write).
#  3. The mma.sync path at D=96 (pads to 128): 64x64 w4 against 128x64 w8 (no --write).
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-gluon-softmax-overlap/tune_overlap_and_tests.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
start=$(date +%s)
timeout 200 python3 -m pytest -q -rfE -n 16 -p no:cacheprovider tests/test_mma_sync.py \
  tests/test_configs.py tests/test_parity.py -k "overlap or mma_sync or configs or default" \
  > "$W/tests.txt" 2>&1
echo "tests rc=$? [$(($(date +%s) - start)) s]"; tail -3 "$W/tests.txt"
timeout 130 python3 -m flashrepro tune --rounds 3 --configs "64x64 w4 s3 tma" fa3-overlap \
  > "$W/tune-overlap.txt" 2>&1
echo "overlap tune rc=$? [$(($(date +%s) - start)) s]"; grep best "$W/tune-overlap.txt"
DISABLE_MMA_V3=1 timeout 80 python3 -m flashrepro tune --head-dims 96 --lengths 512 2048 8192 \
  --configs "64x64 w4 s3" "128x64 w8 s3" > "$W/tune-mma-sync-d96.txt" 2>&1
echo "d96 tune rc=$? [$(($(date +%s) - start)) s]"; grep best "$W/tune-mma-sync-d96.txt"
