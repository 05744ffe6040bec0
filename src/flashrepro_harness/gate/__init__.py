"""The performance regression gate (docs/gate.md): a results JSON judged by its reference twins
(the same rows timed with a reference commit's code in the same rounds) or against a stored
per-GPU baseline.

A record regresses when its per-round time ratio (to its twin, else to torch SDPA's flash backend
against the baseline's ratios) is slower by more than a threshold (2 % by default, at most 10 %)
with significance (:mod:`~flashrepro_harness.gate.stats`). The gate fails closed
(:mod:`~flashrepro_harness.gate.check`); exit codes: :class:`ExitCode`. Command lines:
``flashrepro_harness.commands.gate`` and ``flashrepro_harness.commands.reproduce``.
"""

from flashrepro_harness.gate.check import (
    Settings,
    Verdict,
    check,
    check_provenance,
    update_baseline,
)
from flashrepro_harness.gate.refusals import (
    BaselineError,
    ExitCode,
    ProblemMismatch,
    Refused,
    ResultsError,
)
from flashrepro_harness.gate.stats import Comparison, compare

__all__ = ["BaselineError", "Comparison", "ExitCode", "ProblemMismatch", "Refused",
           "ResultsError", "Settings", "Verdict", "check", "check_provenance", "compare",
           "update_baseline"]
