#!/usr/bin/env bash
# H200: the decode table with the full-cache row, then the GPU tests of the decode and
# transformers paths.
# FA4 from lab/2026-12-02-gate-fails-closed/fa4_site.sh (its first piece carried in a call
# before this one).
#
#   OUT=/tmp/out bash lab/2026-12-03-decode-full-cache/run.sh .fa4b
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=src:.:$(bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$1")
start=$(date +%s)
python3 -c "import flash_attn.cute; print('fa4 ok')" 2>&1 | tail -1
python3 -W ignore scripts/decode_bench.py --out "$OUT/decode" --batch 1,8,16,32,64 --rounds 8 \
  > "$OUT/decode.log" 2>&1
echo "decode_bench rc=$? [$(($(date +%s) - start)) s]"; sed -n 5,19p "$OUT/decode/decode_bench.md"
FLASHREPRO_REQUIRE_GPU=1 python3 -m pytest -m gpu -n 16 -q -p no:cacheprovider \
  tests/test_decode.py tests/test_transformers.py tests/test_transformers_lengths.py \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? [$(($(date +%s) - start)) s]"; tail -3 "$OUT/gpu_tests.log"
