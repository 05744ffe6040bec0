#!/usr/bin/env bash
# H200: the producer issuing a tile's loads in the order
# of first use (consumer 0's Q, K_0, consumer 1's Q, V_0) instead of both Q tiles first,
# against the kernel before (56f4f97, written by the caller to lab/2026-11-29-turn-next-q-epilogue/ws_56f4f97.py:
#   git show 09f8b86:src/flashrepro/kernels/fwd_gluon_ws.py > lab/2026-11-29-turn-next-q-epilogue/ws_56f4f97.py).
#  1. variant_probe.py, first 4 problems, 30 rounds;
#  2. ws_probe.py parity, 44 cases;
#  3. the gated reproduce against the committed baseline.
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-turn-next-q-epilogue/load_order.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 150 python3 lab/probes/variant_probe.py --problems 4 \
  56f4f97=lab/2026-11-29-turn-next-q-epilogue/ws_56f4f97.py > "$OUT/timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -v Warning "$OUT/timing.txt" | grep -v "samples = "
timeout 150 python3 lab/probes/ws_probe.py parity > "$OUT/parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s] ok=$(grep -c '| ok' "$OUT/parity.txt") fail=$(grep -c FAIL "$OUT/parity.txt")"
timeout 110 python3 -m flashrepro reproduce --gate --no-sass --out "$OUT" > "$OUT/gate.txt" 2>&1
echo "gate rc=$? [$(($(date +%s) - start)) s]"; grep -E "^flashrepro |torch-(flash|cudnn)|gate:|GATE|gate" "$OUT/gate.txt" | head -14
