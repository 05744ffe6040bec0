"""The gate's exit codes and refusals: input it will not judge raises an exception carrying its
exit code and naming the file and the rule (docs/gate.md, "Exit codes and refusals")."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of ``gate`` and ``reproduce --gate``."""

    PASS = 0
    REGRESSION = 1
    NO_BASELINE = 2
    ENV_MISMATCH = 3
    BAD_INPUT = 4
    KERNEL_FAILURE = 5
    PROBLEM_MISMATCH = 6
    INCONCLUSIVE = 7


class Refused(ValueError):
    """Input the gate will not judge; ``exit_code`` is what the process exits with."""

    exit_code: ExitCode = ExitCode.BAD_INPUT


class ResultsError(Refused):
    """A results JSON the gate cannot use (names the file, the part and the rule)."""


class BaselineError(Refused):
    """A baseline file or folder the gate cannot use, or cannot write."""


class ProblemMismatch(Refused):
    """Results of another problem than the judge's own article problem."""

    exit_code = ExitCode.PROBLEM_MISMATCH
