#!/usr/bin/env bash
# On a Hopper GPU host, from the repository root (~70 s on an H100):
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<commit> bash lab/2026-12-06-compiled-prefill-native-launch/run.sh
# The compiled Qwen3 prefill at B=1, L=1024 (each decoder layer compiled), frepro and SDPA's
# cuDNN and flash backends, 9 interleaved rounds, twice in one machine: the native launch
# switched off, then on (frepro's attention calls served from C++ after their first).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=src:.
for n in 0 1; do
  start=$(date +%s)
  FLASHREPRO_NATIVE=$n timeout 200 python3 -W ignore -m flashrepro_harness model \
    --modes compile --impls frepro,sdpa-cudnn,sdpa-flash --lengths 1024 --tokens 1024 \
    --no-short --rounds 9 --out "$OUT/compiled-native$n" > "$OUT/compiled-native$n.log" 2>&1
  echo "compiled B=1 L=1024, FLASHREPRO_NATIVE=$n: rc=$? [$(($(date +%s) - start)) s]"
  grep -E "^\| compile" "$OUT/compiled-native$n/model.md"
done
rm -f "$OUT"/*/*.png
