#!/usr/bin/env bash
# H200: host time per call (host_probe.py); the
# article run made the baseline with the ~1 ms busy-wait; the GPU workflow's steps in order
# (ci_steps.sh: doctor, the whole GPU suite, executed counts, reproduce --gate against that
# baseline); then the gate experiment. Logs and results land in $OUT/all.tgz.
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-host-time-per-call/host_baseline_ci_gate.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W/ci" "$W/gate" "$W/base"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
start=$(date +%s)
PYTHONPATH=$PWD/src timeout 60 python3 lab/probes/host_probe.py > "$W/host_probe.md" 2>&1
echo "host probe rc=$? [$(($(date +%s) - start)) s]"; cat "$W/host_probe.md"
PYTHONPATH=$PWD/src timeout 120 python3 -m flashrepro reproduce --no-sass --out "$W/base" \
  --update-baseline > "$W/base/reproduce.txt" 2>&1
echo "baseline run rc=$? [$(($(date +%s) - start)) s]"; head -19 "$W/base/reproduce.txt"
cp -r reproduce/baselines "$W/baselines"
OUT=$W/ci timeout 360 bash scripts/ci_steps.sh > "$W/ci_steps.log" 2>&1
echo "ci_steps rc=$? [$(($(date +%s) - start)) s]"
grep -E " passed| failed|rc=|exit [0-9]|Warning" "$W/ci_steps.log" | tail -12
grep -E "^### " "$W/ci/summary.md"
left=$((575 - $(date +%s) + start))
OUT=$W/gate PYTHONPATH=$PWD/src timeout $left python3 scripts/gate_experiment.py \
  --runs 10 > "$W/gate_experiment.txt" 2>&1
echo "gate experiment rc=$? [$(($(date +%s) - start)) s]"; tail -20 "$W/gate_experiment.txt"
rm -rf "$W/gate/baselines"  # carries the hook: never a baseline to commit
