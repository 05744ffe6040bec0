#!/usr/bin/env bash
# H200, after the rule (ROW_MAX_TREE for the 192x128 tile): the sweep against FA4 and cuDNN in
# one process, then the GPU test suite. FA4 from lab/2026-12-02-gate-fails-closed/fa4_site.sh
# (its first piece carried in a call before this one).
#
#   OUT=/tmp/out bash lab/2026-12-03-row-max-tree/after.sh .fa4b
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=src:.:$(bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$1")
start=$(date +%s)
python3 -c "import flash_attn.cute; print('fa4 ok')" 2>&1 | tail -1
python3 -m flashrepro_harness bench --dtypes float16 bfloat16 --rounds 10 --calls 6 \
  --out "$OUT/bench" > "$OUT/bench.log" 2>&1
echo "bench rc=$? [$(($(date +%s) - start)) s]"; grep -E "geometric|Peak" "$OUT/bench/bench.md"
FLASHREPRO_REQUIRE_GPU=1 python3 -m pytest -m gpu -n 16 -q -p no:cacheprovider \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? [$(($(date +%s) - start)) s]"; tail -3 "$OUT/gpu_tests.log"
