"""Run the gate: compare a results dict with its baseline and return a :class:`Verdict`.

:func:`check` is what ``python -m flashrepro_harness gate`` and ``reproduce --gate`` call;
:func:`update_baseline` is ``--update-baseline``. Neither measures anything: both read the
results dict (see ``DESIGN.md``, "Results JSON").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

from flashrepro_harness.gate import baseline as bl
from flashrepro_harness.gate import host
from flashrepro_harness.gate.stats import (
    DEFAULT_ABS_THRESHOLD,
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_THRESHOLD,
    Comparison,
    compare,
    compare_paired,
)

FEW_ROUNDS = 20
"""Below this many rounds the gate warns that only large slowdowns can be caught."""


class ExitCode(IntEnum):
    """Process exit codes of ``python -m flashrepro_harness gate``."""

    PASS = 0
    REGRESSION = 1
    NO_BASELINE = 2
    ENV_MISMATCH = 3
    BAD_INPUT = 4


@dataclass(frozen=True)
class Settings:
    """Gate settings; stored in a baseline, and used for it unless overridden.

    Attributes:
        threshold: tolerated slowdown of the primary metric (per-round ratio to torch-flash).
        abs_threshold: slowdown of absolute µs above which the gate warns (never fails).
        confidence: two-sided level of the bootstrap intervals; Mann-Whitney one-sided level
            is ``(1 - confidence) / 2``.
        n_resamples: bootstrap resamples.
    """

    threshold: float = DEFAULT_THRESHOLD
    abs_threshold: float = DEFAULT_ABS_THRESHOLD
    confidence: float = DEFAULT_CONFIDENCE
    n_resamples: int = DEFAULT_RESAMPLES

    def rule(self) -> str:
        """The decision rule in one sentence, with these settings."""
        return (f"a record regresses when its per-round time ratio to {bl.REFERENCE_RECORD} is "
                f"slower than the baseline's by more than {self.threshold:.1%}: the lower bound "
                f"of the {self.confidence:.0%} bootstrap interval of the change in median is "
                f"above {self.threshold:.1%} and a one-sided Mann-Whitney U test (current > "
                f"baseline x {1 + self.threshold:g}) gives p < {(1 - self.confidence) / 2:g}; "
                f"absolute µs slower by more than {self.abs_threshold:.0%} by the same rule "
                "is only a warning. A record timed beside a reference twin (reproduce "
                "--reference-src) is judged by its per-round time ratio to the twin instead: "
                f"the lower bound of the bootstrap interval of its median minus 1 above "
                f"{self.threshold:.1%} and a one-sided Wilcoxon signed-rank test (ratio > "
                f"{1 + self.threshold:g}) at p < {(1 - self.confidence) / 2:g}; its comparison "
                "with the baseline is then shown, not gated")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the rule's text (stored in baselines)."""
        return {**asdict(self), "rule": self.rule()}


@dataclass
class Verdict:
    """The gate's answer for one results dict.

    Attributes:
        status: ``pass``, ``regression``, ``no-baseline``, ``env-mismatch`` or
            ``baseline-updated``.
        exit_code: the process exit code (:class:`ExitCode`).
        baseline_path: where the baseline is (or would be).
        gpu_key, problem_key: the baseline's keys.
        settings: the settings used.
        comparisons: primary metric (per-round ratio to torch-flash, against the committed
            baseline) of each flashrepro record that has no reference twin.
        paired: the paired comparison of each flashrepro record with its reference twin
            (``reproduce --reference-src``), which decides for that record.
        against_baseline: the committed-baseline comparison of the records judged by
            ``paired``: shown, and warned about when slower, never failing.
        reference: the reference checkout (``src``, ``commit``), when the run had one.
        secondary: absolute µs of each record, torch-flash included (warnings only).
        env_differences: what differs from the baseline's environment.
        warnings: anything the reader should know (e.g. environment compared anyway).
        drift: per record, the current median ratio against the oldest history entry.
        host_cost: per record, host and eager µs per call, with the baseline's where stored
            (:func:`flashrepro_harness.gate.host.compare`; shown, never gated).
        baseline_commit, baseline_date: of the baseline's samples.
        results_path: the results file, for the messages (may be None).
    """

    status: str
    exit_code: int
    baseline_path: Path
    gpu_key: str
    problem_key: str
    settings: Settings
    comparisons: list[Comparison] = field(default_factory=list)
    paired: list[Comparison] = field(default_factory=list)
    against_baseline: list[Comparison] = field(default_factory=list)
    reference: dict[str, Any] | None = None
    secondary: list[Comparison] = field(default_factory=list)
    env_differences: list[bl.EnvDifference] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    drift: list[dict[str, Any]] = field(default_factory=list)
    host_cost: list[dict[str, Any]] = field(default_factory=list)
    baseline_commit: str | None = None
    baseline_date: str | None = None
    results_path: str | None = None

    @property
    def regressions(self) -> list[Comparison]:
        """The deciding comparisons flagged slower (paired ones and the committed
        baseline's)."""
        return [c for c in [*self.paired, *self.comparisons] if c.slower]

    @property
    def markdown(self) -> str:
        """The verdict, tables and notes as GitHub-flavoured markdown (for the job summary)."""
        from flashrepro_harness.gate.markdown import render
        return render(self)

    @property
    def shown_baseline(self) -> str:
        """The baseline's path as results and summaries show it (:func:`flashrepro_harness.env.
        shown_path`)."""
        from flashrepro_harness.env import shown_path
        return shown_path(self.baseline_path)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, stored under ``"gate"`` in the results JSON."""
        return {
            "status": self.status, "exit_code": int(self.exit_code),
            "baseline": self.shown_baseline, "gpu_key": self.gpu_key,
            "problem_key": self.problem_key, "baseline_commit": self.baseline_commit,
            "baseline_date": self.baseline_date, "settings": self.settings.as_dict(),
            "comparisons": [c.as_dict() for c in self.comparisons],
            "paired": [c.as_dict() for c in self.paired],
            "against_baseline": [c.as_dict() for c in self.against_baseline],
            "reference": self.reference,
            "secondary": [c.as_dict() for c in self.secondary],
            "env_differences": [asdict(d) for d in self.env_differences],
            "warnings": list(self.warnings), "drift": list(self.drift),
            "host_cost": list(self.host_cost),
        }


def _settings(stored: dict[str, Any] | None, threshold: float | None,
              abs_threshold: float | None, confidence: float | None) -> Settings:
    """Explicit arguments first, then the baseline's stored settings, then the defaults."""
    stored = stored or {}
    default = Settings()

    def pick(name: str, value: float | None) -> Any:
        return value if value is not None else stored.get(name, getattr(default, name))

    return Settings(threshold=pick("threshold", threshold),
                    abs_threshold=pick("abs_threshold", abs_threshold),
                    confidence=pick("confidence", confidence),
                    n_resamples=int(stored.get("n_resamples", default.n_resamples)))


def _fields(diffs: list[bl.EnvDifference]) -> str:
    return ", ".join(f"{d.field}: {d.baseline} -> {d.current}" for d in diffs)


def _drift(base: dict[str, Any], samples: dict[str, dict[str, list[float]]]
           ) -> list[dict[str, Any]]:
    if not base.get("history"):
        return []
    oldest = base["history"][0]
    out = []
    for name, s in samples.items():
        then = oldest.get("median_ratio", {}).get(name)
        if "ratio" in s and then:
            now = float(np.median(s["ratio"]))
            out.append({"record": name, "since_date": oldest.get("date"),
                        "since_commit": oldest.get("git_commit"),
                        "history_entries": len(base["history"]),
                        "then_median_ratio": then, "now_median_ratio": now,
                        "change": now / then - 1.0})
    return out


def _compare_all(samples: dict[str, dict[str, list[float]]], base: dict[str, Any],
                 st: Settings) -> tuple[list[Comparison], list[Comparison], list[str]]:
    primary: list[Comparison] = []
    secondary: list[Comparison] = []
    warnings: list[str] = []
    stored = base["records"]
    for name, s in samples.items():
        if name not in stored:
            warnings.append(f"record {name!r} has no baseline samples: not judged (re-create "
                            "the baseline with --update-baseline to include it)")
            continue
        if "ratio" in s:
            primary.append(compare(s["ratio"], stored[name]["round_ratios"], record=name,
                                   metric="ratio", threshold=st.threshold,
                                   confidence=st.confidence, n_resamples=st.n_resamples))
        secondary.append(compare(s["us"], stored[name]["round_medians_us"], record=name,
                                 metric="us", threshold=st.abs_threshold,
                                 confidence=st.confidence, n_resamples=st.n_resamples))
    for name in stored:
        if name not in samples:
            warnings.append(f"the baseline has record {name!r} but this run does not")
    rounds = min(len(s["us"]) for s in samples.values())
    if rounds < FEW_ROUNDS:
        warnings.append(f"only {rounds} rounds: the gate can catch only large slowdowns; "
                        f"use at least {FEW_ROUNDS} (100 recommended, see docs/gate.md)")
    for c in secondary:
        if c.slower:
            warnings.append(f"{c.record}: absolute time {c.change:+.1%} (CI {c.ci_low:+.1%} to "
                            f"{c.ci_high:+.1%}) above the {c.threshold:.0%} warning level; "
                            "the ratio to torch-flash is the gated metric (clocks, power or a "
                            "busy machine move absolute µs)")
    return primary, secondary, warnings


def check(results: dict[str, Any], baseline_dir: Path, *, threshold: float | None = None,
          abs_threshold: float | None = None, confidence: float | None = None,
          allow_env_mismatch: bool = False, results_path: str | None = None,
          env_note: str = "the environment differs from the baseline's; compared anyway "
                          "because of --allow-env-mismatch") -> Verdict:
    """Compare a results dict with its stored baseline.

    Args:
        results: a results dict (``reproduce.json``'s content) with ``env`` (GPU included),
            ``problem``, ``method`` and ``records`` holding ``torch-flash`` and at least one
            flashrepro record, each with ``round_medians_us`` (µs) over the same rounds.
        baseline_dir: root of the baselines (``reproduce/baselines``).
        threshold: tolerated slowdown of the ratio to torch-flash, in [0, 1); None: the
            baseline's stored value, else :data:`~flashrepro_harness.gate.stats.DEFAULT_THRESHOLD`.
        abs_threshold: warning level for absolute µs; None as above.
        confidence: two-sided bootstrap level; None as above.
        allow_env_mismatch: compare even when the environment differs (with a warning).
        results_path: path of the results file, used in the messages only.
        env_note: the warning given when the environment differs and is compared anyway.

    Returns:
        A :class:`Verdict`; ``verdict.exit_code`` is 0 pass, 1 regression, 2 no baseline,
        3 environment mismatch.

    Raises:
        flashrepro_harness.gate.baseline.ResultsError: ``results`` lacks a GPU, the problem, the
            torch-flash record or every flashrepro record, or rounds differ between records.
        ValueError: a baseline file of another schema, or fewer than 5 rounds.
    """
    samples = bl.round_samples(results)
    path = bl.baseline_path(baseline_dir, results)
    base = bl.load(path)
    st = _settings(base.get("gate") if base else None, threshold, abs_threshold, confidence)
    verdict = Verdict(status="no-baseline", exit_code=ExitCode.NO_BASELINE, baseline_path=path,
                      gpu_key=bl.fingerprint(results["env"])["gpu_key"],
                      problem_key=bl.problem_key(results["problem"]), settings=st,
                      results_path=results_path, reference=results.get("reference"))
    injected = {n: i.get("fraction") for n, i in results.get("injection", {}).items()}
    if injected:
        verdict.warnings.append(f"this run has an injected slowdown (test hook "
                                f"FLASHREPRO_INJECT_SLOWDOWN): {injected}")
    if (results.get("reference") or {}).get("error"):
        verdict.warnings.append(f"the reference checkout did not load "
                                f"({results['reference']['error']}): no record is paired, every "
                                "one is judged against the committed baseline")
    paired = [n for n, s in samples.items() if "paired" in s]
    verdict.paired = [compare_paired(samples[n]["us"], samples[n]["reference_us"], record=n,
                                     threshold=st.threshold, confidence=st.confidence,
                                     n_resamples=st.n_resamples) for n in paired]
    verdict.host_cost, host_warnings = host.compare(results, base)
    if base is None:
        if paired:
            verdict.warnings.append("no committed baseline for this GPU and problem: judged "
                                    "by the paired reference alone")
        return _decide(verdict)
    verdict.warnings.extend(host_warnings)
    verdict.baseline_commit = base["env"].get("git_commit")
    verdict.baseline_date = base["env"].get("date")
    verdict.env_differences = bl.differences(base, results)
    if verdict.env_differences and not allow_env_mismatch:
        if not paired:
            verdict.status, verdict.exit_code = "env-mismatch", ExitCode.ENV_MISMATCH
            return verdict
        verdict.warnings.append("the environment differs from the committed baseline's ("
                                f"{_fields(verdict.env_differences)}): only the paired "
                                "comparisons were judged")
        return _decide(verdict)
    if verdict.env_differences:
        verdict.warnings.append(f"{env_note} ({_fields(verdict.env_differences)})")
    primary, secondary, warnings = _compare_all(samples, base, st)
    # A record with a reference twin is judged by the pair; its comparison with the committed
    # baseline is kept for the reader (drift over many commits), never failing.
    verdict.comparisons = [c for c in primary if c.record not in paired]
    verdict.against_baseline = [c for c in primary if c.record in paired]
    verdict.secondary = secondary
    verdict.warnings.extend(warnings)
    verdict.warnings.extend(
        f"{c.record}: {c.change:+.1%} against the committed baseline (CI {c.ci_low:+.1%} to "
        f"{c.ci_high:+.1%}), above the {c.threshold:.0%} threshold; not failing: the paired "
        "reference decides, but the baseline may be due for --update-baseline"
        for c in verdict.against_baseline if c.slower)
    verdict.drift = _drift(base, samples)
    if not primary and not paired:
        verdict.warnings.append("no flashrepro record is in both this run and the baseline")
    return _decide(verdict)


def _decide(verdict: Verdict) -> Verdict:
    """Status and exit code from the deciding comparisons (paired, and the committed
    baseline's for records without a twin); none: the verdict stays "no-baseline"."""
    if not verdict.paired and not verdict.comparisons:
        return verdict
    regressed = bool(verdict.regressions)
    verdict.status = "regression" if regressed else "pass"
    verdict.exit_code = ExitCode.REGRESSION if regressed else ExitCode.PASS
    return verdict


def _refuse_injected(results: dict[str, Any]) -> None:
    slowed = [n for n, i in results.get("injection", {}).items() if i.get("fraction", 0) > 0]
    if slowed:
        raise bl.ResultsError(f"records {slowed} were slowed by the test hook "
                              "FLASHREPRO_INJECT_SLOWDOWN; such a run cannot be a baseline")


def update_baseline(results: dict[str, Any] | list[dict[str, Any]], baseline_dir: Path, *,
                    threshold: float | None = None, abs_threshold: float | None = None,
                    confidence: float | None = None, results_path: str | None = None
                    ) -> Verdict:
    """Make ``results`` the baseline for its GPU and problem; append it to the history.

    ``results`` may be a list of runs of one environment (best: each in its own process),
    pooled by :func:`flashrepro_harness.gate.baseline.pool` into one baseline.

    The previous baseline's history is kept unchanged and one entry (date, git commit,
    software, median ratio and µs per record) is appended. When a previous baseline exists,
    the returned verdict carries the comparison with it (for information; any environment
    difference is listed). Settings are the arguments, else the previous baseline's, else the
    defaults, and are stored in the new baseline.

    Returns:
        A :class:`Verdict` with status ``baseline-updated`` and exit code 0.

    Raises:
        As :func:`check`; also :class:`~flashrepro_harness.gate.baseline.ResultsError` for a run
        with an injected slowdown above 0 (``FLASHREPRO_INJECT_SLOWDOWN``), never a baseline, and
        for runs that cannot be pooled.
    """
    runs = results if isinstance(results, list) else [results]
    for run in runs:
        _refuse_injected(run)
    results = runs[0] if len(runs) == 1 else bl.pool(runs)
    previous_verdict = check(results, baseline_dir, threshold=threshold,
                             abs_threshold=abs_threshold, confidence=confidence,
                             allow_env_mismatch=True, results_path=results_path,
                             env_note="the new baseline's environment differs from the "
                                      "previous one's")
    path = previous_verdict.baseline_path
    new = bl.build(results, bl.load(path), previous_verdict.settings.as_dict())
    bl.write(path, new)
    previous_verdict.status, previous_verdict.exit_code = "baseline-updated", ExitCode.PASS
    return previous_verdict
