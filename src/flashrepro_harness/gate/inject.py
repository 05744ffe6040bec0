"""Test hook: make every flashrepro call slower by a calibrated fraction (gate experiments).

``FLASHREPRO_INJECT_SLOWDOWN=0.05`` asks the benchmark harness to append, after every call of a
flashrepro record, a GPU busy-wait (``torch.cuda._sleep(cycles)``) on the same stream, so it
lies inside the timed interval. ``cycles`` is calibrated on the GPU so that the call takes 5 %
of its median longer than with the hook at 0; the fraction actually reached is measured and
reported. The busy-wait counts SM clock cycles, so the injected time follows the SM clock as the
(compute-bound) kernel does and the fraction holds when clocks move.

``FLASHREPRO_INJECT_SLOWDOWN=0`` keeps the hook with an empty busy-wait (one more kernel on the
stream, a fixed ~1-3 µs): a detection experiment measures its baseline with the hook at 0, so
the slowed runs differ from it by exactly the calibrated busy-wait. Unset: no hook at all.

This is a timing-level injection, not a change to the kernel's code: it tests the gate's
statistics at exact slowdowns (3 %, 5 %), which a kernel change (e.g. a worse ``num_stages``,
+19 % on the H200) cannot dial in.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import torch

from flashrepro_harness.bench.timing import interleaved_rounds

ENV_VAR = "FLASHREPRO_INJECT_SLOWDOWN"
PROBE_CYCLES = 100_000
"""Busy-wait used to measure µs per cycle: ~50 µs at 2 GHz, as long as the kernel itself."""


@dataclass(frozen=True)
class Injection:
    """A calibrated slowdown.

    Attributes:
        fraction: requested slowdown (0.05 = 5 %).
        cycles: busy-wait length appended to each call, SM clock cycles.
        base_us: median per-call time with the hook at 0, µs.
        us_per_cycle: busy-wait µs per cycle, measured.
        measured_fraction: slowdown measured with ``cycles``, against the hook at 0 (median of
            per-round ratios - 1).
    """

    fraction: float
    cycles: int
    base_us: float
    us_per_cycle: float
    measured_fraction: float

    def as_dict(self) -> dict:
        """JSON-ready form (stored under ``"injection"`` in the results)."""
        return asdict(self)


def requested(environ: Mapping[str, str] = os.environ) -> float | None:
    """The slowdown asked for by ``FLASHREPRO_INJECT_SLOWDOWN``, or None when unset or empty.

    Raises:
        ValueError: the value is not a number in [0, 1).
    """
    text = environ.get(ENV_VAR, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{ENV_VAR} must be a fraction such as 0.05, got {text!r}") from None
    if not 0 <= value < 1:
        raise ValueError(f"{ENV_VAR} must be in [0, 1) (0.05 = 5 % slower), got {value}")
    return value


def with_busy_wait(fn: Callable[[], object], cycles: int) -> Callable[[], object]:
    """``fn`` followed by a GPU busy-wait of ``cycles`` SM cycles on the current stream."""
    def slowed() -> object:
        out = fn()
        torch.cuda._sleep(cycles)
        return out
    return slowed


def _median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def _fractions(fn: Callable[[], object], cycles: dict[float, int], rounds: int,
               calls_per_round: int) -> dict[float, float]:
    """Slowdown of ``fn`` + each busy-wait against the hook at 0, timed in interleaved rounds."""
    fns = {"zero": with_busy_wait(fn, 0),
           **{str(f): with_busy_wait(fn, c) for f, c in cycles.items()}}
    t = interleaved_rounds(fns, rounds, calls_per_round)
    return {f: _median_ratio(t[str(f)], t["zero"]) - 1.0 for f in cycles}


def calibrate(fn: Callable[[], object], fractions: tuple[float, ...], *, rounds: int = 30,
              calls_per_round: int = 10) -> dict[float, Injection]:
    """Busy-wait lengths that slow ``fn`` by each of ``fractions``; measured, on the GPU.

    Three interleaved measurements (:func:`flashrepro_harness.bench.timing.interleaved_rounds`),
    each against the hook at 0: a probe busy-wait gives µs per cycle and a first length per
    fraction; measuring those, each length is scaled by requested / measured (short
    busy-waits add less than cycles / clock: on an H200 a first pass reached 2.57 % for 3 % and
    4.67 % for 5 %, ``reproduce/results/nvidia-h200/gate_experiment.md``); the last measurement
    gives the fraction reached, reported.

    Raises:
        ValueError: a fraction outside [0, 1).
        RuntimeError: no CUDA GPU.
    """
    for f in fractions:
        if not 0 <= f < 1:
            raise ValueError(f"fractions must be in [0, 1), got {f}")
    probe = interleaved_rounds({"zero": with_busy_wait(fn, 0),
                                "probe": with_busy_wait(fn, PROBE_CYCLES)},
                               rounds, calls_per_round)
    base_us = statistics.median(probe["zero"])
    us_per_cycle = (_median_ratio(probe["probe"], probe["zero"]) - 1.0) * base_us / PROBE_CYCLES
    cycles = {f: max(0, round(f * base_us / us_per_cycle)) for f in fractions}
    first = _fractions(fn, cycles, rounds, calls_per_round)
    cycles = {f: round(c * f / first[f]) if first[f] > 0 else c for f, c in cycles.items()}
    reached = _fractions(fn, cycles, rounds, calls_per_round)
    return {f: Injection(fraction=f, cycles=c, base_us=base_us, us_per_cycle=us_per_cycle,
                         measured_fraction=reached[f]) for f, c in cycles.items()}


def apply_from_env(fns: dict[str, Callable[[], object]], records: tuple[str, ...], *,
                   environ: Mapping[str, str] = os.environ
                   ) -> tuple[dict[str, Callable[[], object]], dict[str, Injection]]:
    """The harness's hook: wrap ``records`` of ``fns`` as ``FLASHREPRO_INJECT_SLOWDOWN`` asks.

    Returns ``(fns, injections)``: ``fns`` unchanged and ``{}`` when the variable is unset;
    otherwise each named record followed by its calibrated busy-wait, and the
    :class:`Injection` of each (to record in the results JSON, so a slowed run is never
    mistaken for a real one).
    """
    fraction = requested(environ)
    if fraction is None:
        return fns, {}
    out, injections = dict(fns), {}
    for name in records:
        if name in fns:
            inj = calibrate(fns[name], (fraction,))[fraction]
            out[name], injections[name] = with_busy_wait(fns[name], inj.cycles), inj
    return out, injections
