#!/usr/bin/env bash
# On a Hopper GPU host, from the repository root, in three calls on one warm machine
# (FA4's wheels travel in two carried folders, lab/2026-12-02-gate-fails-closed/fa4_site.sh):
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<commit> bash lab/2026-12-06-model-tables-native-launch/run.sh tests .fa4a    # ~4 min
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<commit> bash lab/2026-12-06-model-tables-native-launch/run.sh generate .fa4b # ~8 min
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<commit> bash lab/2026-12-06-model-tables-native-launch/run.sh model         # ~6 min
# tests: FA4's first piece kept; the GPU tests of the native launch, the ops, the decode and
#   variable-length paths and the transformers integration, all with FLASHREPRO_NATIVE=1.
# generate: `flashrepro model --generate`, eager (FA4 a peer) and static, 5 rounds, switch on.
# model: `flashrepro model` (prefill, eager and compiled, FA4 a peer), 5 rounds, switch on.
# Or, in one call where FA4 cannot travel (~6 min on an H200): by the card, on an H200 the
# eager generate() and the compiled B=1 L=1024 prefill (switch on, no FA4); on another card
# the whole GPU suite with `-n auto` (the workers bounded by the GPU's memory):
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<commit> bash lab/2026-12-06-model-tables-native-launch/run.sh short
# Each call leaves its outputs in $OUT as one archive (the device returns at most 8 files).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
export PYTHONPATH=src:. FLASHREPRO_NATIVE=1
fa4=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
case $1 in
tests)
  bash lab/2026-12-02-gate-fails-closed/fa4_site.sh part "$2"
  FLASHREPRO_REQUIRE_GPU=1 timeout 420 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu \
    tests/test_native.py tests/test_ops.py tests/test_decode.py tests/test_varlen.py \
    tests/test_transformers.py tests/test_transformers_lengths.py tests/test_edge_inputs.py \
    > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? [$(($(date +%s) - start)) s]"; tail -3 "$OUT/gpu_tests.log"
  grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -20 ;;
generate)
  bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$2" > /dev/null
  PYTHONPATH=$PYTHONPATH:$fa4 timeout 560 python3 -W ignore -m flashrepro_harness model \
    --generate --gen-rounds 5 --out "$OUT/generate" > "$OUT/generate.log" 2>&1
  echo "generate rc=$? [$(($(date +%s) - start)) s]"
  grep "tok/s" "$OUT/generate.log" | cut -c1-110
  (cd "$OUT" && tar czf generate.tgz generate generate.log && rm -rf generate) ;;
model)
  PYTHONPATH=$PYTHONPATH:$fa4 timeout 570 python3 -W ignore -m flashrepro_harness model \
    --rounds 5 --out "$OUT/model" > "$OUT/model.log" 2>&1
  echo "model rc=$? [$(($(date +%s) - start)) s]"
  grep -E "^\| (eager|compile)" "$OUT/model/model.md" | cut -c1-120
  (cd "$OUT" && tar czf model.tgz model model.log && rm -rf model) ;;
short)
  if ! grep -q H200 "$OUT/gpu.txt"; then
    FLASHREPRO_NATIVE=0 FLASHREPRO_REQUIRE_GPU=1 timeout 420 python3 -m pytest -q \
      -p no:cacheprovider -n auto -m gpu tests > "$OUT/gpu_suite.log" 2>&1
    echo "gpu suite rc=$? [$(($(date +%s) - start)) s]"; grep -m1 "created:" "$OUT/gpu_suite.log"
    tail -1 "$OUT/gpu_suite.log"; exit 0
  fi
  timeout 300 python3 -W ignore -m flashrepro_harness model --generate --gen-modes eager \
    --gen-impls frepro,sdpa-cudnn,sdpa-flash --gen-rounds 5 --out "$OUT/generate-eager" \
    > "$OUT/generate-eager.log" 2>&1
  echo "generate eager rc=$? [$(($(date +%s) - start)) s]"; grep "tok/s" "$OUT/generate-eager.log"
  timeout 150 python3 -W ignore -m flashrepro_harness model --modes compile \
    --impls frepro,sdpa-cudnn,sdpa-flash --lengths 1024 --tokens 1024 --no-short --rounds 9 \
    --out "$OUT/compiled-short" > "$OUT/compiled-short.log" 2>&1
  echo "compiled short rc=$? [$(($(date +%s) - start)) s]"
  grep -E "^\| compile" "$OUT/compiled-short/model.md" | cut -c1-120
  (cd "$OUT" && tar czf short.tgz generate-eager* compiled-short* && rm -rf generate-eager compiled-short) ;;
esac
