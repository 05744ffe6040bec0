#!/usr/bin/env bash
# On a Hopper GPU host, from the repository root, the reference tree in .base (`git archive
# 2618726 src reproduce/article.toml reproduce/baselines | tar -x -C .base`) and nox's wheels in
# .whl (`pip download nox pytest-xdist hypothesis -d .whl`), carried:
#   OUT=/tmp/out bash lab/2026-12-06-gpu-job-and-eager-generate/run.sh job [.fa4a]  # ~8 min
#   OUT=/tmp/out SKIP_DECODE_TESTS=1 bash lab/2026-12-06-gpu-job-and-eager-generate/run.sh rest
#   OUT=/tmp/out bash lab/2026-12-06-gpu-job-and-eager-generate/run.sh generate  # ~2 min
#   OUT=/tmp/out bash lab/2026-12-06-gpu-job-and-eager-generate/run.sh tests     # ~1.5 min
# job: the GPU workflow's steps (scripts/ci_steps.sh) paired with the reference (and FA4's
# first piece kept, lab/2026-12-02-gate-fails-closed/fa4_site.sh, where a folder is given).
# rest: the steps after the test suite (executed counts, the paired reproduce, both judges).
# A copy without .git names its commits in FLASHREPRO_GIT_COMMIT and FLASHREPRO_REFERENCE_COMMIT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
case $1 in
job)
  [[ -n ${2:-} ]] && bash lab/2026-12-02-gate-fails-closed/fa4_site.sh part "$2"
  OUT=/tmp/gpuci REFERENCE_SRC=$PWD/.base/src timeout 560 bash scripts/ci_steps.sh \
    > "$OUT/ci_steps.log" 2>&1
  echo "ci_steps rc=$? [$(($(date +%s) - start)) s]" | tee -a "$OUT/ci_steps.log"
  for f in reproduce.json verdict.json verdict.md summary.md; do
    cp "/tmp/gpuci/$f" "$OUT/" 2>/dev/null
  done
  grep -E "passed|failed|performance gate" "$OUT/ci_steps.log" | tail -4 ;;
rest)  # the steps after the test suite, with its one failing file first
  export FLASHREPRO_REQUIRE_GPU=1 FLASHREPRO_RESULTS_DIR=/tmp/gpuci
  export GITHUB_STEP_SUMMARY=/tmp/gpuci/summary.md PYTHONPATH=$PWD/src
  mkdir -p /tmp/gpuci
  python3 -m pip install -q --no-index --find-links .whl nox pytest pytest-xdist hypothesis
  # nox runs `python`, the image's venv interpreter (a link to it elsewhere loses the venv)
  [[ ${SKIP_DECODE_TESTS:-} ]] || {
  PYTHONPATH=src:. python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -k "stream or scratch" tests/test_decode.py \
    > "$OUT/decode_tests.log" 2>&1
  echo "decode tests rc=$? [$(($(date +%s) - start)) s]"; tail -1 "$OUT/decode_tests.log"; }
  python3 -m nox --no-venv -s profile -- --executed > "$OUT/steps.log" 2>&1
  echo "profile executed rc=$? [$(($(date +%s) - start)) s]"
  python3 -m nox --no-venv -s reproduce -- --reference-src "$PWD/.base/src" >> "$OUT/steps.log" 2>&1
  echo "reproduce rc=$? [$(($(date +%s) - start)) s]"
  cp /tmp/gpuci/reproduce.json "$OUT/"
  PYTHONPATH=.base/src python3 -m flashrepro_harness gate --results /tmp/gpuci/reproduce.json \
    --baseline-dir .base/reproduce/baselines --summary "$OUT/verdict-reference.md" > /dev/null 2>&1
  echo "judge (reference's gate) rc=$?"
  python3 -m flashrepro_harness gate --results /tmp/gpuci/reproduce.json \
    --baseline-dir reproduce/baselines --expect-commit "$FLASHREPRO_GIT_COMMIT" \
    --expect-reference-commit "$FLASHREPRO_REFERENCE_COMMIT" --summary "$OUT/verdict.md" \
    > /dev/null 2>&1
  echo "judge (this tree's gate) rc=$?" ;;
generate)  # generate() in eager mode, lockstep, 3 rounds; the compiled B=1 L=1024 prefill
  export PYTHONPATH=src:.
  timeout 280 python3 -W ignore -m flashrepro_harness model --generate --gen-modes eager \
    --no-packed --gen-rounds 3 --out "$OUT/generate-eager" > "$OUT/generate-eager.log" 2>&1
  echo "generate eager rc=$? [$(($(date +%s) - start)) s]"
  timeout 200 python3 -W ignore -m flashrepro_harness model --modes compile --lengths 1024 \
    --tokens 1024 --no-short --impls frepro,sdpa-flash,sdpa-cudnn --rounds 30 --calls 1 \
    --out "$OUT/model-compile-short" > "$OUT/model-compile-short.log" 2>&1
  echo "model compile short rc=$? [$(($(date +%s) - start)) s]"
  rm -f "$OUT"/*/*.png ;;  # at most 8 files come back; the plots are redrawn from the JSON
tests)  # the GPU tests of the files this lab's commits touched
  FLASHREPRO_REQUIRE_GPU=1 PYTHONPATH=src:. timeout 150 python3 -m pytest -q -p no:cacheprovider \
    -n 8 tests/test_edge_inputs.py tests/test_decode.py tests/test_transformers_lengths.py \
    > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?" ;;
esac
