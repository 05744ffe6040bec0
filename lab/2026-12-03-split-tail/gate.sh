#!/usr/bin/env bash
# H200: the gate as a pull request's GPU check runs it, with the split tail's head (this
# checkout) timed beside its base commit's code (2275ba4's src/ in .base/src, the reference),
# then judged by this checkout's gate and baselines.
#   git archive 2275ba4 src | tar -x -C .base; OUT=/tmp/out bash lab/2026-12-03-split-tail/gate.sh
set -uo pipefail
: "${OUT:?set OUT}"
ROOT=$PWD
export FLASHREPRO_REQUIRE_GPU=1
mkdir -p "$OUT/gate"
PYTHONPATH=$ROOT/src python3 -m flashrepro_harness reproduce --reference-src "$ROOT/.base/src" \
  --out "$OUT/gate" --gate > "$OUT/gate/reproduce.log" 2>&1
echo "reproduce exit $?"
PYTHONPATH=$ROOT/src python3 -m flashrepro_harness gate --results "$OUT/gate/reproduce.json" \
  --baseline-dir "$ROOT/reproduce/baselines" --summary "$OUT/gate/verdict.md" \
  --verdict-json "$OUT/gate/verdict.json" > "$OUT/gate/judge.log" 2>&1
echo "judge exit $?"
