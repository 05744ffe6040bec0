#!/usr/bin/env bash
# H200: the warp-specialized kernel with two Q buffers per
# consumer, ping-pong across tiles and the snake schedule.
#  1. ws_side_by_side.py: timed side by side with the kernel before (041defe), fa3-overlap, torch.
#  2. ws_probe.py parity: the kernel against the tests' reference (persistent, 5-7 programs).
#  3. The GPU parity tests of every warp-specialized and tuned-table config.
#
#   git show 041defe:src/flashrepro/kernels/fwd_gluon_ws.py > lab/2026-11-29-persistent-tile-boundary/ws_before.py
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-persistent-tile-boundary/q_buffers_snake.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$W/nvidia-smi.csv"
python3 -m pip install -q --no-index --find-links .whl pytest pytest-xdist hypothesis
start=$(date +%s)
timeout 280 python3 lab/2026-11-29-persistent-tile-boundary/ws_side_by_side.py 30 > "$W/ws_timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -E "ws |flashrepro |cudnn" "$W/ws_timing.txt"
timeout 90 python3 lab/probes/ws_probe.py parity > "$W/ws_parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s]"; grep -c "'ok'" "$W/ws_parity.txt"; grep FAIL "$W/ws_parity.txt" | head
timeout 180 python3 -m pytest -q -rfE -n 8 -p no:cacheprovider tests/test_parity.py \
  -k "ws or warp_specialize or tuned or head_groups" > "$W/pytest.txt" 2>&1
echo "pytest rc=$? [$(($(date +%s) - start)) s]"; tail -3 "$W/pytest.txt"
