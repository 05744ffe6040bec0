#!/usr/bin/env bash
# The gate on an H200, from the repository root: a paired A/A run passes; a real slowdown of the
# default kernel and kernels that return wrong values each fail. Each head is a copy of src/
# with one change, timed beside an unchanged copy (the reference), then judged by this
# checkout's gate and baselines, as the GPU workflow's judge step does.
#   OUT=/tmp/out bash lab/2026-12-02-gate-fails-closed/run.sh aa|faults
set -uo pipefail
: "${OUT:?set OUT}"
ROOT=$PWD
export FLASHREPRO_REQUIRE_GPU=1
ref=/tmp/gate-ref
[ -d $ref/src ] || { mkdir -p $ref && cp -a src $ref/src; }
judge() {  # $1: a results folder
  PYTHONPATH=$ROOT/src python3 -m flashrepro_harness gate --results "$1/reproduce.json" \
    --baseline-dir "$ROOT/reproduce/baselines" --summary "$1/verdict.md" \
    --verdict-json "$1/verdict.json" > "$1/judge.log" 2>&1
  local rc=$?
  echo "${1##*/}: judge exit $rc"
}
head_copy() {  # $1: name; a copy of src/ to change
  rm -rf "/tmp/gate-$1" && mkdir -p "/tmp/gate-$1" && cp -a src "/tmp/gate-$1/src"
  echo "/tmp/gate-$1"
}
reproduce() {  # $1: head folder, $2: results folder, rest: options
  local head=$1 out=$2; shift 2; mkdir -p "$out"
  (cd "$head" && PYTHONPATH="$head/src${PYTHONPATH:+:$PYTHONPATH}" python3 -m flashrepro_harness \
     reproduce --reference-src "$ref/src" --out "$out" "$@" > "$out/reproduce.log" 2>&1)
  local rc=$?
  echo "${out##*/}: reproduce exit $rc"
}
case "${1:-}" in
  slow)  # the slowdown alone
    slow=$(head_copy slow)
    python3 - "$slow/src/flashrepro/tuned.json" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))
table["sm90-d128-causal-l1024"]["tile_grid"] = True
json.dump(table, open(sys.argv[1], "w"), indent=1)
PY
    reproduce "$slow" "$OUT/slow" --no-sass --rounds 30
    judge "$OUT/slow" ;;
  aa)  # the full run (SASS table, mma.sync rows, FA4 where it imports): the committed results
    reproduce "$ROOT" "$OUT/aa" --gate
    judge "$OUT/aa" ;;
  faults)
    slow=$(head_copy slow)  # the persistent schedule off for the article's causal entry
    python3 - "$slow/src/flashrepro/tuned.json" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))
table["sm90-d128-causal-l1024"]["tile_grid"] = True
json.dump(table, open(sys.argv[1], "w"), indent=1)
PY
    reproduce "$slow" "$OUT/slow" --no-sass --rounds 30  # every row the baseline has
    judge "$OUT/slow"
    wrong=$(head_copy wrong)  # every kernel exponentiates in base e·log2(e)^-1: wrong softmax
    sed -i 's/^LOG2_E = .*/LOG2_E = 1.0/' "$wrong/src/flashrepro/kernels/__init__.py"
    reproduce "$wrong" "$OUT/wrong" --no-sass --rounds 30
    judge "$OUT/wrong"
    FLASHREPRO_TEST_WRONG_OUTPUT=0.01 reproduce "$ROOT" "$OUT/hook" --no-sass --rounds 30
    judge "$OUT/hook" ;;
  *) echo "usage: run.sh aa|faults" >&2; exit 2 ;;
esac
