"""Where results JSON files live and what schema they carry: shared by the writers
(:mod:`flashrepro_harness.bench.reproduce`, :mod:`flashrepro_harness.bench.sweep`) and the reader
(:mod:`flashrepro_harness.gate.baseline`), below both in the import graph.

The format is documented in ``docs/gate.md`` (results and baselines).
"""

from __future__ import annotations

import os
from pathlib import Path

from flashrepro_harness.paths import checkout_path

RESULTS_SCHEMA = "flashrepro.results/1"
"""The ``schema`` field of every results JSON (``reproduce.json``, ``bench.json``)."""
COMPLETE = "complete"
"""Top-level key that ``reproduce`` sets to true once every row is timed and checked, just
before it writes the file; the gate refuses a results file without it."""
PRODUCT_RECORDS = ("flashrepro", "flashrepro-article-config", "article-kernel",
                   "flashrepro-p-in-registers")
"""This project's rows (the product): the gate judges them, and one that cannot run is a
failure, never a skip. Any other row named ``flashrepro...`` is one too (:func:`is_product`);
torch's backends and the optional peers are the comparison and may be skipped."""
SUFFIXES = (" (non-causal)", " (mma.sync)")
"""Record-name suffixes: the article problem without its mask, and the DISABLE_MMA_V3=1 child."""
OUTPUT_TOLERANCE = {"float16": 5e-3, "bfloat16": 4e-2}
"""Largest max |o - ref| a timed row may have on the article problem, per dtype; ``ref`` is
float32 attention on the same inputs (``reproduce``'s output check, every element).

Source: the parity rule of ``tests/reference.py`` (max error at most 2x torch SDPA's + a floor
of 1e-3 for float16, 8e-3 for bfloat16), with SDPA's error taken at its worst on these inputs:
the rounding of an output to the dtype, half a unit in the last place of |o| < 8 (o is a
convex combination of rows of v, which is standard normal): 2 x 2^-9 + 1e-3 = 4.9e-3 for
float16, 2 x 2^-6 + 8e-3 = 0.039 for bfloat16. Measured on the H200 (4c4fe2c): 1.1e-3 for every
causal row, 1.8e-4 without the mask."""


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
"""Prefix of a reference record's name in a results JSON: ``reference:flashrepro`` is the
``flashrepro`` row timed with a reference checkout's code in the same rounds
(:mod:`flashrepro_harness.bench.reference`); the gate pairs the two (docs/gate.md)."""


def baseline_dir() -> Path:
    """The root of the per-GPU baselines when ``--baseline-dir`` is not given:
    $FLASHREPRO_BASELINE_DIR, else reproduce/baselines (a run that makes its own baseline on the
    machine that is then gated points both commands there)."""
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
