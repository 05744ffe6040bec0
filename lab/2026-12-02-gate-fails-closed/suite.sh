#!/usr/bin/env bash
# The whole test suite on a bare GPU host (no nox, no harness install: the repository's src on
# PYTHONPATH), as the acceptance of the fail-closed gate asks. Writes $OUT/gpu_suite.log.
set -uo pipefail
: "${OUT:?set OUT}"
export PYTHONPATH="$PWD/src" FLASHREPRO_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" | tee -a "$OUT/gpu.txt"
python3 -c "import nox" 2>/dev/null && echo "nox is installed: not a bare host" | tee -a "$OUT/gpu.txt"
workers=$(python3 -m flashrepro_harness doctor --xdist-workers)
start=$(date +%s)
timeout "${SUITE_TIMEOUT_S:-480}" python3 -m pytest -n "$workers" -q -p no:cacheprovider tests \
  > "$OUT/gpu_suite.log" 2>&1
rc=$?
echo "suite rc=$rc wall=$(( $(date +%s) - start )) s workers=$workers" | tee -a "$OUT/gpu_suite.log"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.log" | head -40
tail -3 "$OUT/gpu_suite.log"
