#!/usr/bin/env bash
# The GPU workflow's steps (.github/workflows/gpu.yml), in its order and with its commands, run
# on this host's python3 instead of inside the image: the workflow checked by hand on a GPU
# machine. $OUT plays the job's results folder (the image's /results) and its verdict folder:
# it gets summary.md (what the job summary shows), the results JSON and the verdict (what the
# job uploads).
#
#   OUT=/tmp/gpu-ci [REFERENCE_SRC=/path/to/base/src] [JUDGE_SRC=/path/to/judge/src] \
#     bash scripts/ci_steps.sh
#
# REFERENCE_SRC plays the workflow's reference checkout (the PR's base commit's src folder,
# e.g. from `git worktree add /tmp/base BASE_SHA`): the head's rows are timed beside that code's
# in the same rounds. JUDGE_SRC is the src folder whose gate judges the results, as the judge's
# image does in the workflow; by default REFERENCE_SRC's (a pull request: the base judges),
# else this checkout's (a trusted branch judging itself).
#
# Exits with the status of the first failing step, as the workflow's check does (the gate:
# 1 regression, 2 no baseline, 3 environment mismatch, 4 unusable or stale results, 5 kernel
# failure, 6 another problem, 7 inconclusive). Each `# step:`
# block below is the workflow's step of that name, verbatim (tests/test_workflows.py checks it).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder for summary.md and the results JSON}"
mkdir -p "$OUT"

# What the job's environment, the image and .github/scripts/in-image give the steps:
export FLASHREPRO_REQUIRE_GPU=1
export FLASHREPRO_RESULTS_DIR="$OUT" # the image sets /results, mounted from the job's folder
export GITHUB_STEP_SUMMARY="$OUT/summary.md"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" # the image has flashrepro installed
in-image() { "$@"; }
# ... and what .github/scripts/judge gives: the judge checkout's code first on the path (its
# gate, its article.toml), reading the results from $OUT and writing the verdict there.
JUDGE_ROOT=$(cd "${JUDGE_SRC:-${REFERENCE_SRC:-src}}/.." && pwd)
# ... and the job's env: the commits measured (the judge refuses results of others). A copy
# without .git: set FLASHREPRO_GIT_COMMIT (and FLASHREPRO_REFERENCE_COMMIT), else the judge
# step stops on an empty commit.
HEAD_SHA=${FLASHREPRO_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
if [[ -n ${REFERENCE_SRC:-} ]]; then
  REFERENCE_SHA=${FLASHREPRO_REFERENCE_COMMIT:-$(git -C "$REFERENCE_SRC" rev-parse HEAD 2>/dev/null || true)}
  export FLASHREPRO_REFERENCE_COMMIT=$REFERENCE_SHA # recorded where git cannot tell
fi
export JUDGE_ROOT RESULTS_DIR="$OUT" VERDICT_DIR="$OUT"
# PYTHONSAFEPATH: `python3 -m` would put this checkout's folder first on the path, where a
# top-level flashrepro_harness/ of the measured commit would stand in for the judge's.
judge() { PYTHONPATH="$JUDGE_ROOT/src" PYTHONSAFEPATH=1 "$@"; }

# The image's Python has nox and the test extra; without PyPI, bring wheels in .whl/ (ignored
# by git), made elsewhere with `pip download nox pytest-xdist hypothesis -d .whl`.
if [[ -d .whl ]]; then
  python3 -m pip install -q --no-index --find-links .whl nox pytest pytest-xdist hypothesis
fi
# The noxfile runs `python`; the image provides it, a bare host may only have python3.
if ! command -v python >/dev/null; then
  shim=$(mktemp -d)
  ln -s "$(command -v python3)" "$shim/python"
  export PATH="$shim:$PATH"
fi

# step: doctor (fails when no GPU is visible)
in-image python3 -m flashrepro_harness doctor --require-gpu

# step: Test suite on the GPU (every test a GPU host runs; pytest-xdist, a worker per CPU core, at most one per 8 GiB of GPU memory)
workers=$(in-image python3 -m flashrepro_harness doctor --xdist-workers)
in-image python3 -m nox --no-venv -s tests -- -n "$workers"

# step: Executed-count SASS check (Nsight Compute; skips where ncu is absent)
in-image python3 -m nox --no-venv -s profile -- --executed

# step: Reproduce the article run (the head's timings, paired with the reference where there is one)
in-image python3 -m nox --no-venv -s reproduce -- ${REFERENCE_SRC:+--reference-src "$REFERENCE_SRC"}

# step: Judge the results (the base commit's gate, settings and baselines on a pull request; else this commit's)
# the commits measured, where the judge knows the options (a base from before them does not)
expect=()
options=$(judge python3 -m flashrepro_harness gate --help)
if [[ $options == *--expect-commit* ]]; then
  expect=(--expect-commit "$HEAD_SHA" ${REFERENCE_SRC:+--expect-reference-commit "$REFERENCE_SHA"})
fi
judge python3 -m flashrepro_harness gate --results "$RESULTS_DIR/reproduce.json" \
  --baseline-dir "$JUDGE_ROOT/reproduce/baselines" "${expect[@]}" \
  --summary "$VERDICT_DIR/verdict.md" --verdict-json "$VERDICT_DIR/verdict.json"
