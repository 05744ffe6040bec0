#!/usr/bin/env bash
# H200: the in-model probe in four processes, this tree's src and the base tree's (.base/src,
# `git archive 2618726 src | tar -x -C .base`) alternated, then the GPU tests of the changed
# paths.   OUT=/tmp/out bash lab/2026-12-03-decode-call-flat-path/run.sh probe   # ~4 min
#          OUT=/tmp/out bash lab/2026-12-03-decode-call-flat-path/run.sh tests   # ~4 min
# generate() in eager mode, lockstep, 5 rounds, FA4 carried, after FA4's first piece
# (lab/2026-12-02-gate-fails-closed/fa4_site.sh part .fa4a):
#          OUT=/tmp/out bash lab/2026-12-03-decode-call-flat-path/run.sh generate .fa4b  # ~5 min
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
case ${1:-probe} in
probe)
for run in flat-1 base-1 base-2 flat-2; do
  tree=src
  [[ $run == base-* ]] && tree=.base/src
  PYTHONPATH=$tree python3 -W ignore lab/2026-12-03-decode-call-flat-path/probe_model.py \
    --out "$OUT/$run" > "$OUT/$run.log" 2>&1
  echo "$run rc=$? [$(($(date +%s) - start)) s]"
  grep -A8 "^B=" "$OUT/$run.log" | grep -E "^B=|frepro|flash" | head -12
done ;;
generate)
  PYTHONPATH=src:.:$(bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$2")
  export PYTHONPATH
  python3 -W ignore -m flashrepro_harness model --generate --gen-modes eager --no-packed \
    --gen-rounds 5 --out "$OUT/generate-eager" > "$OUT/generate-eager.log" 2>&1
  echo "generate eager rc=$? [$(($(date +%s) - start)) s]"
  tail -12 "$OUT/generate-eager.log" ;;
tests)
PYTHONPATH=src:. timeout 280 python3 -m pytest -q -p no:cacheprovider -m gpu -x \
  tests/test_decode.py tests/test_direct_launch.py tests/test_launch_plans.py \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? [$(($(date +%s) - start)) s]"
tail -4 "$OUT/gpu_tests.log" ;;
esac
