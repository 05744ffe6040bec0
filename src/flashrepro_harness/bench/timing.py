"""One timing method for every number this project reports, stated here and tested.

Method (``events``): for each call, zero a 256 MiB buffer (over 4x any current NVIDIA L2), queue
a GPU busy-wait (``torch.cuda._sleep``), then record a CUDA event, the call, another event; the
time is the event interval, µs. The busy-wait keeps the host's launch work out of the interval,
so it must outlast it (lab/2026-11-29-host-time-per-call/): :func:`time_calls` warns
(:class:`HostBoundWarning`) when a call's host time reaches :data:`HOST_MARGIN` of it.

Interleaved rounds (:func:`interleaved_rounds`): each round times every kernel once, the order
rotating between rounds, so drift falls on all alike; a round's value is the median of its calls.

Host cost (:func:`host_and_eager_rounds`): ``host`` is the CPU time to issue one call
(``perf_counter_ns`` around the call) with a busy-wait queued before each, so the launch queue
never blocks; ``eager`` is the wall time per call of calls back to back, no busy-wait or flush,
synchronised at the end: a device-bound call shows its kernel time (inputs in L2), a host-bound
one its host time. Both are medians over interleaved rounds.

Method (``graph``, :func:`time_graph`): launches captured in one CUDA graph and replayed, replay
time / calls, no flush; it measures the spread of the events method, not reported numbers.
"""

from __future__ import annotations

import functools
import gc
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from flashrepro_harness.progress import progress

FLUSH_BYTES = 256 * 2**20
SLEEP_CYCLES = 2_000_000  # ~1 ms at 2 GHz: several times the host's work for one call
HOST_MARGIN = 0.8
"""Warn when one call's host time exceeds this fraction of the busy-wait."""


class HostBoundWarning(UserWarning):
    """A timed call's host work outlasted (most of) the busy-wait: its time may include it."""


def busy_wait_us() -> float:
    """The length of the ``SLEEP_CYCLES`` busy-wait on the current GPU, µs (median of 5;
    measured once per device and process)."""
    return _busy_wait_us(torch.cuda.current_device())


@functools.cache
def _busy_wait_us(device: int) -> float:
    samples = []
    for _ in range(5):
        with torch.cuda.device(device):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(SLEEP_CYCLES)
            end.record()
            torch.cuda.synchronize()
        samples.append(1e3 * start.elapsed_time(end))
    return statistics.median(samples)


@dataclass
class Summary:
    """Summary statistics of per-call times, in µs."""

    median_us: float
    q25_us: float
    q75_us: float
    min_us: float
    n: int
    samples_us: list[float] = field(repr=False)

    @classmethod
    def of(cls, samples_us: list[float]) -> Summary:
        """Summarise ``samples_us`` (at least one sample, µs)."""
        if not samples_us:
            raise ValueError("samples_us must not be empty")
        qs = statistics.quantiles(samples_us, n=4) if len(samples_us) > 1 else [samples_us[0]] * 3
        return cls(median_us=statistics.median(samples_us), q25_us=qs[0], q75_us=qs[2],
                   min_us=min(samples_us), n=len(samples_us), samples_us=list(samples_us))

    def as_dict(self, keep_samples: bool = True) -> dict:
        d = asdict(self)
        if not keep_samples:
            d.pop("samples_us")
        return d


def time_calls(fn: Callable[[], object], calls: int, warmup: int = 3) -> list[float]:
    """Per-call GPU times (µs, CUDA events, call order) of ``calls`` calls of ``fn`` (which
    only enqueues work on the current stream), L2 flushed before each, after ``warmup`` calls.

    Raises:
        RuntimeError: when no CUDA device is available.

    Warns:
        HostBoundWarning: a call's host time reached ``HOST_MARGIN`` of :func:`busy_wait_us`.
    """
    gpu_us, host_us = time_calls_and_host(fn, calls, warmup)
    wait_us = busy_wait_us()
    over = [us for us in host_us if us > HOST_MARGIN * wait_us]
    if over:
        warnings.warn(f"{len(over)} of {calls} timed calls spent up to {max(over):.0f} µs on the "
                      f"host, more than {HOST_MARGIN:.0%} of the {wait_us:.0f} µs busy-wait: "
                      "their GPU times may include host launch gaps (raise "
                      "timing.SLEEP_CYCLES if this is not a rare outlier)",
                      HostBoundWarning, stacklevel=2)
    return gpu_us


def time_calls_and_host(fn: Callable[[], object], calls: int, warmup: int = 3,
                        gc_off: bool = True, before_wait: Callable[[], object] | None = None
                        ) -> tuple[list[float], list[float]]:
    """:func:`time_calls`' measurement, without its warning: per-call GPU times (µs, CUDA
    events) and host times (µs, ``start.record()`` to after ``end.record()``), in call order.

    ``gc_off``: the garbage collector is off during the timed calls (a collection can outlast
    the busy-wait: lab/2026-11-29-host-time-outliers/). ``before_wait``: GPU work enqueued after
    each flush, before the busy-wait, outside the events (diagnostics only).

    Raises:
        RuntimeError: when no CUDA device is available.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("timing needs a CUDA GPU")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    host_ns = []
    torch.cuda.synchronize()
    gc_was_on = gc.isenabled()
    if gc_off:
        gc.disable()
    try:
        for start, end in zip(starts, ends, strict=True):
            flush.zero_()
            if before_wait is not None:
                before_wait()
            torch.cuda._sleep(SLEEP_CYCLES)
            t0 = time.perf_counter_ns()
            start.record()
            fn()
            end.record()
            host_ns.append(time.perf_counter_ns() - t0)
    finally:
        if gc_was_on:
            gc.enable()
    torch.cuda.synchronize()
    return ([1e3 * s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)],
            [ns / 1e3 for ns in host_ns])


def host_times(fn: Callable[[], object], calls: int, warmup: int = 3) -> list[float]:
    """Host µs to issue each of ``calls`` calls of ``fn`` while the GPU is kept busy.

    A ``SLEEP_CYCLES`` busy-wait is queued before each call and only the call is inside
    ``perf_counter_ns``; no flush, no events, the collector off.

    Raises:
        RuntimeError: when no CUDA device is available.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("timing needs a CUDA GPU")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    host_ns = []
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for _ in range(calls):
            torch.cuda._sleep(SLEEP_CYCLES)
            t0 = time.perf_counter_ns()
            fn()
            host_ns.append(time.perf_counter_ns() - t0)
    finally:
        if gc_was_on:
            gc.enable()
    torch.cuda.synchronize()
    return [ns / 1e3 for ns in host_ns]


def eager_us_per_call(fn: Callable[[], object], calls: int) -> float:
    """Wall µs per call of ``calls`` calls of ``fn`` back to back (no busy-wait, no flush),
    from a synchronised start to a synchronisation after the last call.

    Raises:
        RuntimeError: when no CUDA device is available.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("timing needs a CUDA GPU")
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / 1e3 / calls


HOST_CALLS = 50
EAGER_CALLS = 100
HOST_REPEATS = 10


def host_and_eager_rounds(fns: dict[str, Callable[[], object]], calls: int = HOST_CALLS,
                          eager_calls: int = EAGER_CALLS, repeats: int = HOST_REPEATS
                          ) -> dict[str, tuple[float, float]]:
    """(host µs per call, eager µs per call) of each of ``fns`` in ``repeats`` interleaved
    rounds: round r takes, for each callable in the order of ``fns`` rotated by r,
    :func:`host_times` of ``calls`` calls and one :func:`eager_us_per_call` of ``eager_calls``,
    so a slow phase of the host falls on all alike (lab/2026-12-01-host-path/).

    Returns ``{name: (median host µs, median eager µs)}``, compilation excluded.

    Raises:
        RuntimeError: when no CUDA device is available.
    """
    if not fns:
        return {}
    names = list(fns)
    host: dict[str, list[float]] = {n: [] for n in names}
    eager: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            host[name] += host_times(fns[name], calls)
            fns[name]()  # warm after the host run's queue drained
            eager[name].append(eager_us_per_call(fns[name], eager_calls))
    return {n: (statistics.median(host[n]), statistics.median(eager[n])) for n in names}


def host_and_eager_us(fn: Callable[[], object], calls: int = HOST_CALLS,
                      eager_calls: int = EAGER_CALLS, repeats: int = HOST_REPEATS
                      ) -> tuple[float, float]:
    """(host µs per call, eager µs per call) of ``fn`` alone (:func:`host_and_eager_rounds`).

    Raises:
        RuntimeError: when no CUDA device is available.
    """
    return host_and_eager_rounds({"fn": fn}, calls, eager_calls, repeats)["fn"]


HOST_METHOD = (f"host µs/call: CPU time to issue one call (perf_counter around the call), a "
               f"{SLEEP_CYCLES}-cycle busy-wait queued before each so the GPU stays busy; median "
               f"of {HOST_REPEATS} rounds x {HOST_CALLS} calls, the kernels interleaved round "
               f"by round")
EAGER_METHOD = (f"eager µs/call: wall time of {EAGER_CALLS} calls back to back (no busy-wait, "
                f"no L2 flush), synchronised at the end, / {EAGER_CALLS}; median of the "
                f"{HOST_REPEATS} rounds")


def time_graph(fn: Callable[[], object], calls: int, replays: int) -> list[float]:
    """Per-call time (µs) of ``calls`` launches captured in one CUDA graph, per replay.

    Returns one value per replay: replay time / calls. Inputs stay in L2 between calls.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    out = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        out.append(1e3 * start.elapsed_time(end) / calls)
    return out


def interleaved_rounds(fns: dict[str, Callable[[], object]], rounds: int,
                       calls_per_round: int) -> dict[str, list[float]]:
    """Time several kernels in interleaved rounds; return each kernel's per-round medians (µs).

    Round r times the kernels in the order of ``fns`` rotated by r, each with
    :func:`time_calls` (``calls_per_round`` calls). Every kernel is warmed up once first.
    """
    names = list(fns)
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in progress(range(rounds), "timing rounds", unit="round", leave=False):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            samples = time_calls(fns[name], calls_per_round, warmup=1)
            out[name].append(statistics.median(samples))
    return out

