#!/usr/bin/env bash
# H200: the warp-specialized Gluon kernel.
#  1. Parity of every warp-specialized launch config (lab/probes/ws_probe.py parity).
#  2. Times against the Triton default, the non-specialized Gluon kernel, cuDNN and torch flash.
#
#   OUT=/tmp/out FLASHREPRO_GIT_COMMIT=$(git rev-parse HEAD) bash lab/2026-11-29-warp-specialization/ws_probe_run.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD FLASHREPRO_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
trap 'tar czf "$OUT/all.tgz" -C "$W" .' EXIT
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$W/nvidia-smi.csv"
timeout 170 python3 lab/probes/ws_probe.py parity > "$W/ws_parity.txt" 2>&1
echo "parity rc=$? [$(($(date +%s) - start)) s]"; grep -c "'ok'" "$W/ws_parity.txt"; grep FAIL "$W/ws_parity.txt" | head -20
timeout 250 python3 lab/probes/ws_probe.py timing > "$W/ws_timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -v "^|-" "$W/ws_timing.txt" | cut -c1-200
