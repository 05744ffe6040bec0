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
