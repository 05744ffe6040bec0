"""Host cost under the gate: each record's host and eager µs per call, shown, never gated.

``host_us`` and ``eager_us``: :func:`flashrepro_harness.bench.timing.host_and_eager_rounds`. Host
time moves with the CPU and its load, and a run gives one median, not per-round samples, so it
cannot carry the statistical rule. A record warns when its host µs is more than
:data:`WARN_FACTOR` times the baseline's **and** more than :data:`WARN_ABS_US` µs above it
(docs/gate.md, "Host cost").
"""

from __future__ import annotations

from typing import Any

WARN_FACTOR = 2.0
"""Warn when a record's host µs exceeds the baseline's by this factor (and by WARN_ABS_US)."""
WARN_ABS_US = 10.0
"""... and by at least this many µs."""
FIELDS = ("host_us", "eager_us")


def of_results(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{record: {"host_us": µs, "eager_us": µs}}`` of every timed record that has them."""
    return {rec["name"]: {f: float(rec[f]) for f in FIELDS}
            for rec in results.get("records", [])
            if not rec.get("skipped") and all(f in rec for f in FIELDS)}


def compare(results: dict[str, Any], baseline: dict[str, Any] | None
            ) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows (record, host_us, eager_us, baseline_host_us, baseline_eager_us: µs or None) for
    every record of ``results`` with host costs, and the warnings of the rule above.

    Args:
        results: a reproduce results dict.
        baseline: the stored baseline (its ``host_cost`` block, when it has one), or None.
    """
    stored = (baseline or {}).get("host_cost", {})
    rows, warnings = [], []
    for name, cur in of_results(results).items():
        base = stored.get(name, {})
        rows.append({"record": name, **cur,
                     **{f"baseline_{f}": base.get(f) for f in FIELDS}})
        b = base.get("host_us")
        if b is not None and cur["host_us"] > WARN_FACTOR * b and cur["host_us"] - b > WARN_ABS_US:
            warnings.append(f"{name}: host {cur['host_us']:.1f} µs per call against the "
                            f"baseline's {b:.1f} (more than {WARN_FACTOR:g}x and "
                            f"{WARN_ABS_US:g} µs above it; host cost is shown, not gated)")
    return rows, warnings


def rule() -> str:
    """The warning rule in one sentence."""
    return (f"host µs per call are not gated; a record warns when its host µs exceeds the "
            f"baseline's by more than {WARN_FACTOR:g}x and by more than {WARN_ABS_US:g} µs")
