#!/usr/bin/env bash
# H200:
#  1. turn_probe.py parity, then timing: the ping-pong turn on named barriers (bar.sync /
#     bar.arrive 8/9, as FA3's warp-scheduler barrier) against the mbarrier turn of the kernel
#     as it is (lab/2026-11-29-turn-next-q-epilogue/).
#  2. lab/probes/fallback_timing.py: the Triton fallback where the table's Gluon choice cannot run.
#
#   OUT=/tmp/out bash lab/2026-11-29-turn-next-q-epilogue/named_barrier_turn.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.csv"
start=$(date +%s)
timeout 200 python3 lab/2026-11-29-turn-next-q-epilogue/turn_probe.py parity > "$OUT/turn_parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s]"; grep -vc "| ok" "$OUT/turn_parity.txt"; grep -iE "fail|error|mismatch" "$OUT/turn_parity.txt" | head -5; tail -3 "$OUT/turn_parity.txt"
timeout 200 python3 lab/2026-11-29-turn-next-q-epilogue/turn_probe.py timing > "$OUT/turn_timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; cat "$OUT/turn_timing.txt"
timeout 150 python3 lab/probes/fallback_timing.py > "$OUT/fallback_timing.txt" 2>&1
echo "fallback rc=$? [$(($(date +%s) - start)) s]"; cat "$OUT/fallback_timing.txt"
