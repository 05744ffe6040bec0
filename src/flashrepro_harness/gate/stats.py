"""The gate's decision rule: is one sample of per-round values slower than another by more than
a threshold, significantly?

Independent samples: the baseline's per-round values ``b`` and the current run's ``c`` (ratios
flashrepro / torch-flash for the primary metric, µs for the secondary; larger = slower). The
effect is ``median(c) / median(b) - 1``. *slower* only when both hold:

1. the lower bound of the two-sided ``confidence`` bootstrap confidence interval of that change
   (:func:`scipy.stats.bootstrap`, percentile method, independent resampling of each sample) is
   above ``threshold``; and
2. a one-sided Mann-Whitney U test (:func:`scipy.stats.mannwhitneyu`) of ``c`` against
   ``b · (1 + threshold)`` (H1: ``c`` is stochastically larger) gives ``p < (1 - confidence)/2``.

Both test the null hypothesis "the slowdown is at most ``threshold``" at the same one-sided
level (2.5 % at the default 95 %), on medians and on ranks, so one outlier round is harmless and
a slowdown of exactly ``threshold`` is flagged at most ~2.5 % of the time; noise only lowers the
power. Simulated rates: lab/2026-11-29-gate-false-alarms/. The resampling's seed is fixed: the
same samples give the same verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

DEFAULT_THRESHOLD = 0.02
"""Primary metric: slowdowns of the per-round ratio up to 2 % are tolerated (see docs/gate.md)."""
DEFAULT_ABS_THRESHOLD = 0.10
"""Secondary metric (absolute µs): only warned about, above 10 % (clocks and co-tenants move it)."""
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
SEED = 0
MAX_THRESHOLD = 0.10
"""The loosest threshold accepted, from a baseline or the command line: about three times the
largest offset of unchanged code measured on the H200 (docs/gate.md); a looser one would pass
slowdowns of the size the lab reports as real."""
MAX_CONFIDENCE = 0.99
"""The highest confidence accepted: a higher one costs power as a looser threshold would."""
MIN_CONFIDENCE = DEFAULT_CONFIDENCE
"""The lowest confidence accepted, from a baseline or the command line: a lower one passes
more (its interval is narrower, so fewer comparisons are inconclusive, and fewer rounds
suffice), as a looser threshold would."""
MAX_ROUNDS = 10_000
"""Most samples per record the gate reads; the bootstrap holds resamples x samples float64
(160 MB at 2000 x 10,000), so more is refused before anything is allocated."""
RESAMPLES_RANGE = (1000, 100_000)
"""Bootstrap resamples a baseline may store."""
RATIO_ROUNDING = 1e-12
"""Log-ratios this close to ``log(1 + threshold)`` are at the threshold (float rounding)."""


def min_rounds(confidence: float = DEFAULT_CONFIDENCE) -> int:
    """The fewest rounds at which the decision rule can flag a slowdown at all.

    The paired Wilcoxon test's smallest one-sided p at n rounds is ``2^-n``, so
    ``p < (1 - confidence) / 2`` needs ``n > log2(2 / (1 - confidence))``: 6 at 95 %. The
    Mann-Whitney test and the bootstrap reject at fewer.

    Raises:
        ValueError: ``confidence`` outside (0.5, 1).
    """
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")
    return math.floor(math.log2(2 / (1 - confidence))) + 1


MIN_SAMPLES = min_rounds()
"""Fewest rounds at the default confidence (6): fewer cannot flag any slowdown."""


@dataclass(frozen=True)
class Comparison:
    """The comparison of one metric of one record: current run vs baseline.

    Attributes:
        metric: ``"ratio"`` (to torch-flash, primary), ``"us"`` or ``"paired"``.
        baseline_median, current_median: sample medians (ratio, or µs).
        change: ``current_median / baseline_median - 1`` (+0.05 = 5 % slower).
        ci_low, ci_high: the two-sided ``confidence`` bootstrap interval of ``change``.
        p_value: the one-sided rank test's (H1: slower than ``threshold``).
        slower: both conditions of the rule hold.
    """

    record: str
    metric: str
    n_baseline: int
    n_current: int
    baseline_median: float
    current_median: float
    change: float
    ci_low: float
    ci_high: float
    p_value: float
    threshold: float
    confidence: float
    slower: bool

    @property
    def inconclusive(self) -> bool:
        """Not flagged, but not cleared either: the interval reaches above the threshold (too
        noisy), or the rank test rejects "at most ``threshold`` slower" while the median's
        interval does not (some rounds much slower, most unchanged: a bimodal slowdown)."""
        return not self.slower and (self.ci_high > self.threshold
                                    or self.p_value < (1.0 - self.confidence) / 2)

    def as_dict(self) -> dict:
        """JSON-ready form, with :attr:`inconclusive`."""
        return {**asdict(self), "inconclusive": self.inconclusive}


def _relative_median_change(c: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(c, axis=axis) / np.median(b, axis=axis) - 1.0


def _checked(values: Sequence[float], name: str, confidence: float) -> np.ndarray:
    if len(values) > MAX_ROUNDS:
        raise ValueError(f"{name} must hold at most {MAX_ROUNDS} values, got {len(values)}")
    a = np.asarray(values, dtype=np.float64)
    need = min_rounds(confidence)
    if a.ndim != 1 or a.size < need:
        raise ValueError(f"{name} must be a flat list of at least {need} values (the fewest "
                         f"at which the test can reject at confidence {confidence:g}), got "
                         f"shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must hold finite values > 0 (times or time ratios)")
    return a


def _check_settings(threshold: float, confidence: float) -> None:
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold must be in [0, 1) (0.02 = 2 %), got {threshold}")
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")


def compare(current: Sequence[float], baseline: Sequence[float], *, record: str, metric: str,
            threshold: float = DEFAULT_THRESHOLD, confidence: float = DEFAULT_CONFIDENCE,
            n_resamples: int = DEFAULT_RESAMPLES, seed: int = SEED) -> Comparison:
    """Apply the decision rule to one metric of one record.

    Args:
        current, baseline: per-round values (> 0, larger = slower, one unit), each
            :func:`min_rounds` to :data:`MAX_ROUNDS` of them.
        record, metric: carried into the :class:`Comparison` returned.
        threshold: tolerated relative slowdown, in [0, 1) (0.02 = 2 %).
        confidence: two-sided level of the interval, in (0.5, 1).
        n_resamples, seed: of the bootstrap.

    Raises:
        ValueError: fewer than :func:`min_rounds` or more than :data:`MAX_ROUNDS` values, a
            value not finite and > 0, a threshold outside [0, 1), a confidence outside (0.5, 1).
    """
    _check_settings(threshold, confidence)
    c, b = _checked(current, "current", confidence), _checked(baseline, "baseline", confidence)
    change = float(_relative_median_change(c, b))
    if np.all(c == c[0]) and np.all(b == b[0]):
        ci_low = ci_high = change  # no spread at all: the bootstrap has nothing to resample
    else:
        ci = stats.bootstrap((c, b), _relative_median_change, vectorized=True, paired=False,
                             n_resamples=n_resamples, confidence_level=confidence,
                             method="percentile", rng=np.random.default_rng(seed)
                             ).confidence_interval
        ci_low, ci_high = float(ci.low), float(ci.high)
    p_value = float(stats.mannwhitneyu(c, b * (1.0 + threshold), alternative="greater").pvalue)
    slower = ci_low > threshold and p_value < (1.0 - confidence) / 2
    return Comparison(record=record, metric=metric, n_baseline=b.size, n_current=c.size,
                      baseline_median=float(np.median(b)), current_median=float(np.median(c)),
                      change=change, ci_low=ci_low, ci_high=ci_high, p_value=p_value,
                      threshold=threshold, confidence=confidence, slower=slower)


def _median_change(r: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(r, axis=axis) - 1.0


def compare_paired(current: Sequence[float], reference: Sequence[float], *, record: str,
                   threshold: float = DEFAULT_THRESHOLD, confidence: float = DEFAULT_CONFIDENCE,
                   n_resamples: int = DEFAULT_RESAMPLES, seed: int = SEED) -> Comparison:
    """The decision rule for a record and its reference twin timed in the same rounds.

    Round r gives ``current[r] / reference[r]`` (one interleaved round of one process: same
    clocks and inputs). The effect is ``median(ratios) - 1``. *slower* when both hold:

    1. the lower bound of the two-sided ``confidence`` bootstrap interval of that effect
       (:func:`scipy.stats.bootstrap`, percentile method, rounds resampled) is above
       ``threshold``; and
    2. a one-sided Wilcoxon signed-rank test (:func:`scipy.stats.wilcoxon`) of
       ``log(ratio) - log(1 + threshold)`` (H1: located above 0; values within
       :data:`RATIO_ROUNDING` of 0 are ties, dropped) gives ``p < (1 - confidence) / 2``.

    Null hypothesis and levels as in :func:`compare`; no stored baseline's offset enters.

    Args: as :func:`compare`; ``current`` and ``reference`` in µs, of the same rounds.

    Returns:
        A :class:`Comparison` with ``metric="paired"``, the two medians in µs and ``change`` the
        median paired ratio minus 1.

    Raises:
        ValueError: as :func:`compare`; also samples of different lengths.
    """
    _check_settings(threshold, confidence)
    c, b = _checked(current, "current", confidence), _checked(reference, "reference", confidence)
    if c.size != b.size:
        raise ValueError(f"paired samples need the same rounds, got {c.size} and {b.size}")
    r = c / b
    change = float(_median_change(r))
    if np.all(r == r[0]):
        ci_low = ci_high = change
    else:
        ci = stats.bootstrap((r,), _median_change, vectorized=True, n_resamples=n_resamples,
                             confidence_level=confidence, method="percentile",
                             rng=np.random.default_rng(seed)).confidence_interval
        ci_low, ci_high = float(ci.low), float(ci.high)
    d = np.log(r) - np.log1p(threshold)
    # 1 + threshold up to rounding (510 / 500) is allowed by the null hypothesis: a tie.
    d[np.abs(d) <= RATIO_ROUNDING] = 0.0
    p_value = (float(stats.wilcoxon(d, alternative="greater").pvalue) if np.any(d != 0)
               else 1.0)
    slower = ci_low > threshold and p_value < (1.0 - confidence) / 2
    return Comparison(record=record, metric="paired", n_baseline=b.size, n_current=c.size,
                      baseline_median=float(np.median(b)), current_median=float(np.median(c)),
                      change=change, ci_low=ci_low, ci_high=ci_high, p_value=p_value,
                      threshold=threshold, confidence=confidence, slower=slower)
