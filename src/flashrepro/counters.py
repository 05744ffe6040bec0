"""int32 counters at 0 for kernels that count inside a launch and leave their counters at 0.

Two kernels take such counters: the decode kernel's key splits (the last split of a tile
merges the parts, :mod:`flashrepro.kernels.decode`) and the persistent ws kernel's dynamic
tile schedule and split tail (one ticket per split tile and consumer; its size is
``KernelCall.counters``, :mod:`flashrepro.kernels.fwd_gluon_ws`). Each launch finds its
counters at 0 and puts them back to 0 before it ends, so launches that run one after another
can share them; launches that run at the same time must not. Launches on one CUDA stream run
one after another (none of these kernels is launched with programmatic dependent launch), so
:func:`stream_counters` keeps one buffer per stream.
"""

from __future__ import annotations

import threading

import torch

MIN_COUNTERS = 4096
"""Counters in a stream's first buffer."""
MAX_STREAMS = 64
"""Streams whose buffers are kept before the cache starts over."""

_BUFFERS: dict[tuple[int, int], torch.Tensor] = {}
"""Counters per (GPU, raw stream handle). (A stream destroyed while its launches still run,
whose handle CUDA hands to a new stream at once, would share them: torch's own streams are
pooled and never destroyed.)"""
_SIDE_STREAMS: dict[int, torch.cuda.Stream] = {}


def stream_counters(device: torch.device, count: int) -> torch.Tensor:
    """At least ``count`` int32 counters at 0 for one launch on torch's current stream of
    ``device``; the launch must leave them at 0.

    Eager launches share one buffer per stream (no allocation or memset per call): launches
    on one stream never overlap, and two streams never share counters. In a CUDA-graph capture
    each launch gets fresh zeros (the memset is captured with it), so replays of graphs on
    several streams share nothing either. A stream's buffer is allocated by
    :func:`_zeros_outside_pools`, and the launching stream waits for its zeros; no host sync.
    Off a GPU (the interpreter): fresh zeros."""
    if device.type != "cuda" or _capturing(device):
        return torch.zeros(count, dtype=torch.int32, device=device)
    key = (device.index, torch._C._cuda_getCurrentRawStream(device.index))
    counters = _BUFFERS.get(key)
    if counters is None or counters.numel() < count:
        if len(_BUFFERS) >= MAX_STREAMS:  # a dropped buffer is freed after its streams' work
            _BUFFERS.clear()
        current = torch.cuda.current_stream(device)
        side = _SIDE_STREAMS.get(device.index)
        if side is None:
            side = _SIDE_STREAMS[device.index] = torch.cuda.Stream(device)
        counters = _zeros_outside_pools(device, side, max(count, MIN_COUNTERS))
        current.wait_stream(side)
        counters.record_stream(current)  # freed only after the launching stream's work
        _BUFFERS[key] = counters
    return counters


def _capturing(device: torch.device) -> bool:
    """Whether torch's current stream of ``device`` (not of the current GPU) is capturing."""
    if device.index == torch._C._cuda_getDevice():
        return torch._C._cuda_isCurrentStreamCapturing()
    with torch.cuda.device(device):
        return torch._C._cuda_isCurrentStreamCapturing()


def _zeros_outside_pools(device: torch.device, stream: torch.cuda.Stream,
                         count: int) -> torch.Tensor:
    """int32 zeros allocated and zeroed on ``stream`` by a thread of their own: torch.compile's
    CUDA-graph trees route every allocation of the warming-up thread into their pool
    (``_cuda_beginAllocateCurrentThreadToPool``) and refuse a live block there that no graph
    output owns ("tensor(s) in the cudagraph pool not tracked as outputs")."""
    box: list[torch.Tensor | BaseException] = []

    def allocate() -> None:
        try:
            with torch.cuda.device(device), torch.cuda.stream(stream):
                box.append(torch.zeros(count, dtype=torch.int32, device=device))
        except BaseException as exc:  # raised again in the calling thread
            box.append(exc)

    worker = threading.Thread(target=allocate, name="flashrepro-stream-counters")
    worker.start()
    worker.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]
