#!/usr/bin/env bash
# H200, after the decode rule (48f9bd0): the decode table against cuDNN, SDPA flash and FA4,
# the rule probe's cells beside the new default, and the GPU tests of the decode paths. FA4
# from lab/2026-12-02-gate-fails-closed/fa4_site.sh (its first piece carried in a call before).
#
#   OUT=/tmp/out bash lab/2026-12-03-decode-tma-tiles/after.sh .fa4b
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=src:.:$(bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$1")
start=$(date +%s)
python3 -c "import flash_attn.cute; print('fa4 ok')" 2>&1 | tail -1
python3 -W ignore scripts/decode_bench.py --out "$OUT/decode" --batch 1,8,16,32,64 --rounds 8 \
  > "$OUT/decode.log" 2>&1
echo "decode_bench rc=$? [$(($(date +%s) - start)) s]"; sed -n 5,14p "$OUT/decode/decode_bench.md"
python3 -W ignore lab/2026-12-03-decode-tma-tiles/rule_probe.py 2>&1 | grep -v "timing rounds" \
  > "$OUT/rule-probe.txt"
echo "rule probe rc=$? [$(($(date +%s) - start)) s]"
FLASHREPRO_REQUIRE_GPU=1 python3 -m pytest -m gpu -n 16 -q -p no:cacheprovider \
  tests/test_decode.py tests/test_varlen.py tests/test_transformers.py \
  tests/test_transformers_lengths.py tests/test_launch_plans.py > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? [$(($(date +%s) - start)) s]"; tail -3 "$OUT/gpu_tests.log"
