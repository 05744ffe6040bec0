#!/usr/bin/env bash
# H200: the in-model probe in four processes, this tree's src and the base tree's (.base/src,
# `git archive 2618726 src | tar -x -C .base`) alternated, then the GPU tests of the changed
# paths.   OUT=/tmp/out bash lab/2026-12-03-decode-call-flat-path/run.sh   # ~7 min
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for run in flat-1 base-1 base-2 flat-2; do
  tree=src
  [[ $run == base-* ]] && tree=.base/src
  PYTHONPATH=$tree python3 -W ignore lab/2026-12-03-decode-call-flat-path/probe_model.py \
    --out "$OUT/$run" > "$OUT/$run.log" 2>&1
  echo "$run rc=$? [$(($(date +%s) - start)) s]"
  grep -A8 "^B=" "$OUT/$run.log" | grep -E "^B=|frepro|flash" | head -12
done
PYTHONPATH=src:. timeout 280 python3 -m pytest -q -p no:cacheprovider -m gpu -x \
  tests/test_decode.py tests/test_direct_launch.py tests/test_launch_plans.py \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? [$(($(date +%s) - start)) s]"
tail -4 "$OUT/gpu_tests.log"
