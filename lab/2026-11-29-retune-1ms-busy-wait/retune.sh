#!/usr/bin/env bash
# H200: re-tune the default configs with the interleaved
# tuner and the 128-row candidates, then the article run (causal and non-causal rows, made
# the new baseline) and the sweep with the new table. Everything lands in $OUT/all.tgz.
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-retune-1ms-busy-wait/retune.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$W/nvidia-smi.csv"
start=$(date +%s)
timeout 230 python3 -m flashrepro tune --write > "$W/tune.txt" 2>&1
echo "tune rc=$? [$(($(date +%s) - start)) s]"; cp src/flashrepro/tuned.json "$W/"; grep best "$W/tune.txt"
timeout 120 python3 -m flashrepro reproduce --no-sass --out "$W" --update-baseline \
  --baseline-dir "$W/baselines" > "$W/reproduce.txt" 2>&1
echo "reproduce rc=$? [$(($(date +%s) - start)) s]"; head -20 "$W/reproduce.txt"
timeout 120 python3 -m flashrepro bench --rounds 3 --calls 5 --out "$W" > "$W/bench.txt" 2>&1
echo "bench rc=$? [$(($(date +%s) - start)) s]"; grep -E "^\| float16 +\| +128" "$W/bench.md"
