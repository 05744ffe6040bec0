"""Smoke test of the installed harness: the wheel with the ``harness`` extra in a fresh venv,
run outside the checkout.

Run by ``nox -s wheel`` from a temporary folder after tests/smoke_wheel.py, as
``python smoke_wheel_harness.py --results R --baseline-dir B`` with copies of the committed
``reproduce/results/nvidia-h200/reproduce.json`` and ``reproduce/baselines/``. Each command runs
as a user types it (the venv's ``flashrepro`` script, in a fresh process, without a GPU and
without ``TRITON_INTERPRET``). It shows that

1. flashrepro_harness is imported from the installed package and finds no checkout;
2. ``flashrepro --help`` and ``python -m flashrepro_harness --help`` answer in under 1 s
   (the fastest of three runs) without importing torch;
3. ``flashrepro sass`` compiles every target and matches the packaged golden file (exit 0);
4. ``flashrepro reproduce`` on a CPU prints the SASS table (exit 0);
5. ``flashrepro gate --results R --baseline-dir B`` judges the committed results (exit 0);
6. the commands that need a checkout say what is missing without a traceback:
   ``readme --check`` names README.md and ``--readme`` (exit 4), and ``gate`` on a results
   file without reference twins names the missing baselines folder and ``--baseline-dir``
   (exit 4: the gate fails closed).

Exit 0 and one line per check on success; an AssertionError otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ENV = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}


def flashrepro(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """``flashrepro ARGS`` (the venv's console script) in a fresh process."""
    return subprocess.run([str(BIN / "flashrepro"), *args], capture_output=True, text=True,
                          env=ENV, timeout=timeout)


def _show(run: subprocess.CompletedProcess[str]) -> str:
    return f"exit {run.returncode}\nstdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-3000:]}"


def check_installed() -> None:
    import flashrepro_harness
    from flashrepro_harness.paths import CHECKOUT

    where = Path(flashrepro_harness.__file__).resolve()
    assert "site-packages" in where.parts, f"flashrepro_harness imported from {where}"
    assert CHECKOUT is None, f"found a checkout at {CHECKOUT} from {Path.cwd()}"
    print(f"installed: flashrepro_harness at {where.parent}, no checkout")


def check_help() -> None:
    for argv in ([str(BIN / "flashrepro"), "--help"],
                 [sys.executable, "-m", "flashrepro_harness", "--help"]):
        seconds = []
        for _ in range(3):
            start = time.perf_counter()
            run = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=60)
            seconds.append(time.perf_counter() - start)
            assert run.returncode == 0 and "sass" in run.stdout, _show(run)
        assert min(seconds) < 1.0, f"{' '.join(argv)}: {seconds} s"
        print(f"help: {Path(argv[0]).name} {' '.join(argv[1:])}: {min(seconds):.2f} s")
    probe = ("import sys\nfrom flashrepro_harness.cli import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'triton', 'scipy'}))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=ENV,
                         timeout=60)
    assert run.returncode == 0 and run.stdout.splitlines()[-1] == "[]", _show(run)
    print("help: imports no torch, triton or scipy")


def check_sass() -> None:
    run = flashrepro("sass")
    assert run.returncode == 0, _show(run)
    assert "every count matches" in run.stdout, _show(run)
    print(f"sass: exit 0, {run.stdout.strip().splitlines()[-1]}")


def check_reproduce() -> None:
    run = flashrepro("reproduce")
    assert run.returncode == 0, _show(run)
    assert "timing needs a CUDA GPU" in run.stdout and "SASS static counts" in run.stdout, \
        _show(run)
    assert "Traceback" not in run.stderr, _show(run)
    print("reproduce: exit 0 without a GPU, the SASS table printed")


def check_gate(results: Path, baseline_dir: Path) -> None:
    run = flashrepro("gate", "--results", str(results), "--baseline-dir", str(baseline_dir))
    assert run.returncode == 0 and "performance gate: PASS" in run.stdout, _show(run)
    print(f"gate: {results.name} against {baseline_dir}: PASS, exit 0")


def check_needs_checkout(results: Path) -> None:
    run = flashrepro("readme", "--check")
    missing = Path.cwd() / "README.md"
    assert run.returncode == 4, _show(run)
    assert f"--readme: no such file: {missing}" in run.stderr and "Traceback" not in run.stderr, \
        _show(run)
    print(f"readme outside a checkout: exit 4, {run.stderr.splitlines()[0]}")
    data = json.loads(results.read_text())  # without its twins the gate needs the baseline
    data["records"] = [r for r in data["records"] if not r["name"].startswith("reference:")]
    data.pop("reference", None)
    unpaired = Path.cwd() / "unpaired.json"
    unpaired.write_text(json.dumps(data))
    run = flashrepro("gate", "--results", str(unpaired))
    folder = Path.cwd() / "reproduce" / "baselines"
    assert run.returncode == 4 and f"--baseline-dir {folder}: no such folder" in run.stderr, \
        _show(run)
    assert "Traceback" not in run.stderr, _show(run)
    print("gate outside a checkout, no --baseline-dir: exit 4, names the folder and the option")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--baseline-dir", type=Path, required=True)
    args = parser.parse_args()
    check_installed()
    check_help()
    check_needs_checkout(args.results)
    check_gate(args.results, args.baseline_dir)
    check_sass()
    check_reproduce()
    print("smoke_wheel_harness: ok")
