#!/usr/bin/env bash
# H200: consumers skip the key blocks none of their
# rows sees (the kernel now) against the kernel before (lab/2026-11-29-three-consumer-tile/ws_before_skip.py, the
# module at the previous commit, written by the caller).
#  1. Parity: ws_probe.py (two consumers, 44 cases), consumers_probe.py (three, 42 cases).
#  2. skip_probe.py: both kernels side by side, 8 problems.
#   OUT=/tmp/out bash lab/2026-11-29-three-consumer-tile/skip.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 100 python3 lab/probes/ws_probe.py parity > "$OUT/parity2.txt" 2>&1
echo "parity2 rc=$? [$(($(date +%s) - start)) s] ok=$(grep -c '| ok' "$OUT/parity2.txt") fail=$(grep -c FAIL "$OUT/parity2.txt")"
timeout 100 python3 lab/2026-11-29-three-consumer-tile/consumers_probe.py parity > "$OUT/parity3.txt" 2>&1
echo "parity3 rc=$? [$(($(date +%s) - start)) s] ok=$(grep -c '| ok' "$OUT/parity3.txt") fail=$(grep -c FAIL "$OUT/parity3.txt")"
grep FAIL "$OUT"/parity*.txt | head -5
timeout 110 python3 lab/2026-11-29-three-consumer-tile/skip_probe.py > "$OUT/timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -v Warning "$OUT/timing.txt" | grep -v "samples = " | grep -v "^|--\|^| problem"
