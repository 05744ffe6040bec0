"""Test hook: make every flashrepro call slower by a calibrated fraction (gate experiments).

``FLASHREPRO_INJECT_SLOWDOWN=0.05`` appends to every call of a flashrepro record a GPU busy-wait
(``torch.cuda._sleep(cycles)``) on the same stream, inside the timed interval, with ``cycles``
calibrated so the call's median grows 5 % over the hook at 0; the fraction reached is measured
and reported. The busy-wait counts SM cycles, so it follows the clock as the kernel does.
``=0`` keeps an empty busy-wait (a fixed cost, so a baseline taken with it differs from slowed
runs by the calibrated wait alone); unset: no hook. It dials in exact slowdowns, which a kernel
change cannot.
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
"""Busy-wait that measures µs per cycle (~50 µs at 2 GHz, a kernel's length)."""


@dataclass(frozen=True)
class Injection:
    """A calibrated slowdown: requested ``fraction`` (0.05 = 5 %), busy-wait ``cycles`` (SM
    clock), ``base_us`` (median µs per call at 0), ``us_per_cycle`` and ``measured_fraction``
    (median per-round ratio to the hook at 0, minus 1)."""

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

    Three interleaved measurements, each against the hook at 0: a probe gives µs per cycle and
    a first length per fraction; each length is then scaled by requested / measured (short
    busy-waits add less than cycles / clock: ``reproduce/results/nvidia-h200/gate_experiment.md``);
    the last gives the fraction reached.

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

    Returns ``(fns, injections)``: unchanged and ``{}`` when the variable is unset; else each
    named record followed by its busy-wait, and each :class:`Injection` (recorded in the
    results, so a slowed run is never mistaken for a real one).
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
