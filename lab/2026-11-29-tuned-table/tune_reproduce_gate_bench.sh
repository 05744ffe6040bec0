#!/usr/bin/env bash
# H200, one call: tune the default configs, the article run (made the baseline), the gate
# experiment (spread, A/A, injected 3 % and 5 %), the sweep. Everything lands in $OUT/all.tgz.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
timeout 110 python3 -m flashrepro tune --write --calls 10 > "$W/tune.txt" 2>&1
echo "tune rc=$?"; cp src/flashrepro/tuned.json "$W/"; grep best "$W/tune.txt"
timeout 60 python3 -m flashrepro reproduce --no-sass --out "$W" --update-baseline \
  --baseline-dir "$W/baselines" > "$W/reproduce.txt" 2>&1; echo "reproduce rc=$?"
head -13 "$W/reproduce.txt"
OUT=$W/gate timeout 150 python3 scripts/gate_experiment.py --workers 2 --repeats 10 \
  > "$W/gate_experiment.txt" 2>&1; echo "gate rc=$?"; tail -25 "$W/gate_experiment.txt"
timeout 75 python3 -m flashrepro bench --rounds 2 --calls 5 --out "$W" > "$W/bench.txt" 2>&1
echo "bench rc=$?"; tail -52 "$W/bench.txt"
