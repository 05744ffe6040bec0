"""What the gate reads as a number (:mod:`~flashrepro_harness.gate.inputs`,
:mod:`~flashrepro_harness.gate.plausible`)."""

from __future__ import annotations

from typing import Any

MAX_INT = 2**53
"""Largest magnitude of an int the gate reads as a number: it is used as a float64 (exact up to
2^53), and a longer one overflows the conversion."""


def is_number(value: Any) -> bool:
    """An int of magnitude at most :data:`MAX_INT`, or a float (a bool is neither here)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, float) or (isinstance(value, int) and abs(value) <= MAX_INT)
