#!/usr/bin/env bash
# H200, side by side: the kernel now (the Gluon epilogue
# normalising O with one reciprocal per row and a multiply per element instead of a
# div.full.f32 per element; the row max over column pairs first), the epilogue change alone
# ("recip") and neither (a71ef80).
#  1. ws_probe.py parity: the kernel as it is, 44 cases.
#  2. variant_probe.py: the three, first 6 problems (article non-causal and causal, B=16 L=1024 and B=4 L=4096
#     non-causal and causal), 30 rounds.
# The variants are written by the caller (git is not on the device): the ws module of each,
# with its `from flashrepro.kernels.fwd_gluon import` pointed at a copy of fwd_gluon.py as it
# was (lab/2026-11-29-turn-next-q-epilogue/ws_a71ef80.py + fwd_gluon_a71ef80.py; ws_recip.py + fwd_gluon_recip.py).
#   OUT=/tmp/out bash lab/2026-11-29-turn-next-q-epilogue/epilogue.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 200 python3 lab/probes/ws_probe.py parity > "$OUT/parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s] ok=$(grep -c '| ok' "$OUT/parity.txt") fail=$(grep -c FAIL "$OUT/parity.txt")"
timeout 200 python3 lab/probes/variant_probe.py --problems 6 \
  recip=lab/2026-11-29-turn-next-q-epilogue/ws_recip.py a71ef80=lab/2026-11-29-turn-next-q-epilogue/ws_a71ef80.py > "$OUT/timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -v Warning "$OUT/timing.txt" | grep -v "samples = "
