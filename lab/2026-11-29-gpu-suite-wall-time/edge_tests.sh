#!/usr/bin/env bash
# Issue 9's GPU tests on one GPU, serially (no xdist), from a cold Triton cache: flash-attention's
# shape lists (tests/test_gpu_shapes.py, 120 cases), the error paths, the SDPA semantics at
# realistic sizes in float16 and bfloat16 (including the > 2^31-element offset tests, up to
# ~20 GB of GPU memory) and the property tests.
#
#   OUT=/tmp/edge bash lab/2026-11-29-gpu-suite-wall-time/edge_tests.sh
#
# Writes $OUT/edge-<suite>.log (pytest's output with the 10 slowest tests) and
# $OUT/edge-<suite>.xml (JUnit, every test's time), and prints one line per suite: pytest's
# summary and the wall time. Expect every test to pass (477 in all) and test_gpu_shapes to take
# under ~3 minutes, most of it Triton compiling. Exits 1 if any suite failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder for the logs}"
mkdir -p "$OUT"
export FLASHREPRO_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
TRITON_CACHE_DIR=$(mktemp -d)
export TRITON_CACHE_DIR

status=0
for suite in test_gpu_shapes test_errors test_semantics test_properties; do
  start=$(date +%s)
  python3 -m pytest -q -p no:cacheprovider "tests/$suite.py" --durations=10 \
    --junitxml="$OUT/edge-$suite.xml" >"$OUT/edge-$suite.log" 2>&1 || status=1
  echo "$suite: $(tail -n 1 "$OUT/edge-$suite.log") [$(($(date +%s) - start)) s wall]"
done
exit "$status"
