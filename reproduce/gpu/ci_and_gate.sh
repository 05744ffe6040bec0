#!/usr/bin/env bash
# H200, session 5, second call (issues 6 and 9, 4): the GPU workflow's steps in order
# (ci_steps.sh: doctor, the whole GPU suite, executed counts, reproduce --gate against the
# committed baseline), then the gate experiment. Logs and results land in $OUT/all.tgz.
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash reproduce/gpu/ci_and_gate.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W/ci" "$W/gate"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
start=$(date +%s)
OUT=$W/ci timeout 420 bash reproduce/gpu/ci_steps.sh > "$W/ci_steps.log" 2>&1
echo "ci_steps rc=$? [$(($(date +%s) - start)) s]"
grep -E "passed|failed|error|gate:|verdict|PASS|REGRESSION" "$W/ci_steps.log" | tail -15
OUT=$W/gate PYTHONPATH=$PWD/src timeout $((570 - $(date +%s) + start)) \
  python3 reproduce/gpu/gate_experiment.py > "$W/gate_experiment.txt" 2>&1
echo "gate experiment rc=$? [$(($(date +%s) - start)) s]"; tail -25 "$W/gate_experiment.txt"
rm -rf "$W/gate/baselines"  # carries the hook: never a baseline to commit
