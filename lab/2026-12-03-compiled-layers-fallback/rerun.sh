#!/usr/bin/env bash
# H200: the Qwen3 model table again, FA4 compiled too (no --compile-impls), with each
# implementation's layers compiled as its own code (31e3d2e) and compile rows that ran
# eagerly flagged (exit 1). FA4 from lab/2026-12-02-gate-fails-closed/fa4_site.sh (its first
# piece carried in a call before this one). Expected: frepro's compiled rows run inductor's
# kernels (no NOT COMPILED line, exit 0) and read 0.99-1.06x at B·L = 16384, as at 4c4fe2c.
#
#   OUT=/tmp/out bash lab/2026-12-03-compiled-layers-fallback/rerun.sh .fa4b
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=src:.:$(bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$1")
start=$(date +%s)
python3 -W ignore -m flashrepro_harness model --rounds 3 --out "$OUT/model" \
  > "$OUT/model.log" 2>&1
echo "model rc=$? [$(($(date +%s) - start)) s]"
grep -E "NOT COMPILED|MISMATCH|left out" "$OUT/model.log"
