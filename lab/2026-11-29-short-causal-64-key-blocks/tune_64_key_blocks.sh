#!/usr/bin/env bash
# H200: the two-consumer ws kernel with 64-key blocks for short causal
# problems, where cuDNN leads most (D = 64 causal L <= 2048: 0.84-0.98x; D = 128 causal L = 512:
# 0.94-0.95x). A challenger run against the table without --write (a measurement only).
#   OUT=/tmp/out bash lab/2026-11-29-short-causal-64-key-blocks/tune_64_key_blocks.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 170 python3 -m flashrepro tune --rounds 3 --against-table --head-dims 64 --masks causal \
  --lengths 512 1024 2048 --configs "128x64 w8 s4 tma overlap ws" "128x64 w8 s3 tma overlap ws" \
  "128x64 w8 s2 tma overlap ws" > "$OUT/tune_d64.txt" 2>&1
echo "tune d64 rc=$? [$(($(date +%s) - start)) s]"; grep -v Warning "$OUT/tune_d64.txt" | grep -v "samples ="
timeout 90 python3 -m flashrepro tune --rounds 3 --against-table --head-dims 128 --masks causal \
  --lengths 512 1024 --configs "128x64 w8 s4 tma overlap ws" "128x64 w8 s3 tma overlap ws" \
  > "$OUT/tune_d128.txt" 2>&1
echo "tune d128 rc=$? [$(($(date +%s) - start)) s]"; grep -v Warning "$OUT/tune_d128.txt" | grep -v "samples ="
