#!/usr/bin/env bash
# H200, one call: the warp-specialized kernel through the API, against the tuned table.
#  1. `tune --configs ... --against-table --write`: the ws kernel (fa3-ws3, its three-consumer
#     tile at D = 64 only; both with one program per tile, `tilegrid`) against each point's
#     current table entry (24 points: L 512..16384, D 64/128, causal and not).
#  2. `reproduce` with the new table, made the new baseline (history kept: the committed
#     baselines are copied in first).
#  3. The sweep (`bench`) with the new table.
# Its runs: the table-challenge-<commit>/ folders under lab/ (lab/README.md).
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<sha> bash scripts/table_challenge.sh
# with <sha> from the checkout the code came from (`git rev-parse HEAD` there): a copied tree
# may report a stale HEAD (lab/2026-11-29-three-consumer-tile/README.md, Files).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$W/nvidia-smi.csv"
start=$(date +%s)
timeout 280 python3 -m flashrepro_harness tune --rounds 3 --against-table --write --configs fa3-ws fa3-ws3 \
  "128x128 w8 s2 tma overlap ws tilegrid" "192x128 w12 s3 tma overlap ws tilegrid" \
  > "$W/tune.txt" 2>&1
echo "tune rc=$? [$(($(date +%s) - start)) s]"; cp src/flashrepro/tuned.json "$W/"; grep best "$W/tune.txt"
cp -r reproduce/baselines "$W/baselines"
timeout 150 python3 -m flashrepro_harness reproduce --no-sass --out "$W" --update-baseline \
  --baseline-dir "$W/baselines" > "$W/reproduce.txt" 2>&1
echo "reproduce rc=$? [$(($(date +%s) - start)) s]"; head -24 "$W/reproduce.txt"
timeout 150 python3 -m flashrepro_harness bench --rounds 3 --calls 5 --out "$W" > "$W/bench.txt" 2>&1
echo "bench rc=$? [$(($(date +%s) - start)) s]"; grep -E "^\| float16 +\| +128" "$W/bench.md"
