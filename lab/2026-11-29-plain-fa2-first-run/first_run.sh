#!/usr/bin/env bash
# H200, first GPU run: smoke + parity matrix + first reproduce + config exploration.
#   OUT=/tmp/out bash lab/2026-11-29-plain-fa2-first-run/first_run.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.limit --format=csv | tee "$OUT/nvidia-smi.csv"
python3 -m flashrepro doctor --require-gpu 2>&1 | tee "$OUT/doctor.txt"
python3 -m pytest -m gpu -n 8 -q -p no:cacheprovider tests/test_parity.py 2>&1 | tail -30 | tee "$OUT/parity.txt"
python3 -m flashrepro reproduce --no-sass --out "$OUT" 2>&1 | tee "$OUT/reproduce.txt"
python3 -m flashrepro tune --lengths 1024 4096 --head-dims 128 2>&1 | tee "$OUT/tune.txt"
