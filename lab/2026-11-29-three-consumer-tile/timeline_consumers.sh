#!/usr/bin/env bash
# H200: the ws kernel's timeline, and three consumers against two at D = 64.
#  1. timeline_probe.py: Proton's intra-kernel timeline of the ws kernel (article problem
#     non-causal and causal, B=16 L=1024 non-causal): where a tile's time goes.
#  2. consumers_probe.py timing: three consumers (192-row tile) against two at D = 64.
#  3. consumers_probe.py parity: the three-consumer launch against the float32 reference.
#   OUT=/tmp/out bash lab/2026-11-29-three-consumer-tile/timeline_consumers.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.csv"
start=$(date +%s)
timeout 150 python3 lab/probes/timeline_probe.py "$OUT/timeline" > "$OUT/timeline.txt" 2>&1
echo "timeline rc=$? [$(($(date +%s) - start)) s]"; grep -v "^first events" "$OUT/timeline.txt" | head -80
timeout 200 python3 lab/2026-11-29-three-consumer-tile/consumers_probe.py timing > "$OUT/consumers-timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -v Warning "$OUT/consumers-timing.txt" | grep -v "samples = "
timeout 200 python3 lab/2026-11-29-three-consumer-tile/consumers_probe.py parity > "$OUT/consumers-parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s] ok=$(grep -c '| ok' "$OUT/consumers-parity.txt") fail=$(grep -c FAIL "$OUT/consumers-parity.txt")"
grep FAIL "$OUT/consumers-parity.txt" | head
