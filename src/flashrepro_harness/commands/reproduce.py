"""``python -m flashrepro_harness reproduce``: the article run
(:mod:`flashrepro_harness.bench.reproduce`), judged by the gate with ``--gate`` or made the
baseline with ``--update-baseline`` (:mod:`flashrepro_harness.gate`), then written.

Exit codes: the gate's (:class:`flashrepro_harness.gate.ExitCode`, docs/gate.md) with
``--gate``; 0 for a plain run, or 5 when a flashrepro row failed or a row's output is over its
tolerance; 1 when the timings are needed and there is no GPU; 2 for options refused before
anything runs (``--rounds`` below the gate's minimum, a bad ``--reference-src``). The results
files are written only at the end, each atomically; an earlier run's are deleted before the
timing starts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flashrepro_harness.env import positive_int
from flashrepro_harness.outputs import output_dir
from flashrepro_harness.results import baseline_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=positive_int, default=100,
                        help="interleaved rounds (default 100, as the gate experiment; --gate "
                             "needs at least 6)")
    parser.add_argument("--calls", type=positive_int, default=10,
                        help="timed calls per kernel per round (default 10)")
    parser.add_argument("--out", type=output_dir, default=None,
                        help="results folder (default $FLASHREPRO_RESULTS_DIR or "
                             "reproduce/results/<gpu-key>)")
    parser.add_argument("--no-mma-sync", action="store_true",
                        help="skip the DISABLE_MMA_V3=1 (mma.sync path) rows on sm_90")
    parser.add_argument("--no-sass", action="store_true", help="skip the SASS table")
    parser.add_argument("--gate", action="store_true",
                        help="judge the run: rows with a --reference-src twin by their ratio "
                             "to it, the others against reproduce/baselines/<gpu>/ (exit 0 "
                             "pass, 1 regression, 2 no baseline, 3 environment mismatch, "
                             "4 unusable input, 5 kernel failure, 6 another problem, "
                             "7 inconclusive; docs/gate.md)")
    parser.add_argument("--update-baseline", action="store_true",
                        help="make this run the baseline of its GPU (appends to its history)")
    parser.add_argument("--baseline-dir", type=Path, default=baseline_dir(),
                        help="folder of per-GPU baselines for --gate (an existing folder) and "
                             "--update-baseline (default $FLASHREPRO_BASELINE_DIR or "
                             "reproduce/baselines)")
    parser.add_argument("--reference-src", type=Path, default=None, metavar="DIR",
                        help="the src folder of another flashrepro checkout (a PR's base, a "
                             "push's parent): its flashrepro rows are timed beside this one's "
                             "in the same rounds, and --gate judges the pair (docs/gate.md)")
    parser.add_argument("--child-json", type=Path, default=None, help=argparse.SUPPRESS)


def _refused_up_front(args: argparse.Namespace) -> int | None:
    """The exit code of options the gate would refuse after minutes of timing, else None."""
    from flashrepro_harness.gate.refusals import ExitCode
    from flashrepro_harness.gate.stats import min_rounds

    if args.child_json is not None or not (args.gate or args.update_baseline):
        return None
    need = min_rounds()
    if args.rounds < need:
        print(f"reproduce: --gate and --update-baseline need --rounds >= {need}: at fewer "
              "rounds the one-sided Wilcoxon signed-rank test cannot reject at its 2.5 % level "
              f"(its smallest p is 2^-rounds; gate.stats.min_rounds), got {args.rounds}",
              file=sys.stderr)
        return 2
    if args.gate and not args.baseline_dir.is_dir():
        print(f"reproduce: --baseline-dir {args.baseline_dir}: no such folder (missing or "
              "misspelled?); --gate reads the baselines there", file=sys.stderr)
        return ExitCode.BAD_INPUT
    return None


def _judge(args: argparse.Namespace, results: dict[str, Any], path: Path) -> tuple[int, str]:
    """The gate's exit code and markdown for the run's ``results`` (to be written to
    ``path``); the verdict, or the refusal, is stored under ``"gate"``. Without ``--gate`` or
    ``--update-baseline``: the kernel failures alone (exit 5 if any)."""
    from flashrepro_harness.gate.check import check, kernel_failures, update_baseline
    from flashrepro_harness.gate.refusals import ExitCode, Refused

    if not (args.gate or args.update_baseline):
        failures = kernel_failures(results)
        for f in failures:
            print(f"reproduce: {f['record']}: {f['detail']} (rule: {f['rule']})",
                  file=sys.stderr)
        return (ExitCode.KERNEL_FAILURE if failures else ExitCode.PASS), ""
    try:
        if args.update_baseline:
            verdict = update_baseline(results, args.baseline_dir, results_path=str(path))
        else:
            verdict = check(results, args.baseline_dir, results_path=str(path))
    except Refused as exc:
        results["gate"] = {"status": "refused", "exit_code": int(exc.exit_code),
                           "reason": str(exc)}
        print(f"reproduce: the gate refused the run: {exc} (exit {int(exc.exit_code)})",
              file=sys.stderr)
        return exc.exit_code, (f"### flashrepro performance gate: REFUSED (exit "
                               f"{int(exc.exit_code)})\n\n{exc}\n")
    results["gate"] = verdict.as_dict()
    print(verdict.markdown)
    return int(verdict.exit_code), verdict.markdown


def run(args: argparse.Namespace) -> int:
    """Run ``reproduce`` (options: :func:`add_arguments`); returns the exit code (module
    docstring)."""
    from flashrepro_harness.bench import reproduce as bench
    from flashrepro_harness.bench.impls import KernelFailed
    from flashrepro_harness.gate.refusals import ExitCode

    if (code := _refused_up_front(args)) is not None:
        return code
    try:
        outcome = bench.run(args, needs_timings=args.gate or args.update_baseline)
    except KernelFailed as exc:
        print(f"reproduce: {exc}; nothing written (a flashrepro row that cannot run fails the "
              "run, never a skip)", file=sys.stderr)
        return ExitCode.KERNEL_FAILURE
    if isinstance(outcome, int):
        return outcome
    path = outcome.out_dir / "reproduce.json"
    code, verdict = _judge(args, outcome.results, path)
    summary = outcome.markdown + ("\n" + verdict + "\n" if verdict else "")
    try:
        bench.write_results(outcome.out_dir, outcome.results, summary,
                            markdown=outcome.markdown)
    except OSError as exc:
        print(f"reproduce: cannot write the results under {outcome.out_dir}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    print(f"wrote reproduce.json, reproduce.md and summary.md under {outcome.out_dir}")
    return code
