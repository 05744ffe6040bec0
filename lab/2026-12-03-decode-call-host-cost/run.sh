#!/usr/bin/env bash
# H200: the in-model decode probe of lab/2026-12-02-kvcache-host-path three times, in separate
# processes: a83ca26's src (before), this tree's src, a83ca26's again; then the GPU tests of
# the decode and transformers paths. .base/src holds `git archive a83ca26 src`.
#
#   OUT=/tmp/out bash lab/2026-12-03-decode-call-host-cost/run.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
start=$(date +%s)
probe=lab/2026-12-02-kvcache-host-path/decode_probe.py
for run in before:.base/src after:src before2:.base/src; do
  name=${run%%:*}; src=${run#*:}
  PYTHONPATH=$src:. python3 -W ignore $probe --out "$OUT/$name" --rounds 3 --steps 24 \
    > "$OUT/$name.log" 2>&1
  echo "$name rc=$? [$(($(date +%s) - start)) s]"; grep -E "^\| +(1|16) \| (frepro|sdpa)" "$OUT/$name.log"
done
FLASHREPRO_REQUIRE_GPU=1 PYTHONPATH=src:. python3 -m pytest -m gpu -n 16 -q -p no:cacheprovider \
  tests/test_decode.py tests/test_transformers.py tests/test_transformers_lengths.py \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? [$(($(date +%s) - start)) s]"; tail -2 "$OUT/gpu_tests.log"
