#!/usr/bin/env bash
# H200, after FA4's first piece (lab/2026-12-02-gate-fails-closed/fa4_site.sh part .fa4a):
#   OUT=/tmp/out bash lab/2026-12-03-attention-call-host-floor/run.sh eager .fa4b   # ~7 min
#   OUT=/tmp/out bash lab/2026-12-03-attention-call-host-floor/run.sh static        # ~5 min
# eager: generate() eager mode in lockstep (5 rounds, FA4), then the compiled B=1 L=1024
# prefill, 30 rounds of one forward. static: generate()'s static mode and packed prefill.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
export PYTHONPATH=src:.
case "$1" in
  eager)
    PYTHONPATH=src:.:$(bash lab/2026-12-02-gate-fails-closed/fa4_site.sh install "$2")
    export PYTHONPATH
    python3 -W ignore -m flashrepro_harness model --generate --gen-modes eager --no-packed \
      --gen-rounds 5 --out "$OUT/generate-eager" > "$OUT/generate-eager.log" 2>&1
    echo "generate eager rc=$? [$(($(date +%s) - start)) s]"
    tail -12 "$OUT/generate-eager.log"
    python3 -W ignore -m flashrepro_harness model --modes compile --lengths 1024 \
      --tokens 1024 --no-short --impls frepro,sdpa-flash,sdpa-cudnn --rounds 30 --calls 1 \
      --out "$OUT/model-compile-short" > "$OUT/model-compile-short.log" 2>&1
    echo "model compile short rc=$? [$(($(date +%s) - start)) s]"
    tail -8 "$OUT/model-compile-short.log" ;;
  static)
    python3 -W ignore -m flashrepro_harness model --generate --gen-modes static \
      --gen-rounds 3 --out "$OUT/generate-static" > "$OUT/generate-static.log" 2>&1
    echo "generate static rc=$? [$(($(date +%s) - start)) s]"
    tail -12 "$OUT/generate-static.log" ;;
esac
