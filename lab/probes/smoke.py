"""The lab's smoke knob: ``FLASHREPRO_LAB_SMOKE=1`` makes the probes and the experiments'
scripts run their smallest settings (3 rounds, 2 calls per round, the first problem, the first
parity config on two cases), so each rerun command of a ``lab/*/README.md`` can be shown to run
end to end in seconds (``scripts/lab_rerun.py --run``). Unset or ``0``: the settings the
experiment measured with. Shell scripts get the same knob from ``lab/probes/smoke.sh``, pytest
runs from ``lab/probes/smoke_pytest.py``.

Smoke numbers are not measurements: too few rounds for the statistic the README reports.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

ENV = "FLASHREPRO_LAB_SMOKE"
ROUNDS, CALLS, ITEMS = 3, 2, 1
"""Smoke settings: rounds of interleaved timing, calls per round, items kept of a list."""

T = TypeVar("T")


def enabled() -> bool:
    """Whether :data:`ENV` asks for smoke settings. Raises ``ValueError`` (naming the variable)
    for a value other than unset, empty, ``0`` or ``1``: a typo must not run the full probe."""
    value = os.environ.get(ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{ENV} must be 0 or 1 (or unset), got {value!r}")
    return value == "1"


def rounds(full: int) -> int:
    """``full`` rounds, or at most :data:`ROUNDS` under smoke."""
    return min(full, ROUNDS) if enabled() else full


def calls(full: int) -> int:
    """``full`` calls per round, or at most :data:`CALLS` under smoke."""
    return min(full, CALLS) if enabled() else full


def first(items: Sequence[T], keep: int = ITEMS) -> list[T]:
    """All of ``items``, or the first ``keep`` under smoke (problems, configs, cases)."""
    return list(items)[:keep] if enabled() else list(items)


def interleaved_rounds(fns: dict[str, Callable[[], object]], rounds: int,
                       calls_per_round: int, **kwargs) -> dict[str, list[float]]:
    """:func:`flashrepro.bench.timing.interleaved_rounds` (per-round medians, µs, per name)
    with ``rounds`` and ``calls_per_round`` cut to :data:`ROUNDS` and :data:`CALLS` under
    smoke; the probes time through this."""
    from flashrepro.bench import timing

    return timing.interleaved_rounds(fns, rounds=globals()["rounds"](rounds),
                                     calls_per_round=calls(calls_per_round), **kwargs)
