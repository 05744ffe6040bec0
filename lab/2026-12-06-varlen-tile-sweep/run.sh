#!/usr/bin/env bash
# On a Hopper GPU host, from the repository root (~2 min):
#   OUT=/tmp/out bash lab/2026-12-06-varlen-tile-sweep/run.sh
# The tile sweep (probe.py), then the GPU test files whose tests ran out of memory under 16
# workers on an 80 GiB card (lab/2026-12-06-model-tables-native-launch/), with `-n auto`.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=src:.
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 200 python3 lab/2026-12-06-varlen-tile-sweep/probe.py "$OUT/probe.json" 2>&1 \
  | tee "$OUT/probe.txt"
echo "probe rc=$? [$(($(date +%s) - start)) s]"
FLASHREPRO_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -p no:cacheprovider -n auto -m gpu \
  tests/test_varlen.py tests/test_semantics.py tests/test_table_dispatch.py \
  tests/test_transformers_lengths.py tests/test_mma_sync.py > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? [$(($(date +%s) - start)) s]"; grep -m1 "created:" "$OUT/gpu_tests.log"
tail -1 "$OUT/gpu_tests.log"
