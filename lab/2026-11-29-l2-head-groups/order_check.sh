#!/usr/bin/env bash
# H200: rank launch configs at L=1024, D=128 for B=16 (the tune table's 16k tokens) and B=2
# (the article), then the article run. Checks the program order (lab/2026-11-29-l2-head-groups/).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m flashrepro tune --lengths 1024 --head-dims 128 --calls 10 > "$OUT/tune-b16.txt" 2>&1
python3 -m flashrepro tune --lengths 1024 --head-dims 128 --calls 20 --tokens 2048 > "$OUT/tune-b2.txt" 2>&1
python3 -m flashrepro reproduce --no-sass --out "$OUT" 2>&1 | head -13
grep -h -A33 "causal: best" "$OUT"/tune-b*.txt
