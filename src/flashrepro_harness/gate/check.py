"""Judge a results dict against its twins and baseline: :func:`check` (``gate``, ``reproduce
--gate``) and :func:`update_baseline` (``--update-baseline``). Neither measures anything.

The gate fails closed: before any timing is compared, input it will not judge is refused
(malformed files, another problem than the checkout's article, settings past the caps, too few
rounds, a missing baseline folder, a paired row without its twin), and failed kernels fail
(:func:`kernel_failures`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flashrepro_harness.gate import baseline as bl
from flashrepro_harness.gate import host
from flashrepro_harness.gate.inputs import check_results
from flashrepro_harness.gate.numbers import is_number
from flashrepro_harness.gate.plausible import check_floor
from flashrepro_harness.gate.refusals import (
    BaselineError,
    ExitCode,
    ProblemMismatch,
    Refused,
    ResultsError,
)
from flashrepro_harness.gate.stats import (
    DEFAULT_ABS_THRESHOLD,
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_THRESHOLD,
    MAX_CONFIDENCE,
    MAX_THRESHOLD,
    MIN_CONFIDENCE,
    RESAMPLES_RANGE,
    Comparison,
    compare,
    compare_paired,
    min_rounds,
)
from flashrepro_harness.paths import ARTICLE_TOML
from flashrepro_harness.problem import load_article
from flashrepro_harness.results import (
    MMA_SYNC,
    NON_CAUSAL,
    REFERENCE_PREFIX,
    is_product,
    output_tolerance,
    same_commit,
    split_name,
)

__all__ = ["ExitCode", "Settings", "Verdict", "check", "check_provenance", "kernel_failures",
           "update_baseline"]

FEW_ROUNDS = 20
"""Below this many rounds the gate warns that only large slowdowns can be caught."""
MAX_DENOMINATOR_DRIFT = 2.0
"""The most torch-flash's median µs may move from its baseline's, either way, before the run is
refused: the primary metric divides by it, so a run whose torch-flash is timed wrongly (a timer
that caught the busy-wait, a throttled GPU) would move every ratio with it. A new torch, driver
or clock moves it by far less."""
BASELINE_BACKSTOP = 0.04
"""A paired row also regresses when, in the baseline's environment, its ratio to torch-flash
is slower than the baseline's by more than the threshold plus this much: the largest offset of
one machine from the baseline measured on the H200 is 3.2 % (docs/gate.md), and a row whose
twin was timed as slow as itself (a forged or broken reference) is caught here."""
REQUIRED_ROWS = tuple(f"{name}{suffix}" for suffix in ("", NON_CAUSAL)
                      for name in ("flashrepro", "flashrepro-article-config", "article-kernel"))
"""The flashrepro rows every ``reproduce`` run of a causal problem times on any GPU (the
``(non-causal)`` ones only there: :func:`required_rows`): a run judged without a baseline
(which would name its rows) must have them."""


MMA_SYNC_ROWS = tuple(f"{name}{MMA_SYNC}" for name in (
    "flashrepro", "flashrepro-article-config", "article-kernel", "flashrepro-p-in-registers"))
"""The rows of reproduce's ``DISABLE_MMA_V3=1`` child, timed on every Hopper GPU (compute
capability 9.x: ``flashrepro.configs.MMA_V3_ARCHS``)."""


def required_rows(problem: dict[str, Any], gpu: dict[str, Any] | None = None
                  ) -> tuple[str, ...]:
    """The flashrepro rows every reproduce run of ``problem`` on ``gpu`` (a results'
    ``env.gpu``) times: :data:`REQUIRED_ROWS` (the non-causal twins only for a causal
    problem), and on a Hopper GPU :data:`MMA_SYNC_ROWS` (``bench.reproduce``)."""
    rows = REQUIRED_ROWS if problem.get("causal") else tuple(
        n for n in REQUIRED_ROWS if not n.endswith(NON_CAUSAL))
    if str((gpu or {}).get("capability", "")).startswith("9."):
        rows += MMA_SYNC_ROWS
    return rows


@dataclass(frozen=True)
class Settings:
    """Gate settings; stored in a baseline, and used for it unless overridden.

    ``threshold``: tolerated slowdown of the primary metric; ``abs_threshold``: slowdown of
    absolute µs that warns; ``confidence``: two-sided level (:mod:`~flashrepro_harness.gate.
    stats`).
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
                "with the baseline is then shown, and fails only beyond the threshold plus "
                f"{BASELINE_BACKSTOP:.0%}, in the baseline's environment")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the rule's text (stored in baselines)."""
        return {**asdict(self), "rule": self.rule()}


@dataclass
class Verdict:
    """The gate's answer for one results dict.

    Attributes:
        status: ``pass``, ``regression``, ``no-baseline``, ``env-mismatch``,
            ``kernel-failure``, ``inconclusive`` or ``baseline-updated``; ``exit_code``: its
            :class:`ExitCode`.
        comparisons: ratio to torch-flash against the baseline, per record without a twin.
        paired: per record with a reference twin, the comparison that decides it.
        against_baseline: the baseline comparison of the paired records (shown).
        backstop: the same at the threshold plus :data:`BASELINE_BACKSTOP`, in the baseline's
            environment only; a flagged one is a regression.
        secondary: absolute µs per record (warnings only).
        drift: per record, the median ratio against the oldest history entry.
        failures: :func:`kernel_failures`; any makes the status ``kernel-failure``, and
            nothing is compared.
        host_cost: :func:`flashrepro_harness.gate.host.compare`'s rows (never gated).
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
    backstop: list[Comparison] = field(default_factory=list)
    reference: dict[str, Any] | None = None
    secondary: list[Comparison] = field(default_factory=list)
    env_differences: list[bl.EnvDifference] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    drift: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)
    host_cost: list[dict[str, Any]] = field(default_factory=list)
    baseline_commit: str | None = None
    baseline_date: str | None = None
    results_path: str | None = None

    @property
    def regressions(self) -> list[Comparison]:
        """The deciding comparisons (paired, the baseline's, the backstop's) flagged slower."""
        return [c for c in [*self.paired, *self.comparisons, *self.backstop] if c.slower]

    @property
    def markdown(self) -> str:
        """The verdict, tables and notes as GitHub-flavoured markdown (for the job summary)."""
        from flashrepro_harness.gate.markdown import render
        return render(self)

    @property
    def shown_baseline(self) -> str:
        """The baseline's path as results and summaries show it."""
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
            "backstop": [c.as_dict() for c in self.backstop],
            "reference": self.reference,
            "secondary": [c.as_dict() for c in self.secondary],
            "env_differences": [asdict(d) for d in self.env_differences],
            "warnings": list(self.warnings), "drift": list(self.drift),
            "failures": list(self.failures), "host_cost": list(self.host_cost),
        }


SETTING_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "threshold": (lambda v: is_number(v) and 0 <= v <= MAX_THRESHOLD,
                  f"a number in [0, {MAX_THRESHOLD:g}] (gate.stats.MAX_THRESHOLD)"),
    "abs_threshold": (lambda v: is_number(v) and 0 <= v < 1, "a number in [0, 1)"),
    "confidence": (lambda v: is_number(v) and MIN_CONFIDENCE <= v <= MAX_CONFIDENCE,
                   f"a number in [{MIN_CONFIDENCE:g}, {MAX_CONFIDENCE:g}] "
                   "(gate.stats.MIN_CONFIDENCE, MAX_CONFIDENCE)"),
    "n_resamples": (lambda v: isinstance(v, int) and not isinstance(v, bool)
                    and RESAMPLES_RANGE[0] <= v <= RESAMPLES_RANGE[1],
                    f"an int in [{RESAMPLES_RANGE[0]}, {RESAMPLES_RANGE[1]}]"),
}
"""What each gate setting may be, wherever it comes from (a baseline or the caller)."""


def _settings(stored: dict[str, Any] | None, given: dict[str, float | None],
              source: str) -> tuple[Settings, list[str]]:
    """Arguments, else the baseline's stored settings, else the defaults, each checked against
    :data:`SETTING_RULES`; with a note for every stored value that is not the default.

    Raises:
        BaselineError: a stored setting breaks its rule (``source`` names the baseline).
        Refused: an argument breaks its rule.
    """
    stored = stored or {}
    default = Settings()
    values, notes = {}, []
    for name, (ok, rule) in SETTING_RULES.items():
        if given.get(name) is not None:
            value, origin = given[name], None
        elif name in stored:
            value, origin = stored[name], source
        else:
            value, origin = getattr(default, name), None
        if not ok(value):
            error = BaselineError if origin else Refused
            raise error(f"{origin or 'argument'}: gate setting {name} = {value!r} must be {rule}")
        if origin and value != getattr(default, name):
            notes.append(f"gate setting {name} = {value:g} read from the {origin} (default "
                         f"{getattr(default, name):g})")
        values[name] = value
    return Settings(**values), notes


def _check_problem(results: dict[str, Any], label: str) -> None:
    """Refuse results of another problem than this checkout's article problem (an edited
    article.toml must not pick its own baseline).

    Raises:
        ProblemMismatch: a field of :data:`~flashrepro_harness.gate.baseline.PROBLEM_FIELDS`
            differs (exit 6).
    """
    own = load_article()[0].as_dict()
    got = results["problem"]
    diff = [f"{f} {got.get(f)!r} (article: {own[f]!r})" for f in bl.PROBLEM_FIELDS
            if got.get(f) != own[f]]
    if diff:
        raise ProblemMismatch(f"{label}: the results' problem is not the article problem of "
                              f"the checkout judging it ({ARTICLE_TOML.name}): "
                              f"{', '.join(diff)}; only that problem is judged")


def _check_method(results: dict[str, Any], label: str) -> None:
    """Refuse results that do not say how they were timed: ``method`` with
    :data:`~flashrepro_harness.gate.baseline.METHOD_FIELDS` (the timer and the L2 flush as
    non-empty strings, the calls per round an int >= 1, the busy-wait's cycles an int >= 0),
    which the baseline's are compared with (a paired run without a baseline is judged only
    if it states them).

    Raises:
        ResultsError: a field missing or of another type (exit 4).
    """
    method = results.get("method") or {}
    least_int = {"calls_per_round": 1, "busy_wait_cycles": 0}  # the others: strings
    for name in bl.METHOD_FIELDS:
        value = method.get(name)
        if name in least_int:
            ok = isinstance(value, int) and is_number(value) and value >= least_int[name]
            what = f"an int >= {least_int[name]}"
        else:
            ok, what = isinstance(value, str) and value != "", "a non-empty string"
        if not ok:
            raise ResultsError(f"{label}: 'method.{name}' must be {what}, got {value!r}: "
                               "results that do not say how they were timed are not judged")


def _check_denominator(results: dict[str, Any], base: dict[str, Any], label: str,
                       path: Path) -> None:
    """Refuse a run whose torch-flash median µs, of any suffix (``torch-flash (mma.sync)``),
    is more than :data:`MAX_DENOMINATOR_DRIFT` times off its baseline's, either way.

    Raises:
        ResultsError: with both medians (exit 4).
    """
    timed = bl.timed(results)
    for name, stored in base["records"].items():
        current = timed.get(name)
        if split_name(name)[0] != bl.REFERENCE_RECORD or current is None:
            continue
        now, then = float(np.median(current)), float(np.median(stored["round_medians_us"]))
        if not then / MAX_DENOMINATOR_DRIFT <= now <= then * MAX_DENOMINATOR_DRIFT:
            raise ResultsError(f"{label}: {name} took {now:.4g} µs, its baseline {then:.4g} "
                               f"µs ({path}): more than {MAX_DENOMINATOR_DRIFT:g}x off on the "
                               "same GPU, the primary metric's denominator was not timed as "
                               "the baseline's was (gate.check.MAX_DENOMINATOR_DRIFT)")


def check_provenance(results: dict[str, Any], label: str, commit: str | None,
                     reference_commit: str | None) -> None:
    """Refuse results that do not come from the commits the job measured: ``env.git_commit``
    against ``commit`` and the paired reference's commit against ``reference_commit`` (None:
    not checked). A stale or copied results file (an earlier run's, the committed one) is never
    judged as this run's. Also refused: a run paired with its own commit (its twins cannot
    differ), and with ``reference_commit``, a reference that did not load (without a
    ``reference_commit``, nothing is paired and the baseline judges every row, as
    :func:`check` warns).

    Raises:
        ResultsError: a commit missing or another (exit 4).
    """
    if commit is not None:
        got = results["env"].get("git_commit")
        if not same_commit(got, commit):
            raise ResultsError(f"{label}: the results come from commit {got!r}, the job "
                               f"measured {commit}: a stale or copied results file is not "
                               "judged (--expect-commit)")
        if results["env"].get("git_modified"):
            raise ResultsError(f"{label}: the results say the checkout that ran differed "
                               f"from commit {got} (env.git_modified): the job measured the "
                               "commit itself (--expect-commit)")
    ref = results.get("reference") or {}
    own = results["env"].get("git_commit")
    if bl.paired_run(results) and isinstance(own, str) and same_commit(ref.get("commit"), own):
        raise ResultsError(f"{label}: the paired reference is the measured commit itself "
                           f"({own}): twins of one commit cannot show a change; pair with the "
                           "base commit (reproduce --reference-src), or judge by the baseline")
    if reference_commit is not None:
        if "error" in ref:
            raise ResultsError(f"{label}: the job paired with reference commit "
                               f"{reference_commit}, but the reference did not load "
                               f"({ref['error']}): a run the job meant to pair is not judged "
                               "without its pairs (--expect-reference-commit)")
        got = ref.get("commit")
        if not same_commit(got, reference_commit):
            raise ResultsError(f"{label}: the results' paired reference is commit {got!r}, "
                               f"the job's reference is {reference_commit} "
                               "(--expect-reference-commit)")


def kernel_failures(results: dict[str, Any], baseline: dict[str, Any] | None = None,
                    baseline_path: Path | None = None) -> list[dict[str, str]]:
    """What failed in a results dict that passed
    :func:`~flashrepro_harness.gate.inputs.check_results`, each ``{"record", "rule",
    "detail"}``:

    * a flashrepro row (:func:`flashrepro_harness.results.is_product`) marked ``failed`` or
      ``skipped`` (only torch's backends and the peers may be skipped);
    * a timed row, any row, whose ``max_abs_err`` is not at most the output tolerance of the
      problem's dtype (:data:`flashrepro_harness.results.OUTPUT_TOLERANCE`; NaN is over it);
    * a reference twin ``reference:X`` whose row X is not in the run;
    * with ``baseline``: a flashrepro row the baseline has and the run lacks; with
      ``baseline_path`` but no baseline there, in a run its twins alone would judge
      (:func:`~flashrepro_harness.gate.baseline.paired_run`), a row of :func:`required_rows`
      the run lacks (no baseline names the rows).
    """
    dtype = results["problem"]["dtype"]
    tolerance = output_tolerance(dtype)
    names = {rec["name"] for rec in results["records"]}
    out = []
    for rec in results["records"]:
        name = rec["name"]
        state = next((k for k in ("failed", "skipped") if k in rec), None)
        if state is not None:
            if is_product(name):
                out.append({"record": name, "rule": "a flashrepro row must run (only torch's "
                            "backends and the optional peers may be skipped)",
                            "detail": f"{state}: {rec[state]}"})
            continue
        err = rec["max_abs_err"]
        if not err <= tolerance:  # NaN too
            out.append({"record": name, "rule": f"max abs(o - ref) <= {tolerance:g}, ref = "
                        f"float32 attention on the same inputs ({dtype} output tolerance, "
                        "results.OUTPUT_TOLERANCE)", "detail": f"max abs(o - ref) = {err:.3g}"})
        if name.startswith(REFERENCE_PREFIX) and name.removeprefix(REFERENCE_PREFIX) not in names:
            out.append({"record": name.removeprefix(REFERENCE_PREFIX),
                        "rule": "a row the reference has must be in the run",
                        "detail": f"{name!r} was timed, the row itself is missing"})
    out += _rows_missing(results, baseline, baseline_path,
                         "a flashrepro row the baseline has must be in the run")
    if baseline is None and baseline_path is not None and bl.paired_run(results):
        out += [{"record": name, "rule": "a run judged by its reference twins alone must have "
                 "every row each reproduce run of its problem on its GPU has "
                 "(gate.check.required_rows)",
                 "detail": f"missing; no baseline names the rows ({baseline_path} does not "
                           "exist)"}
                for name in required_rows(results["problem"], results["env"].get("gpu"))
                if name not in names]
    return out


def _rows_missing(results: dict[str, Any], baseline: dict[str, Any] | None,
                  baseline_path: Path | None, rule: str) -> list[dict[str, str]]:
    """A :func:`kernel_failures` entry, under ``rule``, for each flashrepro row of
    ``baseline`` that ``results`` lacks."""
    names = {rec["name"] for rec in results["records"]}
    return [{"record": name, "rule": rule,
             "detail": f"missing; the baseline {baseline_path} has it"}
            for name in (baseline or {}).get("records", {})
            if is_product(name) and name not in names]


def _check_rounds(results: dict[str, Any], base: dict[str, Any] | None, st: Settings,
                  label: str, path: Path) -> None:
    """Refuse samples too few for the test to reject (:func:`~flashrepro_harness.gate.stats.
    min_rounds` at the settings' confidence), in the results or the baseline."""
    need = min_rounds(st.confidence)
    why = (f"the gate needs at least {need} rounds at confidence {st.confidence:g}: at fewer "
           "the one-sided Wilcoxon signed-rank test cannot reject (its smallest p at n rounds "
           "is 2^-n; gate.stats.min_rounds)")
    for name, us in bl.timed(results).items():
        if us.size < need:
            raise ResultsError(f"{label}: record {name!r} has {us.size} rounds; {why}")
    for name, rec in (base or {}).get("records", {}).items():
        if len(rec["round_medians_us"]) < need:
            raise BaselineError(f"baseline {path}: record {name!r} has "
                                f"{len(rec['round_medians_us'])} rounds; {why}")


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
                 st: Settings, paired: list[str]
                 ) -> tuple[list[Comparison], list[Comparison], list[str], list[str]]:
    """The baseline comparisons of every record, the warnings, and the flashrepro records
    without a twin (``paired``) that the baseline lacks: unjudged."""
    primary: list[Comparison] = []
    secondary: list[Comparison] = []
    warnings: list[str] = []
    unjudged: list[str] = []
    stored = base["records"]
    for name, s in samples.items():
        if name not in stored:
            if "ratio" in s and name not in paired:
                unjudged.append(name)
            else:
                warnings.append(f"record {name!r} has no baseline samples: not compared with "
                                "the baseline (re-create it with --update-baseline to include "
                                "it)")
            continue
        if "ratio" in s:
            primary.append(compare(s["ratio"], stored[name]["round_ratios"], record=name,
                                   metric="ratio", threshold=st.threshold,
                                   confidence=st.confidence, n_resamples=st.n_resamples))
        secondary.append(compare(s["us"], stored[name]["round_medians_us"], record=name,
                                 metric="us", threshold=st.abs_threshold,
                                 confidence=st.confidence, n_resamples=st.n_resamples))
    for name in stored:
        if name not in samples and not is_product(name):  # a flashrepro one is a failure
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
    return primary, secondary, warnings, unjudged


ENV_NOTE = ("the environment differs from the baseline's; compared anyway because of "
            "--allow-env-mismatch")


def check(results: dict[str, Any], baseline_dir: Path, *, threshold: float | None = None,
          abs_threshold: float | None = None, confidence: float | None = None,
          allow_env_mismatch: bool = False, results_path: str | None = None,
          env_note: str = ENV_NOTE, expect_commit: str | None = None,
          expect_reference_commit: str | None = None) -> Verdict:
    """Judge a results dict: paired rows by their reference twins, the others against the
    stored baseline of their GPU and problem.

    Args:
        results: ``reproduce.json``'s content (:func:`~flashrepro_harness.gate.inputs.
            check_results`).
        baseline_dir: root of the baselines (``reproduce/baselines``); must be a folder.
        threshold, abs_threshold, confidence: in [0, 0.1], [0, 1), [0.95, 0.99]; None: the
            baseline's stored value, else the default.
        allow_env_mismatch: compare even when the environment differs (with ``env_note``).
        results_path: the results file's name in messages.
        expect_commit, expect_reference_commit: the commits the job measured and paired with
            (:func:`check_provenance`); None: not checked.

    Returns:
        A :class:`Verdict`; ``verdict.exit_code`` is 0 pass, 1 regression, 2 no baseline (or a
        flashrepro row neither paired nor in the baseline), 3 environment mismatch, 5 kernel
        failure (:func:`kernel_failures`), 7 inconclusive (a deciding comparison not shown to
        be within the threshold).

    Raises:
        flashrepro_harness.gate.refusals.Refused: input the gate will not judge, with its exit
            code: 4 for malformed results or baseline, a missing ``baseline_dir``, settings
            outside their rules, too few rounds, a paired row without a twin, results of
            other commits than expected; 6 for results of another problem than this
            checkout's article problem.
    """
    label = results_path or "results"
    check_results(results, label)
    check_provenance(results, label, expect_commit, expect_reference_commit)
    _check_problem(results, label)
    _check_method(results, label)
    check_floor(results, label)
    baseline_dir = Path(baseline_dir)
    if not baseline_dir.is_dir():
        raise BaselineError(f"--baseline-dir {baseline_dir}: no such folder (missing or "
                            "misspelled?); the gate reads the baselines there: give the "
                            "committed reproduce/baselines, or make one with --update-baseline")
    given = {"threshold": threshold, "abs_threshold": abs_threshold, "confidence": confidence}
    return _judge(results, baseline_dir, given, label, allow_env_mismatch=allow_env_mismatch,
                  results_path=results_path, env_note=env_note, judged=True)


def _named(label: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, its :class:`ResultsError` prefixed with ``label`` (the file)."""
    try:
        return fn(*args)
    except ResultsError as exc:
        raise ResultsError(f"{label}: {exc}") from exc


def _judge(results: dict[str, Any], baseline_dir: Path, given: dict[str, float | None],
           label: str, *, allow_env_mismatch: bool, results_path: str | None, env_note: str,
           failures: list[dict[str, str]] | None = None, judged: bool = False) -> Verdict:
    """:func:`check` after its input checks; ``failures``: a baseline update's (without the
    missing-row rule), else :func:`kernel_failures` here; ``judged`` (a run judged, not a
    new baseline): refuse a torch-flash far from the baseline's (:func:`_check_denominator`)
    and times below the floor of the baseline's GPU facts."""
    path = _named(label, bl.baseline_path, baseline_dir, results)
    base = bl.load(path)
    if base is not None and judged:
        _check_denominator(results, base, label, path)
        check_floor(results, label, base["env"])  # the judge's facts of this GPU
    st, notes = _settings(base.get("gate") if base else None, given, f"baseline {path}")
    verdict = Verdict(status="no-baseline", exit_code=ExitCode.NO_BASELINE, baseline_path=path,
                      gpu_key=bl.fingerprint(results["env"])["gpu_key"],
                      problem_key=bl.problem_key(results["problem"]), settings=st,
                      results_path=results_path, reference=results.get("reference"))
    verdict.warnings.extend(notes)
    if bl.REFERENCE_RECORD not in bl.timed(results):
        raise ResultsError(f"{label}: no timed {bl.REFERENCE_RECORD!r} record, the reference "
                           "of the gate's primary metric")
    verdict.failures = kernel_failures(results, base, path) if failures is None else failures
    if verdict.failures:
        verdict.status, verdict.exit_code = "kernel-failure", ExitCode.KERNEL_FAILURE
        return verdict
    _check_rounds(results, base, st, label, path)
    samples = _named(label, bl.round_samples, results)
    injected = {n: i.get("fraction") for n, i in results.get("injection", {}).items()}
    if injected:
        verdict.warnings.append(f"this run has an injected slowdown (test hook "
                                f"FLASHREPRO_INJECT_SLOWDOWN): {injected}")
    if results.get("test_hooks"):
        verdict.warnings.append(f"this run had test hooks set: {results['test_hooks']}")
    if (results.get("reference") or {}).get("error"):
        verdict.warnings.append(f"the reference checkout did not load "
                                f"({results['reference']['error']}): no record is paired, every "
                                "one is judged against the committed baseline")
    paired = [n for n, s in samples.items() if "paired" in s]
    unpaired = [n for n, s in samples.items() if "ratio" in s and "paired" not in s]
    verdict.paired = [compare_paired(samples[n]["us"], samples[n]["reference_us"], record=n,
                                     threshold=st.threshold, confidence=st.confidence,
                                     n_resamples=st.n_resamples) for n in paired]
    verdict.host_cost, host_warnings = host.compare(results, base)
    if base is None:
        if paired and not unpaired:
            verdict.warnings.append("no committed baseline for this GPU and problem: judged "
                                    "by the paired reference alone")
        return _decide(verdict, unpaired, "no-baseline")
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
        return _decide(verdict, unpaired, "env-mismatch")
    if verdict.env_differences:
        verdict.warnings.append(f"{env_note} ({_fields(verdict.env_differences)})")
    primary, secondary, warnings, unjudged = _compare_all(samples, base, st, paired)
    # a record with a twin is judged by the pair; its baseline comparison is shown, and
    # gated only by the backstop below
    verdict.comparisons = [c for c in primary if c.record not in paired]
    verdict.against_baseline = [c for c in primary if c.record in paired]
    verdict.secondary = secondary
    verdict.warnings.extend(warnings)
    if not verdict.env_differences:  # the baseline's machine setup: its offset is bounded
        verdict.backstop = [
            compare(samples[c.record]["ratio"], base["records"][c.record]["round_ratios"],
                    record=c.record, metric="ratio", threshold=st.threshold + BASELINE_BACKSTOP,
                    confidence=st.confidence, n_resamples=st.n_resamples)
            for c in verdict.against_baseline]
    flagged = {c.record for c in verdict.backstop if c.slower}
    verdict.warnings.extend(
        f"{c.record}: {c.change:+.1%} against the committed baseline (CI {c.ci_low:+.1%} to "
        f"{c.ci_high:+.1%}), above the {c.threshold:.0%} threshold; not failing: the paired "
        "reference decides, but the baseline may be due for --update-baseline"
        for c in verdict.against_baseline if c.slower and c.record not in flagged)
    verdict.warnings.extend(
        f"{name}: slower than the committed baseline by more than the threshold plus "
        f"{BASELINE_BACKSTOP:.0%} (gate.check.BASELINE_BACKSTOP) on the baseline's setup, "
        "whatever its twin says: a regression (a twin timed as slow as its row, or a slowdown "
        "accumulated over commits: if accepted, --update-baseline)" for name in sorted(flagged))
    verdict.drift = _drift(base, samples)
    if not primary and not paired:
        verdict.warnings.append("no flashrepro record is in both this run and the baseline")
    return _decide(verdict, unjudged)


def _decide(verdict: Verdict, unjudged: list[str] | None = None,
            unjudged_status: str = "no-baseline") -> Verdict:
    """Status and exit code: any regression decides; else unjudged rows (no twin, no usable
    baseline) give ``unjudged_status``; else a deciding comparison whose interval reaches
    above the threshold (:attr:`~flashrepro_harness.gate.stats.Comparison.inconclusive`: not
    shown to be within it) gives "inconclusive"; nothing compared stays "no-baseline"."""
    deciding = [*verdict.paired, *verdict.comparisons]
    unclear = [c.record for c in deciding if c.inconclusive]
    if verdict.regressions:
        verdict.status, verdict.exit_code = "regression", ExitCode.REGRESSION
    elif unjudged:
        codes = {"no-baseline": ExitCode.NO_BASELINE, "env-mismatch": ExitCode.ENV_MISMATCH}
        verdict.status, verdict.exit_code = unjudged_status, codes[unjudged_status]
        verdict.warnings.append(f"records {unjudged} have no reference twin and no baseline "
                                "to be judged against: not a pass")
    elif unclear:
        verdict.status, verdict.exit_code = "inconclusive", ExitCode.INCONCLUSIVE
        verdict.warnings.append(f"records {unclear}: the interval of the change reaches above "
                                "the threshold without the test flagging it, so they are not "
                                "shown to be within it: not a pass (more rounds narrow it)")
    elif deciding:
        verdict.status, verdict.exit_code = "pass", ExitCode.PASS
    return verdict


def _refuse_injected(results: dict[str, Any], label: str) -> None:
    slowed = [n for n, i in results.get("injection", {}).items()
              if i.get("fraction") != 0]
    if slowed:
        raise ResultsError(f"{label}: records {slowed} were slowed by the test hook "
                           "FLASHREPRO_INJECT_SLOWDOWN; such a run cannot be a baseline")
    if results.get("test_hooks"):
        raise ResultsError(f"{label}: the run had test hooks set ({results['test_hooks']}); "
                           "such a run cannot be a baseline")


def update_baseline(results: dict[str, Any] | list[dict[str, Any]], baseline_dir: Path, *,
                    threshold: float | None = None, abs_threshold: float | None = None,
                    confidence: float | None = None, results_path: str | None = None
                    ) -> Verdict:
    """Make ``results`` the baseline for its GPU and problem; append it to the history.

    ``results`` may be a list of runs of one environment, pooled
    (:func:`flashrepro_harness.gate.baseline.pool`). The history is kept and one entry appended;
    the verdict carries the comparison with the previous baseline, for information. Settings:
    the arguments, else the previous baseline's, else the defaults; stored. Written atomically;
    ``baseline_dir`` is created if missing.

    Returns:
        A :class:`Verdict` with status ``baseline-updated`` and exit code 0; or, when a run has
        :func:`kernel_failures`, or lacks a flashrepro row of the previous baseline (a
        baseline without a row would leave it unjudged; to drop one on purpose, delete the
        file), the ``kernel-failure`` verdict (exit 5) and nothing is written.

    Raises:
        As :func:`check` (a missing ``baseline_dir`` aside); also
        :class:`~flashrepro_harness.gate.refusals.ResultsError` for a run with an injected
        slowdown above 0 (``FLASHREPRO_INJECT_SLOWDOWN``) or another test hook, never a
        baseline, and for runs that cannot be pooled;
        :class:`~flashrepro_harness.gate.refusals.BaselineError` when the file cannot be
        written.
    """
    runs = results if isinstance(results, list) else [results]
    if not runs:
        raise ResultsError("pool needs at least one results dict")
    label = results_path or "results"
    failures = []
    for i, run in enumerate(runs):
        name = label if len(runs) == 1 else f"{label} (run {i})"
        check_results(run, name)
        _check_problem(run, name)
        check_floor(run, name)
        _refuse_injected(run, name)
        failures += kernel_failures(run)
    pooled = runs[0] if len(runs) == 1 else _named(label, bl.pool, runs)
    path = _named(label, bl.baseline_path, Path(baseline_dir), pooled)
    previous = bl.load(path)
    failures += _rows_missing(pooled, previous, path, "a flashrepro row of the previous "
                              "baseline must be in a new one (to drop a row on purpose, "
                              "delete the baseline file first)")
    given = {"threshold": threshold, "abs_threshold": abs_threshold, "confidence": confidence}
    previous_verdict = _judge(pooled, Path(baseline_dir), given, label,
                              allow_env_mismatch=True, results_path=results_path,
                              env_note="the new baseline's environment differs from the "
                                       "previous one's", failures=failures)
    if previous_verdict.failures:
        return previous_verdict
    new = bl.build(pooled, previous, previous_verdict.settings.as_dict())
    bl.write(path, new)
    previous_verdict.status, previous_verdict.exit_code = "baseline-updated", ExitCode.PASS
    return previous_verdict
