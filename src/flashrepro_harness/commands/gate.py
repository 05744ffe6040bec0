"""``python -m flashrepro_harness gate``: judge a results JSON by its reference twins, else
against its per-GPU baseline (:mod:`flashrepro_harness.gate`).

Exit codes (:class:`flashrepro_harness.gate.ExitCode`): 0 pass, 1 regression, 2 no baseline
(or a usage error), 3 environment mismatch, 4 unusable input, 5 kernel failure, 6 another
problem than this checkout's article problem, 7 inconclusive; every refusal names the file and
the rule (docs/gate.md). The verdict is printed, written to ``--summary`` and appended to
``$GITHUB_STEP_SUMMARY`` when set, and written as JSON to ``--verdict-json`` when given. The
results files are only read: a checker does not modify its input (``reproduce --gate`` stores
the verdict in the ``reproduce.json`` it writes itself).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from flashrepro_harness.outputs import OutputError, output_file, write_text
from flashrepro_harness.results import baseline_dir

if TYPE_CHECKING:
    from flashrepro_harness.gate.check import Verdict

MAX_THRESHOLD = 0.10
"""As :data:`flashrepro_harness.gate.stats.MAX_THRESHOLD` (kept here so ``--help`` does not
import the statistics; tests/test_gate.py checks they agree)."""
MIN_CONFIDENCE, MAX_CONFIDENCE = 0.95, 0.99
"""As :data:`flashrepro_harness.gate.stats.MIN_CONFIDENCE` and ``MAX_CONFIDENCE``."""


def _fraction(name: str, low: float, high: float, closed_low: bool, closed_high: bool = False):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        ok = ((low <= value if closed_low else low < value)
              and (value <= high if closed_high else value < high))
        if not ok:
            lo, hi = "[" if closed_low else "(", "]" if closed_high else ")"
            raise argparse.ArgumentTypeError(
                f"{name} must be in {lo}{low:g}, {high:g}{hi}, got {value:g}")
        return value
    return parse


def _commit(value: str) -> str:
    """A commit hash of 7 to 40 hex digits (argparse type)."""
    if not re.fullmatch(r"[0-9a-fA-F]{7,40}", value):
        raise argparse.ArgumentTypeError(f"must be a commit hash of 7 to 40 hex digits, got "
                                         f"{value!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, required=True, nargs="+",
                        help="results JSON of a reproduce run "
                             "(reproduce/results/<gpu-key>/reproduce.json); with "
                             "--update-baseline, several runs (each its own process) are pooled "
                             "into one baseline. Only read, never modified (the verdict goes to "
                             "--verdict-json)")
    parser.add_argument("--baseline-dir", type=Path, default=baseline_dir(),
                        help="root of the per-GPU baselines, an existing folder (default: "
                             "$FLASHREPRO_BASELINE_DIR or reproduce/baselines)")
    parser.add_argument("--update-baseline", action="store_true",
                        help="make this run the baseline (history kept and appended); exit 0")
    parser.add_argument("--threshold",
                        type=_fraction("--threshold", 0, MAX_THRESHOLD, True, True),
                        default=None,
                        help="tolerated slowdown of the ratio to torch-flash (to the reference "
                             "twin for paired rows), e.g. 0.02 = 2%%, at most "
                             f"{MAX_THRESHOLD:g} (default: the baseline's stored value, else "
                             "0.02)")
    parser.add_argument("--abs-threshold", type=_fraction("--abs-threshold", 0, 1, True),
                        default=None, help="warn when absolute µs are slower by more than this "
                                           "(default: the baseline's, else 0.10)")
    parser.add_argument("--confidence",
                        type=_fraction("--confidence", MIN_CONFIDENCE, MAX_CONFIDENCE, True,
                                       True),
                        default=None, help="two-sided bootstrap confidence, in "
                                           f"[{MIN_CONFIDENCE:g}, {MAX_CONFIDENCE:g}] "
                                           "(default: the baseline's, else 0.95)")
    parser.add_argument("--allow-env-mismatch", action="store_true",
                        help="compare even when driver/CUDA/torch/triton/image differ (warns)")
    parser.add_argument("--expect-commit", type=_commit, default=None, metavar="SHA",
                        help="refuse (exit 4) results whose env.git_commit is not this commit "
                             "(the one the job measured): a stale or copied file is never "
                             "judged as this run's")
    parser.add_argument("--expect-reference-commit", type=_commit, default=None,
                        metavar="SHA",
                        help="refuse (exit 4) results not paired with this reference commit")
    parser.add_argument("--summary", type=output_file, default=None,
                        help="write the verdict as markdown to this file (missing folders are "
                             "created)")
    parser.add_argument("--verdict-json", type=output_file, default=None,
                        help="write the verdict as JSON to this file (what reproduce --gate "
                             "stores under \"gate\" in its reproduce.json)")


def publish(verdict: Verdict, summary: Path | None = None) -> None:
    """Print the verdict's markdown, write it to ``summary`` (when given) and append it to
    ``$GITHUB_STEP_SUMMARY`` (when set, and not ``summary`` itself). Storing
    ``verdict.as_dict()`` under ``"gate"`` in a results JSON is the part of the command that
    writes that file (``reproduce --gate``); ``gate`` never modifies its input.

    Raises:
        OutputError: ``summary`` cannot be written.
        OSError: ``$GITHUB_STEP_SUMMARY`` cannot be appended to.
    """
    from flashrepro_harness.report import write_summary

    print(verdict.markdown)
    if summary is not None:  # first, for an error that names --summary
        write_text("--summary", summary, verdict.markdown)
    write_summary(verdict.markdown, summary)


def _output_over_input(args: argparse.Namespace, inputs: list[Path]) -> str | None:
    """The first output (``--summary``, ``--verdict-json``, ``$GITHUB_STEP_SUMMARY``) that is
    one of ``inputs`` (the same path, or the same file through a link), named as its option;
    None when none is."""
    def same(a: Path, b: Path) -> bool:
        try:
            return os.path.samefile(a, b)
        except OSError:  # one of them does not exist (yet)
            return a.resolve() == b.resolve()

    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    for name, path in (("--summary", args.summary), ("--verdict-json", args.verdict_json),
                       ("$GITHUB_STEP_SUMMARY", Path(summary) if summary else None)):
        if path is not None and any(same(path, p) for p in inputs):
            return f"{name} {path}"
    return None


def run(args: argparse.Namespace) -> int:
    from flashrepro_harness.gate.check import check, update_baseline
    from flashrepro_harness.gate.inputs import read_json
    from flashrepro_harness.gate.refusals import ExitCode, Refused

    paths = args.results
    if len(paths) > 1 and not args.update_baseline:
        print("gate: several --results files are pooled only with --update-baseline; judge one "
              "run at a time", file=sys.stderr)
        return ExitCode.BAD_INPUT
    clash = _output_over_input(args, paths)
    if clash:
        print(f"gate: {clash} is also a --results file: the gate never writes its input "
              "(give the verdict another file)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    names = " ".join(str(p) for p in paths)
    kwargs = {"threshold": args.threshold, "abs_threshold": args.abs_threshold,
              "confidence": args.confidence, "results_path": names}
    try:
        runs = [read_json(path, f"--results {path}") for path in paths]
        if args.update_baseline:
            verdict = update_baseline(runs, args.baseline_dir, **kwargs)
        else:
            verdict = check(runs[0], args.baseline_dir,
                            allow_env_mismatch=args.allow_env_mismatch,
                            expect_commit=args.expect_commit,
                            expect_reference_commit=args.expect_reference_commit, **kwargs)
    except Refused as exc:
        print(f"gate: {exc} (exit {int(exc.exit_code)})", file=sys.stderr)
        return exc.exit_code
    clash = _output_over_input(args, [verdict.baseline_path])
    if clash:
        print(f"gate: {clash} is the baseline file: the verdict goes to another file",
              file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        publish(verdict, args.summary)
        if args.verdict_json is not None:
            write_text("--verdict-json", args.verdict_json,
                       json.dumps(verdict.as_dict(), indent=1) + "\n")
    except OutputError as exc:
        print(f"gate: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except OSError as exc:
        print(f"gate: $GITHUB_STEP_SUMMARY: cannot append the verdict: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    return int(verdict.exit_code)
