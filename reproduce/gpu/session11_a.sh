#!/usr/bin/env bash
# H200, session 11 call A (experiment 19): the softmax's exponentials partly by polynomial.
#   OUT=/tmp/out bash reproduce/gpu/session11_a.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.csv"
start=$(date +%s)
FLASHREPRO_REQUIRE_GPU=1 timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_exp2.py \
  > "$OUT/test_exp2.txt" 2>&1
echo "test_exp2 rc=$? [$(($(date +%s) - start)) s]"; tail -3 "$OUT/test_exp2.txt"
timeout 170 python3 reproduce/gpu/exp2_probe.py parity > "$OUT/parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s]"; grep -c "'ok'\]" "$OUT/parity.txt"; grep FAIL "$OUT/parity.txt" | head -5
timeout 270 python3 reproduce/gpu/exp2_probe.py timing > "$OUT/timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -E "ws|problem" "$OUT/timing.txt" | grep -v -- "---"
