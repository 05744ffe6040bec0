#!/usr/bin/env bash
# H200: the kernel with its four TMA descriptors
# prefetched at the start (PTX prefetch.param.tensormap on the kernel's descriptor parameters,
# SASS UTMACCTL.PF, as FA3's prefetch_tma_descriptor) against the kernel as it is (56f4f97),
# side by side: variant_probe.py, first 4 problems (article non-causal and causal, B=16 L=1024
# non-causal and causal), 30 rounds. The variant (not committed) is written by the caller to
# lab/2026-11-29-turn-next-q-epilogue/ws_pf.py.
#   OUT=/tmp/out bash lab/2026-11-29-turn-next-q-epilogue/descriptor_prefetch.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 240 python3 lab/probes/variant_probe.py --problems 4 \
  prefetch=lab/2026-11-29-turn-next-q-epilogue/ws_pf.py > "$OUT/timing.txt" 2>&1
echo "timing rc=$? [$(($(date +%s) - start)) s]"; grep -v Warning "$OUT/timing.txt" | grep -v "samples = "
