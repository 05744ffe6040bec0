"""``python -m flashrepro reproduce``: the article run (:mod:`flashrepro.bench.reproduce`) with
the gate's verdict for ``--gate`` and ``--update-baseline`` (:func:`flashrepro.gate.check`,
:func:`flashrepro.gate.update_baseline`).

The gate reads what the bench writes, so the bench module takes the verdict as a function
instead of importing the gate: the import graph stays one way (bench -> gate).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flashrepro.bench import reproduce as bench_reproduce
from flashrepro.gate.check import Verdict, check, update_baseline

add_arguments = bench_reproduce.add_arguments


def judge(results: dict, baseline_dir: Path, update: bool) -> Verdict:
    """The verdict on a ``reproduce`` results dict against ``baseline_dir``'s baseline of its
    GPU; with ``update``, the run appended as that baseline instead (docs/gate.md)."""
    return update_baseline(results, baseline_dir) if update else check(results, baseline_dir)


def run(args: argparse.Namespace) -> int:
    """Run ``reproduce`` (options: :func:`flashrepro.bench.reproduce.add_arguments`); returns
    the exit code (the gate's on ``--gate``: 1 regression, 2 no baseline, 3 environment
    mismatch)."""
    return bench_reproduce.run(args, judge=judge)
