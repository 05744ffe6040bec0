#!/usr/bin/env bash
# On the H200, from the repository root, in two calls on one warm machine:
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<commit> bash lab/2026-12-06-generate-native-h200/run.sh first .fa4a     # ~3 min
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<commit> bash lab/2026-12-06-generate-native-h200/run.sh generate .fa4b  # ~5 min
# first: FA4's first piece kept (lab/2026-12-02-gate-fails-closed/fa4_site.sh); the GPU tests
# of the native path and of the decode splits that each hold keys; NVML's clocks found by
# torch's cuda:0 PCI bus id.
# generate: `flashrepro model --generate`, eager, lockstep, 5 rounds, FA4 installed, with the
# native decode launch switched on, and the packed-sequence prefill.
# Or, where the device time left allows one call only, without FA4 (~7 min on an H200):
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=<commit> bash lab/2026-12-06-generate-native-h200/run.sh one
# one: the GPU tests of `first`, lab/2026-12-06-compiled-prefill-native-launch/run.sh, and
# `generate` without FA4.
# Then, here: flashrepro model --generate --merge $OUT/generate-eager/generate.json \
#   lab/2026-12-03-attention-call-host-floor/run-28b6515/generate-static/generate.json \
#   --out reproduce/results/nvidia-h200
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
export PYTHONPATH=src:.
case $1 in
first|one)
  [[ $1 == first ]] && bash lab/2026-12-02-gate-fails-closed/fa4_site.sh part "$2"
  FLASHREPRO_REQUIRE_GPU=1 timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 \
    tests/test_native.py tests/test_decode.py -k "native or every_split" \
    > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? [$(($(date +%s) - start)) s]"; tail -1 "$OUT/gpu_tests.log"
  python3 -c "from flashrepro_harness import env; print(env.nvml_clocks())" 2>&1 \
    | tee "$OUT/nvml.txt"
  [[ $1 == one ]] || exit 0
  bash lab/2026-12-06-compiled-prefill-native-launch/run.sh
  FLASHREPRO_NATIVE=1 timeout 330 python3 -W ignore -m flashrepro_harness model --generate \
    --gen-modes eager --gen-rounds 5 --out "$OUT/generate-eager" > "$OUT/generate-eager.log" 2>&1
  echo "generate eager (no FA4) rc=$? [$(($(date +%s) - start)) s]"
  tail -16 "$OUT/generate-eager.log"
  rm -f "$OUT"/*/*.png
  # the device returns at most 8 files: the result folders as one archive
  (cd "$OUT" && tar czf results.tgz */ && rm -rf -- */) ;;
generate)
  PYTHONPATH=src:.:$(bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$2")
  export PYTHONPATH FLASHREPRO_NATIVE=1
  timeout 540 python3 -W ignore -m flashrepro_harness model --generate --gen-modes eager \
    --gen-rounds 5 --out "$OUT/generate-eager" > "$OUT/generate-eager.log" 2>&1
  echo "generate eager rc=$? [$(($(date +%s) - start)) s]"
  tail -16 "$OUT/generate-eager.log"
  rm -f "$OUT"/*/*.png ;;
esac
