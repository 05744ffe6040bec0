#!/usr/bin/env bash
# H200, after the split tail became the table's default (D=128 non-causal L >= 2048, D=64
# non-causal L >= 8192): its GPU tests, then the sweep against FA4 and cuDNN in one process.
# FA4 from lab/2026-12-02-gate-fails-closed/fa4_site.sh (its first piece carried in a call
# before this one).
#
#   OUT=/tmp/out bash lab/2026-12-03-split-tail/after.sh .fa4b
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=src:.:$(bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$1")
start=$(date +%s)
python3 -c "import flash_attn.cute; print('fa4 ok')" 2>&1 | tail -1
FLASHREPRO_REQUIRE_GPU=1 python3 -m pytest -m gpu -n 8 -q -p no:cacheprovider \
  tests/test_parity.py -k "split_tail or dynamic_schedule or three_consumers" \
  > "$OUT/gpu_split_tests.log" 2>&1
echo "split tests rc=$? [$(($(date +%s) - start)) s]"; tail -2 "$OUT/gpu_split_tests.log"
python3 -m flashrepro_harness bench --dtypes float16 bfloat16 --rounds 10 --calls 6 \
  --out "$OUT/bench" > "$OUT/bench.log" 2>&1
echo "bench rc=$? [$(($(date +%s) - start)) s]"; grep -E "geometric|Peak" "$OUT/bench/bench.md"
