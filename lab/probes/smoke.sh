# Sourced by the lab's shell scripts (`source lab/probes/smoke.sh`, from the repository root):
# the shell side of the smoke knob of lab/probes/smoke.py. Under FLASHREPRO_LAB_SMOKE=1 the
# arrays below hold the flashrepro CLI's smallest settings, appended after a command's own
# options (argparse keeps the last one), pytest keeps its first two tests
# (lab/probes/smoke_pytest.py) and `lab_pick FULL SMOKE` prints SMOKE; otherwise the arrays are
# empty and `lab_pick` prints FULL, so the scripts run what the experiment ran.
case "${FLASHREPRO_LAB_SMOKE:-0}" in
  0 | "") LAB_SMOKE=0 ;;
  1) LAB_SMOKE=1 ;;
  *) echo "FLASHREPRO_LAB_SMOKE must be 0 or 1 (or unset), got '$FLASHREPRO_LAB_SMOKE'" >&2; exit 2 ;;
esac
if [[ $LAB_SMOKE == 1 ]]; then
  TUNE_SMOKE=(--rounds 1 --calls 2 --lengths 1024 --head-dims 64)
  BENCH_SMOKE=(--rounds 1 --calls 2 --lengths 1024 --head-dims 64 --dtypes float16)
  # reproduce keeps the baseline's 10 calls per round: the gate refuses a run of other calls
  REPRODUCE_SMOKE=(--rounds 5 --calls 10)
  MODEL_SMOKE=(--layers 2 --rounds 1 --calls 1 --lengths 1024 --no-short --modes eager)
  export PYTEST_ADDOPTS="-p lab.probes.smoke_pytest${PYTEST_ADDOPTS:+ $PYTEST_ADDOPTS}"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # lab.probes for pytest's workers
else
  TUNE_SMOKE=(); BENCH_SMOKE=(); REPRODUCE_SMOKE=(); MODEL_SMOKE=()
fi
lab_pick() { if [[ $LAB_SMOKE == 1 ]]; then echo "$2"; else echo "$1"; fi; }
# The scripts that tuned the table or made a baseline write into the product only when asked:
# FLASHREPRO_LAB_WRITE=1 gives `tune` its --write back (never under smoke); otherwise the
# table is ranked, printed and left as it is, and baselines go under $OUT.
if [[ ${FLASHREPRO_LAB_WRITE:-0} == 1 && $LAB_SMOKE == 0 ]]; then TUNE_WRITE=(--write); else TUNE_WRITE=(); fi
