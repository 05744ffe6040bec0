#!/usr/bin/env bash
# H200: tune the default configs (src/flashrepro/tuned.json), then the article
# run and the sweep with the tuned table.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 420 python3 -m flashrepro tune --write --calls 10 2>&1 > "$OUT/tune.txt"; echo "tune rc=$?"
grep "best" "$OUT/tune.txt"
cp src/flashrepro/tuned.json "$OUT/" 2>/dev/null
python3 -m flashrepro reproduce --no-sass --out "$OUT" 2>&1 | tee "$OUT/reproduce.txt" | head -14
timeout 150 python3 -m flashrepro bench --out "$OUT" 2>&1 | tail -60
