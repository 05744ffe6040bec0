#!/usr/bin/env bash
# H200, second run: the in-model decode probe four times in separate processes, order
# before/after/after/before (a83ca26's src and this tree's), then the greedy-agreement GPU
# test three times (three fresh seeds), its static row held to SDPA compiled.
#
#   OUT=/tmp/out bash lab/2026-12-03-decode-call-host-cost/run2.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
start=$(date +%s)
probe=lab/2026-12-02-kvcache-host-path/decode_probe.py
for run in before:.base/src after:src after2:src before2:.base/src; do
  name=${run%%:*}; src=${run#*:}
  PYTHONPATH=$src:. python3 -W ignore $probe --out "$OUT/$name" --rounds 3 --steps 24 \
    > "$OUT/$name.log" 2>&1
  echo "$name rc=$? [$(($(date +%s) - start)) s]"
  grep -E "^\| +(1|16) \| (frepro|sdpa-flash|sdpa-cudnn) " "$OUT/$name.log"
done
for i in 1 2 3; do
  FLASHREPRO_REQUIRE_GPU=1 PYTHONPATH=src:. python3 -m pytest -m gpu -q -s -p no:cacheprovider \
    tests/test_transformers_lengths.py -k greedy_tokens_agree > "$OUT/greedy$i.log" 2>&1
  echo "greedy $i rc=$? [$(($(date +%s) - start)) s]"
  grep -E "greedy agreement|passed|failed" "$OUT/greedy$i.log"
done
