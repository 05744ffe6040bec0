#!/usr/bin/env bash
# H200, after the three-consumer tile became a config
# (fa3-ws3: 192x128 w12 s3 tma overlap ws, D = 64 only).
#  1. timeline_probe.py: Proton's intra-kernel timeline (timeline_consumers.sh's buffer size was refused).
#  2. The GPU parity tests of the new configs (fa3-ws3, 192x64 w12 s4; fa3-ws3 at D = 128 runs
#     the Triton fallback) and the three-consumer launch test.
#  3. `tune --against-table --write` at D = 64 with three-consumer challengers.
#  4. The sweep (`bench`) with the new table.
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-three-consumer-tile/ws3_tune_bench.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$W/nvidia-smi.csv"
pip install -q --no-index --find-links .whl pytest pytest-xdist hypothesis > /dev/null 2>&1
start=$(date +%s)
timeout 120 python3 lab/probes/timeline_probe.py "$W/timeline" > "$W/timeline.txt" 2>&1
echo "timeline rc=$? [$(($(date +%s) - start)) s]"; grep -v "^first events" "$W/timeline.txt" | head -75
timeout 200 python3 -m pytest -q -n 6 -p no:cacheprovider tests/test_parity.py \
  -k "fa3-ws3 or 192x64 or three_consumers" > "$W/parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s]"; tail -3 "$W/parity.txt"
timeout 150 python3 -m flashrepro tune --rounds 5 --head-dims 64 --against-table --write \
  --configs fa3-ws3 "192x128 w12 s2 tma overlap ws" "192x64 w12 s4 tma overlap ws" \
  > "$W/tune.txt" 2>&1
echo "tune rc=$? [$(($(date +%s) - start)) s]"; cp src/flashrepro/tuned.json "$W/"; grep best "$W/tune.txt"
timeout 170 python3 -m flashrepro bench --rounds 3 --calls 5 --out "$W" > "$W/bench.txt" 2>&1
echo "bench rc=$? [$(($(date +%s) - start)) s]"; grep -E "^\| float16 +\| +64" "$W/bench.md"
