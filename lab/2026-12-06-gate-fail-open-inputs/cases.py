"""Results files the gate must not pass, made from the committed H200 run, and the gate's exit
code on each: python cases.py SRC OUT (SRC: the src folder whose gate judges; OUT: a folder for
the files). Prints one line per case: name, exit code, expected codes."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "reproduce/results/nvidia-h200/reproduce.json"
BASELINES = ROOT / "reproduce/baselines"
REAL_COMMIT = "e404b4e"  # the committed run's commit (env.git_commit)
CASES: dict[str, tuple[Callable[[dict], None], set[int], list[str]]] = {}


def case(expected: set[int], *options: str):
    def add(fn: Callable[[dict], None]) -> Callable[[dict], None]:
        CASES[fn.__name__] = (fn, expected, list(options))
        return fn
    return add


def rows(d: dict) -> dict[str, dict]:
    return {r["name"]: r for r in d["records"]}


def unpair(d: dict) -> None:
    d.pop("reference", None)
    d["records"] = [r for r in d["records"] if not r["name"].startswith("reference:")]


@case({0}, "--expect-commit", REAL_COMMIT)
def committed_run_as_is(d: dict) -> None:
    pass


@case({4}, "--expect-commit", "1234567")
def committed_run_replayed_for_another_commit(d: dict) -> None:
    pass


@case({4})
def negative_max_abs_err(d: dict) -> None:
    rows(d)["flashrepro"]["max_abs_err"] = -1.0


@case({4})
def minus_inf_max_abs_err(d: dict) -> None:
    rows(d)["flashrepro"]["max_abs_err"] = -math.inf


@case({4})
def int_beyond_float_host_us(d: dict) -> None:
    rows(d)["flashrepro"]["host_us"] = 10**400


@case({2})
def unpaired_row_the_baseline_lacks_10x_slower(d: dict) -> None:
    unpair(d)
    new = copy.deepcopy(rows(d)["flashrepro"])
    new["name"] = "flashrepro-new"
    new["round_medians_us"] = [x * 10 for x in new["round_medians_us"]]
    d["records"].append(new)


@case({3})
def no_method_block(d: dict) -> None:
    unpair(d)
    d.pop("method")


@case({5})
def other_gpu_paired_rows_dropped(d: dict) -> None:
    d["env"]["gpu"].update(name="NVIDIA H200 NVL", key="nvidia-h200-nvl")
    keep = {"flashrepro", "torch-flash", "reference:flashrepro"}
    d["records"] = [r for r in d["records"] if r["name"] in keep]


def _few_noisy_rounds(d: dict, rounds: int, noisy: int) -> None:
    """Paired, cut to ``rounds``; each row 3x its twin except in ``noisy`` rounds (0.99x)."""
    for r in d["records"]:
        r["round_medians_us"] = r["round_medians_us"][:rounds]
    by = rows(d)
    for name, twin in by.items():
        if name.startswith("reference:"):
            by[name.removeprefix("reference:")]["round_medians_us"] = [
                x * (0.99 if i < noisy else 3.0) for i, x in enumerate(twin["round_medians_us"])]


@case({1, 7})
def three_x_slower_6_rounds_one_noisy(d: dict) -> None:
    _few_noisy_rounds(d, 6, 1)


@case({1, 7})
def three_x_slower_7_rounds_two_noisy(d: dict) -> None:
    _few_noisy_rounds(d, 7, 2)


@case({4}, "SYMLINK")
def results_behind_a_symbolic_link(d: dict) -> None:
    pass


def main() -> int:
    src, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    real = json.loads(RESULTS.read_text())
    real.pop("gate", None)
    wrong = 0
    for name, (mutate, expected, options) in CASES.items():
        d = copy.deepcopy(real)
        mutate(d)
        path = out / f"{name}.json"
        path.write_text(json.dumps(d))
        if options == ["SYMLINK"]:
            link = out / f"{name}.link.json"
            link.unlink(missing_ok=True)
            link.symlink_to(path)
            path, options = link, []
        rc = subprocess.run([sys.executable, "-m", "flashrepro_harness", "gate", "--results",
                             str(path), "--baseline-dir", str(BASELINES), *options],
                            env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True,
                            timeout=300).returncode
        ok = rc in expected
        wrong += not ok
        print(f"{name:48} exit {rc}  expected {sorted(expected)}  {'ok' if ok else 'WRONG'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
