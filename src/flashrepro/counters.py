"""Per-stream buffers of kernels that synchronise their programs inside a launch: int32
counters at 0, which each launch leaves at 0, and float32 scratch for the parts a split
merges.

Two kernels take such counters: the decode kernel's key splits (the last split of a tile
merges the parts, :mod:`flashrepro.kernels.decode`) and the persistent ws kernel's dynamic
tile schedule and split tail (one ticket per split tile and consumer; its size is
``KernelCall.counters``, :mod:`flashrepro.kernels.fwd_gluon_ws`). Each launch finds its
counters at 0 and puts them back to 0 before it ends, so launches that run one after another
can share them; launches that run at the same time must not. Launches on one CUDA stream run
one after another (none of these kernels is launched with programmatic dependent launch), so
:func:`stream_counters` keeps one buffer per stream. The decode kernel's split parts are
written and read within one launch too, so :func:`stream_scratch` keeps one per stream as well
(an allocation per call is a few µs of host time on a host-bound decode step).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

MIN_COUNTERS = 4096
"""Counters in a stream's first buffer."""
MAX_STREAMS = 64
"""Streams whose buffers are kept before the cache starts over."""

_BUFFERS: dict[tuple[int, int], torch.Tensor] = {}
"""Counters per (GPU, raw stream handle). (A stream destroyed while its launches still run,
whose handle CUDA hands to a new stream at once, would share them: torch's own streams are
pooled and never destroyed.)"""
_SCRATCH: dict[tuple[int, int], torch.Tensor] = {}
"""float32 scratch per (GPU, raw stream handle), as :data:`_BUFFERS`."""
_SIDE_STREAMS: dict[int, torch.cuda.Stream] = {}


def stream_counters(device: torch.device, count: int) -> torch.Tensor:
    """At least ``count`` int32 counters at 0 for one launch on torch's current stream of
    ``device``; the launch must leave them at 0.

    Eager launches share one buffer per stream (no allocation or memset per call): launches
    on one stream never overlap, and two streams never share counters. In a CUDA-graph capture
    each launch gets fresh zeros (the memset is captured with it), so replays of graphs on
    several streams share nothing either. A stream's buffer is allocated by
    :func:`_outside_pools`, and the launching stream waits for its zeros; no host sync.
    Off a GPU (the interpreter): fresh zeros."""
    return _stream_buffer(_BUFFERS, device, count, MIN_COUNTERS, torch.zeros, torch.int32)


def stream_scratch(device: torch.device, numel: int) -> torch.Tensor:
    """At least ``numel`` float32 elements, uninitialised, for one launch on torch's current
    stream of ``device`` that writes every element it reads within the launch.

    Eager launches share one buffer per stream (grown to the largest request), as
    :func:`stream_counters`' counters; in a CUDA-graph capture, and off a GPU, each launch
    gets a fresh tensor (the graph's own memory)."""
    return _stream_buffer(_SCRATCH, device, numel, 0, torch.empty, torch.float32)


def stream_buffers(device: torch.device, count: int, numel: int
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``stream_counters(device, count)`` and, where ``numel`` > 0, ``stream_scratch(device,
    numel)`` (else None): what one split launch takes, found with one lookup of the current
    stream when both buffers are there and large enough (a decode step asks once per layer)."""
    if (device.type == "cuda" and device.index == torch._C._cuda_getDevice()
            and not torch._C._cuda_isCurrentStreamCapturing()):
        key = (device.index, torch._C._cuda_getCurrentRawStream(device.index))
        counters = _BUFFERS.get(key)
        scratch = _SCRATCH.get(key) if numel else None
        if (counters is not None and counters.numel() >= count
                and (not numel or (scratch is not None and scratch.numel() >= numel))):
            return counters, scratch
    return (stream_counters(device, count),
            stream_scratch(device, numel) if numel else None)


def _stream_buffer(cache: dict[tuple[int, int], torch.Tensor], device: torch.device,
                   count: int, minimum: int, make: Any, dtype: torch.dtype) -> torch.Tensor:
    """At least ``count`` elements of ``make(n, dtype=dtype)`` for torch's current stream of
    ``device``: its buffer in ``cache``, replaced by one of max(``count``, ``minimum``)
    elements where it is missing or smaller. A new buffer is made by :func:`_outside_pools` on
    a side stream, which the current stream waits for, and is freed only after the current
    stream's work. In a CUDA-graph capture and off a GPU: a fresh ``make(count)``."""
    if device.type != "cuda" or _capturing(device):
        return make(count, dtype=dtype, device=device)
    if device.index is None:  # torch.device("cuda"): the current GPU's
        device = torch.device("cuda", torch.cuda.current_device())
    key = (device.index, torch._C._cuda_getCurrentRawStream(device.index))
    buffer = cache.get(key)
    if buffer is not None and buffer.numel() >= count:
        return buffer
    if len(cache) >= MAX_STREAMS:  # a dropped buffer is freed after its streams' work
        cache.clear()
    size = max(count, minimum)
    current = torch.cuda.current_stream(device)
    side = _SIDE_STREAMS.get(device.index)
    if side is None:
        side = _SIDE_STREAMS[device.index] = torch.cuda.Stream(device)
    buffer = _outside_pools(device, side, lambda: make(size, dtype=dtype, device=device))
    current.wait_stream(side)
    buffer.record_stream(current)
    cache[key] = buffer
    return buffer


def _capturing(device: torch.device) -> bool:
    """Whether torch's current stream of ``device`` (not of the current GPU) is capturing."""
    if device.index == torch._C._cuda_getDevice():
        return torch._C._cuda_isCurrentStreamCapturing()
    with torch.cuda.device(device):
        return torch._C._cuda_isCurrentStreamCapturing()


def _outside_pools(device: torch.device, stream: torch.cuda.Stream,
                   make: Any) -> torch.Tensor:
    """``make()`` run on ``stream`` by a thread of its own: torch.compile's CUDA-graph trees
    route every allocation of the warming-up thread into their pool
    (``_cuda_beginAllocateCurrentThreadToPool``) and refuse a live block there that no graph
    output owns ("tensor(s) in the cudagraph pool not tracked as outputs")."""
    box: list[torch.Tensor | BaseException] = []

    def allocate() -> None:
        try:
            with torch.cuda.device(device), torch.cuda.stream(stream):
                box.append(make())
        except BaseException as exc:  # raised again in the calling thread
            box.append(exc)

    worker = threading.Thread(target=allocate, name="flashrepro-stream-buffers")
    worker.start()
    worker.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]
