"""One full SASS report per test process, shared by tests/test_sass.py and tests/test_model.py.

Compiling every variant for every target takes a minute on a CI runner, so the report is built
once (real compiles, in clean worker processes, as ``python -m flashrepro_harness sass`` does).
"""

from __future__ import annotations

import functools
from typing import Any

from flashrepro_harness.analysis.sass import sass_report


@functools.cache
def full_report() -> dict[str, Any]:
    """``sass_report()`` for every target, with the installed torch (CPU build: rows skipped)."""
    return sass_report()


def rows(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every (target, row) of a report."""
    return [(t, row) for t, block in report["targets"].items() for row in block["rows"]]
