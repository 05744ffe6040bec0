"""Where results JSON files live and what schema they carry, for their writers (bench) and
reader (gate). Format: docs/design.md, "File formats".
"""

from __future__ import annotations

import os
from pathlib import Path

from flashrepro_harness.paths import checkout_path

RESULTS_SCHEMA = "flashrepro.results/1"
"""The ``schema`` field of every results JSON (``reproduce.json``, ``bench.json``)."""
COMPLETE = "complete"
"""Top-level key ``reproduce`` sets to true once every row is timed and checked; the gate refuses
a results file without it."""
PRODUCT_RECORDS = ("flashrepro", "flashrepro-article-config", "article-kernel",
                   "flashrepro-p-in-registers")
"""This project's rows: the gate judges them, and one that cannot run fails, never skips (any row
named ``flashrepro...`` too: :func:`is_product`)."""
NON_CAUSAL, MMA_SYNC = " (non-causal)", " (mma.sync)"
SUFFIXES = (NON_CAUSAL, MMA_SYNC)
"""Record-name suffixes: the article problem without its mask, and the DISABLE_MMA_V3=1 child."""
OUTPUT_TOLERANCE = {"float16": 5e-3, "bfloat16": 4e-2}
"""Largest max |o - ref| over every element a timed row may have on the article problem, per
dtype; ``ref`` is float32 attention on the same inputs.

Source: the parity rule of ``tests/reference.py`` (at most 2x torch SDPA's error + a floor of
1e-3 for float16, 8e-3 for bfloat16), with SDPA's error at its worst here, half a unit in the
last place of |o| < 8 (o is a convex combination of standard-normal rows of v):
2 x 2^-9 + 1e-3 = 4.9e-3 for float16, 2 x 2^-6 + 8e-3 = 0.039 for bfloat16."""


def split_name(name: str) -> tuple[str, str]:
    """``"flashrepro (mma.sync)"`` -> ``("flashrepro", " (mma.sync)")``; a name without one of
    :data:`SUFFIXES` has the suffix ``""``."""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def is_product(name: str) -> bool:
    """Whether record ``name`` (suffix included) is one of this project's rows: a
    :data:`PRODUCT_RECORDS` name or any name starting with ``flashrepro``; a reference twin
    (``reference:...``) is not."""
    base = split_name(name)[0]
    return base in PRODUCT_RECORDS or base.startswith("flashrepro")


def output_tolerance(dtype: str) -> float:
    """:data:`OUTPUT_TOLERANCE` of ``dtype`` (``"float16"``, ``"bfloat16"``).

    Raises:
        ValueError: another dtype (no tolerance stated for it).
    """
    if dtype not in OUTPUT_TOLERANCE:
        raise ValueError(f"dtype must be one of {sorted(OUTPUT_TOLERANCE)} (the output "
                         f"tolerance is stated for those), got {dtype!r}")
    return OUTPUT_TOLERANCE[dtype]
RESULTS_DIR = checkout_path("reproduce", "results")
BASELINE_DIR = checkout_path("reproduce", "baselines")
REFERENCE_PREFIX = "reference:"
"""Prefix of a reference twin's name: ``reference:flashrepro`` is the ``flashrepro`` row timed
with a reference checkout's code in the same rounds (docs/gate.md)."""


def baseline_dir() -> Path:
    """The root of the per-GPU baselines without ``--baseline-dir``:
    $FLASHREPRO_BASELINE_DIR, else reproduce/baselines."""
    if os.environ.get("FLASHREPRO_BASELINE_DIR"):
        return Path(os.environ["FLASHREPRO_BASELINE_DIR"])
    return BASELINE_DIR


def results_dir(out: Path | None, gpu_key: str) -> Path:
    """Where results go: ``--out``, else $FLASHREPRO_RESULTS_DIR, else reproduce/results/<gpu>."""
    if out is not None:
        return out
    if os.environ.get("FLASHREPRO_RESULTS_DIR"):
        return Path(os.environ["FLASHREPRO_RESULTS_DIR"])
    return RESULTS_DIR / gpu_key


def same_commit(recorded: object, expected: str) -> bool:
    """Whether a recorded commit names ``expected``: one a prefix of the other, each at least 7
    hex digits (the image records the full hash, a summary a short one)."""
    if not isinstance(recorded, str) or len(recorded) < 7:
        return False
    a, b = recorded.lower(), expected.lower()
    return a.startswith(b) or b.startswith(a)
