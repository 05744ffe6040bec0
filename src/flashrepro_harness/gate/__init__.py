"""The performance regression gate: a results JSON judged by its reference twins (the same
rows timed with a reference commit's code in the same rounds) or against a stored per-GPU
baseline.

Primary metric: for each flashrepro record, the per-round ratio of its time to its twin's, or
to torch SDPA's flash backend in the same interleaved round against the baseline's ratios. A
record regresses when its slowdown is above a threshold (2 % by default, at most 10 %) with
statistical significance (bootstrap interval above the threshold, and a one-sided Wilcoxon or
Mann-Whitney U test): :mod:`flashrepro_harness.gate.stats`. The gate fails closed: input it
cannot judge is refused, and a flashrepro row that did not run or a row whose output is over the
tolerance fails (:mod:`flashrepro_harness.gate.check`). Exit codes: :class:`ExitCode`. See
``docs/gate.md``.

Modules: ``refusals`` (exit codes, refusals), ``inputs`` (the rules of the files read),
``stats`` (decision rule), ``baseline`` (files, keys, environment matching), ``check``
(:func:`check`, :func:`update_baseline`, :class:`Verdict`), ``markdown`` (summary),
``simulate`` (synthetic runs, false-alarm and detection rates), ``inject`` and ``measure``
(GPU: the slowdown test hook and the experiment's measurement). The command lines are
``flashrepro_harness.commands.gate`` and ``flashrepro_harness.commands.reproduce``.
"""

from flashrepro_harness.gate.check import Settings, Verdict, check, update_baseline
from flashrepro_harness.gate.refusals import (
    BaselineError,
    ExitCode,
    ProblemMismatch,
    Refused,
    ResultsError,
)
from flashrepro_harness.gate.stats import Comparison, compare

__all__ = ["BaselineError", "Comparison", "ExitCode", "ProblemMismatch", "Refused",
           "ResultsError", "Settings", "Verdict", "check", "compare", "update_baseline"]
