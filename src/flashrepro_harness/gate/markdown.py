"""The gate's verdict as markdown: headline, what got slower, all comparisons, drift, notes.

Written to ``--summary PATH`` and appended to ``$GITHUB_STEP_SUMMARY`` by the CLI; also what the
CLI prints. Tables are rendered by :mod:`tabulate` (GitHub format).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tabulate import tabulate

from flashrepro_harness.gate import host
from flashrepro_harness.gate.baseline import REFERENCE_RECORD

if TYPE_CHECKING:
    from flashrepro_harness.gate.check import Verdict
    from flashrepro_harness.gate.stats import Comparison

HEADLINES = {
    "pass": "PASS",
    "regression": "REGRESSION",
    "no-baseline": "NO BASELINE",
    "env-mismatch": "ENVIRONMENT MISMATCH",
    "kernel-failure": "KERNEL FAILURE",
    "inconclusive": "INCONCLUSIVE",
    "baseline-updated": "BASELINE UPDATED",
}


def _value(c: Comparison, v: float) -> str:
    return f"{v:.4f}" if c.metric == "ratio" else f"{v:.2f} µs"


def _metric(c: Comparison) -> str:
    return {"ratio": f"ratio to {REFERENCE_RECORD}", "paired": "time / reference's, paired"
            }.get(c.metric, "time (µs)")


def _verdict_text(c: Comparison) -> str:
    if c.slower:
        return "**REGRESSION**" if c.metric in ("ratio", "paired") else "slower (warning only)"
    if c.inconclusive:  # not shown within the threshold: not a pass where it decides
        return ("**inconclusive** (CI reaches above the threshold)"
                if c.metric in ("ratio", "paired") else "inconclusive (warning only)")
    return "ok"


def _row(c: Comparison, full: bool) -> list[str]:
    row = [c.record, _metric(c), _value(c, c.baseline_median), _value(c, c.current_median),
           f"{c.change:+.2%}", f"[{c.ci_low:+.2%}, {c.ci_high:+.2%}]", f"{c.p_value:.2g}",
           f"{c.n_baseline}/{c.n_current}"]
    return [*row, f"{c.threshold:+.1%}", _verdict_text(c)] if full else row


HEAD = ["record", "metric", "baseline median", "current median", "change", "CI of change",
        "p", "rounds (base/cur)"]
"""p: one-sided Mann-Whitney U against a committed baseline, Wilcoxon signed-rank for a
paired reference (:mod:`flashrepro_harness.gate.stats`)."""


def comparison_table(comparisons: list[Comparison], full: bool = True) -> str:
    """A GitHub-markdown table of comparisons (with threshold and verdict when ``full``); for
    paired comparisons alone the baseline column is the reference twin's."""
    head = [*HEAD, "threshold", "verdict"] if full else list(HEAD)
    if comparisons and all(c.metric == "paired" for c in comparisons):
        head[2] = "reference median"
    return tabulate([_row(c, full) for c in comparisons], headers=head, tablefmt="github",
                    disable_numparse=True)


def _no_baseline(v: Verdict) -> list[str]:
    results = v.results_path or "<results JSON>"
    return [f"No baseline for GPU `{v.gpu_key}` and problem `{v.problem_key}` "
            f"(looked for `{v.shown_baseline}`).", "",
            "Create one from this run, check it, and commit it:", "", "```bash",
            f"python -m flashrepro_harness gate --results {results} --update-baseline", "```"]


def _mismatch(v: Verdict) -> list[str]:
    rows = [[d.field, str(d.baseline), str(d.current)] for d in v.env_differences]
    results = v.results_path or "<results JSON>"
    return ["This run's environment differs from the baseline's, so its timings were **not** "
            "compared:", "",
            tabulate(rows, headers=["field", "baseline", "current"], tablefmt="github",
                     disable_numparse=True), "",
            "Compare anyway (with a warning): add `--allow-env-mismatch`. Accept the new "
            "environment (the baseline's history keeps the old entries):", "", "```bash",
            f"python -m flashrepro_harness gate --results {results} --update-baseline", "```"]


def _failures(v: Verdict) -> list[str]:
    rows = [[f["record"], f["rule"], f["detail"]] for f in v.failures]
    return ["**What failed** (nothing was compared: a failed or wrong kernel is never timed "
            "into a pass)", "",
            tabulate(rows, headers=["record", "rule", "found"], tablefmt="github",
                     disable_numparse=True)]


def _drift(v: Verdict) -> list[str]:
    if not v.drift:
        return []
    d0 = v.drift[0]
    parts = ", ".join(f"{d['record']} {d['change']:+.2%} ({d['then_median_ratio']:.4f} -> "
                      f"{d['now_median_ratio']:.4f})" for d in v.drift)
    return ["", f"**Drift** of the median ratio to {REFERENCE_RECORD} since the oldest baseline "
            f"entry ({d0['since_date']}, commit `{(d0['since_commit'] or 'unknown')[:12]}`, "
            f"{d0['history_entries']} entries): {parts}."]


def _paired(v: Verdict) -> list[str]:
    if not v.paired:
        return []
    ref = v.reference or {}
    return [f"**Paired with the reference** (commit `{(ref.get('commit') or 'unknown')[:12]}`, "
            f"`{ref.get('src', '?')}`: the same rows timed with its code in the same rounds; "
            "\"reference median\": the twin's µs)", "", comparison_table(v.paired), ""]


def _opt_us(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def host_table(v: Verdict) -> list[str]:
    """The host-cost section (:mod:`flashrepro_harness.gate.host`): empty when no record has one."""
    if not v.host_cost:
        return []
    rows = [[r["record"], _opt_us(r["host_us"]), _opt_us(r["baseline_host_us"]),
             _opt_us(r["eager_us"]), _opt_us(r["baseline_eager_us"])] for r in v.host_cost]
    return ["", "**Host cost per call** (information, not gated)", "",
            tabulate(rows, headers=["record", "host µs", "baseline host µs", "eager µs",
                                    "baseline eager µs"], tablefmt="github",
                     disable_numparse=True), "", f"Host rule: {host.rule()}."]


def render(v: Verdict) -> str:
    """The whole summary of a verdict, markdown."""
    lines = [f"### flashrepro performance gate: {HEADLINES[v.status]} (exit {int(v.exit_code)})",
             "", f"GPU `{v.gpu_key}`, problem `{v.problem_key}`, baseline `{v.shown_baseline}`"
             + (f" (commit `{(v.baseline_commit or 'unknown')[:12]}`, {v.baseline_date})"
                if v.baseline_date else "") + ".", ""]
    if v.status == "kernel-failure":
        lines += _failures(v)
    elif v.status == "no-baseline" and not v.comparisons and not v.paired:
        lines += _no_baseline(v)
    elif v.status == "env-mismatch":
        lines += _mismatch(v)
    elif v.status == "baseline-updated" and not v.comparisons and not v.against_baseline:
        lines += ["This run is now the baseline, the first entry of its history. Commit "
                  f"`{v.shown_baseline}`."]
    else:
        if v.status == "baseline-updated":
            lines += ["This run is now the baseline (commit the file). Its comparison with the "
                      "previous baseline, for information:", ""]
        if v.regressions:
            lines += ["**What got slower**", "", comparison_table(v.regressions, full=False), ""]
        lines += _paired(v)
        if v.comparisons or v.secondary:
            lines += ["**Against the committed baseline**", "",
                      comparison_table(v.comparisons + v.secondary)]
        if v.against_baseline:
            lines += ["", "Records judged by the paired reference, against the committed "
                      "baseline (information; failing only beyond the threshold plus "
                      "gate.check.BASELINE_BACKSTOP, in the baseline's environment):", "",
                      comparison_table(v.against_baseline)]
        lines += _drift(v)
        lines += ["", f"Rule: {v.settings.rule()}."]
    lines += host_table(v)
    if v.warnings:
        lines += ["", "**Warnings**", "", *(f"- {w}" for w in v.warnings)]
    return "\n".join(lines) + "\n"
