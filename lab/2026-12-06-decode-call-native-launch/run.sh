#!/usr/bin/env bash
# On a Hopper GPU host, from the repository root:
#   OUT=/tmp/out bash lab/2026-12-06-decode-call-native-launch/run.sh probe [.fa4a]  # ~4 min
#   OUT=/tmp/out bash lab/2026-12-06-decode-call-native-launch/run.sh generate .fa4b # ~5 min
#   OUT=/tmp/out bash lab/2026-12-06-decode-call-native-launch/run.sh all             # ~8 min
# probe: build the extension (timed), the GPU tests of the native path and of transformers'
# attention functions with it switched on, then the in-model probe (and FA4's first piece
# kept, lab/2026-12-02-gate-fails-closed/fa4_site.sh, where a folder is given).
# generate: `flashrepro model --generate`, eager, lockstep, 5 rounds, FA4 carried, with the
# native decode launch switched on.
# all: probe, then generate without FA4, with the packed-sequence prefill (one call).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
export PYTHONPATH=src:.
case $1 in
probe|all)
  [[ -n ${2:-} ]] && bash lab/2026-12-02-gate-fails-closed/fa4_site.sh part "$2"
  FLASHREPRO_NATIVE=1 python3 -c "
import time; t = time.perf_counter()
from flashrepro import native
assert native.registry() is not None
print(f'extension built in {time.perf_counter() - t:.1f} s')" 2>&1 | tee "$OUT/build.log"
  FLASHREPRO_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 \
    tests/test_native.py tests/test_decode.py tests/test_launch_plans.py > "$OUT/native_tests.log" 2>&1
  echo "native tests rc=$? [$(($(date +%s) - start)) s]"; tail -1 "$OUT/native_tests.log"
  FLASHREPRO_NATIVE=1 FLASHREPRO_REQUIRE_GPU=1 timeout 240 python3 -m pytest -q \
    -p no:cacheprovider -n 8 -m gpu tests/test_transformers.py tests/test_transformers_lengths.py \
    > "$OUT/transformers_tests.log" 2>&1
  echo "transformers tests (native on) rc=$? [$(($(date +%s) - start)) s]"
  tail -1 "$OUT/transformers_tests.log"
  timeout 240 python3 -W ignore lab/2026-12-06-decode-call-native-launch/probe_model.py \
    --out "$OUT/probe" > "$OUT/probe.log" 2>&1
  echo "probe rc=$? [$(($(date +%s) - start)) s]"; tail -14 "$OUT/probe.log"
  [[ $1 == all ]] || exit 0
  FLASHREPRO_NATIVE=1 timeout 330 python3 -W ignore -m flashrepro_harness model --generate \
    --gen-modes eager --gen-rounds 5 --out "$OUT/generate-eager" > "$OUT/generate-eager.log" 2>&1
  echo "generate eager rc=$? [$(($(date +%s) - start)) s]"
  tail -14 "$OUT/generate-eager.log"
  rm -f "$OUT"/*/*.png ;;
generate)
  PYTHONPATH=src:.:$(bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$2")
  export PYTHONPATH FLASHREPRO_NATIVE=1
  timeout 500 python3 -W ignore -m flashrepro_harness model --generate --gen-modes eager \
    --no-packed --gen-rounds 5 --out "$OUT/generate-eager" > "$OUT/generate-eager.log" 2>&1
  echo "generate eager rc=$? [$(($(date +%s) - start)) s]"
  tail -12 "$OUT/generate-eager.log"
  rm -f "$OUT"/*/*.png ;;
esac
