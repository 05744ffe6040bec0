#!/usr/bin/env bash
# H200: the next tile's Q issued a tile ahead (right
# after the previous tile's first K/V block) against the kernel with Q issued just before its
# tile (a71ef80, named-barrier turn) and the one before that (e6d106d, mbarrier turn).
#  1. ws_probe.py parity: the kernel as it is, 44 cases.
#  2. variant_probe.py: the three side by side, 8 problems, 30 rounds.
# The earlier states are written by the caller (git is not on the device):
#   git show a71ef80:src/flashrepro/kernels/fwd_gluon_ws.py > lab/2026-11-29-turn-next-q-epilogue/ws_a71ef80.py
#   git show e6d106d:src/flashrepro/kernels/fwd_gluon_ws.py > lab/2026-11-29-turn-next-q-epilogue/ws_e6d106d.py
#   OUT=/tmp/out bash lab/2026-11-29-turn-next-q-epilogue/early_q.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 200 python3 lab/probes/ws_probe.py parity > "$OUT/parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s] ok=$(grep -c '| ok' "$OUT/parity.txt") fail=$(grep -c FAIL "$OUT/parity.txt")"
timeout 330 python3 lab/probes/variant_probe.py a71ef80=lab/2026-11-29-turn-next-q-epilogue/ws_a71ef80.py \
  e6d106d=lab/2026-11-29-turn-next-q-epilogue/ws_e6d106d.py > "$OUT/timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -v Warning "$OUT/timing.txt" | grep -v "samples = "
