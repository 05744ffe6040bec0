#!/usr/bin/env bash
# On the H200, from the repository root, FA4 installed by the call before this one
# (lab/2026-12-06-generate-native-h200/run.sh generate, on the same warm machine):
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<commit> bash lab/2026-12-06-compiled-prefill-native-launch/run.sh  # ~5 min
# The Qwen3 prefill table, eager and compiled, every implementation, 5 rounds, with the
# native launch switched on (frepro's attention calls served from C++ after their first).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
export PYTHONPATH=src:.:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages FLASHREPRO_NATIVE=1
timeout 570 python3 -W ignore -m flashrepro_harness model --rounds 5 --out "$OUT/model" \
  > "$OUT/model.log" 2>&1
echo "model rc=$? [$(($(date +%s) - start)) s]"
grep -E "NOT COMPILED|MISMATCH|left out|Error" "$OUT/model.log"
rm -f "$OUT"/*/*.png
