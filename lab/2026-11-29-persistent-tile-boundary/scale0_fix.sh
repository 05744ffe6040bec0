#!/usr/bin/env bash
# H200: after the scale=0 fix in the Gluon softmax (masked blocks scale
# before masking).
#  1. scale0_checks.py: scale=0 through every kernel path, and the persistent ws kernel with
#     64 tiles per program (7 programs) over every allowed (block_n, stages), D, dtype, mask.
#  2. The gated reproduce against the baseline committed from 1a9200a (the fix changes only
#     the masked blocks' softmax: FMUL + FADD instead of FFMA).
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-persistent-tile-boundary/scale0_fix.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
python3 -m pip install -q --no-index --find-links .whl pytest pytest-xdist hypothesis
start=$(date +%s)
timeout 110 python3 -m pytest -q -rfE -n 8 -p no:cacheprovider lab/2026-11-29-persistent-tile-boundary/scale0_checks.py \
  -k "scale_zero or 7" > "$W/checks.txt" 2>&1
echo "checks rc=$? [$(($(date +%s) - start)) s]"; grep -E "^(FAILED|ERROR)" "$W/checks.txt" | cut -c1-150; tail -1 "$W/checks.txt"
timeout 80 python3 -m flashrepro reproduce --gate --no-sass --out "$W" > "$W/gate.txt" 2>&1
echo "gate rc=$? [$(($(date +%s) - start)) s]"; grep -E "^flashrepro |torch-(flash|cudnn)|gate" "$W/gate.txt" | head -12
