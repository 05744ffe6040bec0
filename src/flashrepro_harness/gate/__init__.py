"""The performance regression gate: a results JSON against a stored per-GPU baseline.

Primary metric: for each flashrepro record, the per-round ratio of its time to torch SDPA's
flash backend, timed in the same interleaved round (clock and machine drift cancel). A record
regresses when its slowdown against the baseline is above a threshold (2 % by default) with
statistical significance (bootstrap interval of the change in median above the threshold, and a
one-sided Mann-Whitney U test): :mod:`flashrepro_harness.gate.stats`. Absolute µs are reported and
warned about, never gated. Baselines live in ``reproduce/baselines/<gpu-key>/<problem-key>.json``
with their environment, method, settings and an append-only history:
:mod:`flashrepro_harness.gate.baseline`. Exit codes: :class:`ExitCode`. See ``docs/gate.md``.

Modules: ``stats`` (decision rule), ``baseline`` (files, keys, environment matching),
``check`` (:func:`check`, :func:`update_baseline`, :class:`Verdict`), ``markdown`` (summary),
``command`` (CLI), ``simulate`` (synthetic runs, false-alarm and detection rates), ``inject``
and ``measure`` (GPU: the slowdown test hook and the experiment's measurement).
"""

from flashrepro_harness.gate.baseline import ResultsError
from flashrepro_harness.gate.check import ExitCode, Settings, Verdict, check, update_baseline
from flashrepro_harness.gate.stats import Comparison, compare

__all__ = ["Comparison", "ExitCode", "ResultsError", "Settings", "Verdict", "check", "compare",
           "update_baseline"]
