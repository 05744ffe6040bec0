#!/usr/bin/env bash
# H200: the row sums kept as each thread's
# partials in the loop (the quad's shuffles once, in the epilogue; FA3's softmax does so)
# against the kernel at f44323c (conditional rescaling, row sums reduced across the quad after
# every block), side by side; then the ws kernel's parity cases.
#
#   OUT=/tmp/out bash lab/2026-11-30-per-thread-row-sums/rowsum_variant.sh   (needs lab/2026-11-30-per-thread-row-sums/prev_f44323c/, made
#   by `git show f44323c:...`, see variant_probe.py)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD:$PWD/lab/2026-11-30-per-thread-row-sums/prev_f44323c
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.csv"
start=$(date +%s)
timeout 300 python3 lab/probes/variant_probe.py --rounds 20 --problems 6 \
  f44323c=lab/2026-11-30-per-thread-row-sums/prev_f44323c/ws_f44323c.py > "$OUT/timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; cat "$OUT/timing.txt"
timeout 200 python3 lab/probes/ws_probe.py parity > "$OUT/ws_parity.txt" 2>&1
echo "ws parity rc=$? [$(($(date +%s) - start)) s]"; grep -c "'ok'\]" "$OUT/ws_parity.txt"; grep -E "FAIL" "$OUT/ws_parity.txt" | head -5
timeout 60 python3 lab/2026-11-29-three-consumer-tile/consumers_probe.py parity > "$OUT/ws3_parity.txt" 2>&1
echo "ws3 parity rc=$? [$(($(date +%s) - start)) s]"; grep -c "'ok'\]" "$OUT/ws3_parity.txt"; grep -E "FAIL" "$OUT/ws3_parity.txt" | head -5
