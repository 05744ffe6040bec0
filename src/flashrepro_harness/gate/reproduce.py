"""``python -m flashrepro_harness reproduce``: the article run
(:mod:`flashrepro_harness.bench.reproduce`) with the gate's verdict for ``--gate`` and
``--update-baseline`` (:func:`flashrepro_harness.gate.check`,
:func:`flashrepro_harness.gate.update_baseline`).

The gate reads what the bench writes, so the bench module takes the verdict as a function
instead of importing the gate: the import graph stays one way (bench -> gate).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashrepro_harness.bench import reproduce as bench_reproduce
from flashrepro_harness.gate.check import Verdict, check, update_baseline
from flashrepro_harness.gate.stats import MIN_SAMPLES

add_arguments = bench_reproduce.add_arguments


def judge(results: dict, baseline_dir: Path, update: bool) -> Verdict:
    """The verdict on a ``reproduce`` results dict against ``baseline_dir``'s baseline of its
    GPU; with ``update``, the run appended as that baseline instead (docs/gate.md)."""
    return update_baseline(results, baseline_dir) if update else check(results, baseline_dir)


def run(args: argparse.Namespace) -> int:
    """Run ``reproduce`` (options: :func:`flashrepro_harness.bench.reproduce.add_arguments`);
    returns the exit code (the gate's on ``--gate``: 1 regression, 2 no baseline, 3 environment
    mismatch; 2 also for ``--gate``/``--update-baseline`` with fewer than the gate's
    :data:`~flashrepro_harness.gate.stats.MIN_SAMPLES` rounds, refused before anything is timed)."""
    if (args.gate or args.update_baseline) and args.rounds < MIN_SAMPLES:
        print(f"reproduce: --gate and --update-baseline need --rounds >= {MIN_SAMPLES} (the "
              f"gate's statistics take one sample per round), got {args.rounds}",
              file=sys.stderr)
        return 2
    return bench_reproduce.run(args, judge=judge)
