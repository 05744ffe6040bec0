"""Host cost of one eager attention call at the article problem, each way of calling it.

    PYTHONPATH=src python lab/2026-12-01-host-path/run.py [--out DIR]

Rows: flashrepro's full path (the plan cache emptied before every call: validation, kernel
choice, descriptors, Triton's binder), its launch-plan path (the default), the torch operator
called eagerly, torch SDPA with cuDNN and with flash, and FA4's CuTe kernel where
``flash_attn.cute`` imports. Columns: host µs per call (issued while a busy-wait keeps the GPU
busy, so the queue never blocks: :func:`flashrepro.bench.timing.host_times`), eager µs per
call (back to back, synchronised once: :func:`flashrepro.bench.timing.eager_us_per_call`), and
the kernel's own µs (CUDA events, L2 flushed). Medians of 5 repeats of 200 calls.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

import flashrepro
from flashrepro import env, launch
from flashrepro.bench import peers
from flashrepro.bench.timing import eager_us_per_call, host_times, time_calls


def _eager_gc_off(fn, calls: int) -> float:
    """As eager_us_per_call, with the collector off and more calls."""
    gc.disable()
    try:
        return eager_us_per_call(fn, calls)
    finally:
        gc.enable()


def _kernel_us_back_to_back(fn, calls: int) -> list[float]:
    """GPU µs of each call inside an eager back-to-back loop (events around each call): does
    the kernel itself run slower when the host feeds it without a queue (clocks, launch)?"""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(calls)]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [1e3 * s.elapsed_time(e) for s, e in events]


def _device_us_queued(fn, calls: int) -> float:
    """GPU µs per call of ``calls`` calls queued behind a long busy-wait, events around the
    whole batch: the device time of back-to-back calls (L2 warm), which an eager loop's wall
    time per call equals when the call is device-bound."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # ~100 ms, longer than issuing the calls
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return 1e3 * start.elapsed_time(end) / calls


def _plan_pieces(q, k, v) -> list[list[str]]:
    """Host µs of each piece of the launch-plan path, each timed alone in a loop of 500 (fewer
    launches than CUDA's queue holds, so none blocks)."""
    flashrepro.attention(q, k, v, causal=True)
    key = launch._signature(q, k, v, True, None, False, "top_left", False, None)
    plan = launch._PLANS[key]
    o = torch.empty_like(q)
    lse = plan.lse_dummy
    stream = torch._C._cuda_getCurrentRawStream(0)
    pieces = {
        "piece: _signature (cache key)": lambda: launch._signature(
            q, k, v, True, None, False, "top_left", False, None),
        "piece: torch.empty (output)": lambda: torch.empty(plan.out_shape, dtype=q.dtype,
                                                          device=q.device),
        "piece: direct launch only": lambda: plan.direct(plan.grid, stream, (q, k, v, o, lse)),
        "piece: plan.launch": lambda: plan.launch(q, k, v),
        "piece: torch.compiler.is_compiling": torch.compiler.is_compiling,
    }
    rows = []
    for name, fn in pieces.items():
        torch.cuda.synchronize()
        torch.cuda._sleep(200_000_000)  # ~100 ms: the GPU queue never blocks the loop
        t0 = time.perf_counter_ns()
        for _ in range(500):
            fn()
        rows.append([name, f"{(time.perf_counter_ns() - t0) / 500 / 1e3:.2f}", *[""] * 5])
        torch.cuda.synchronize()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    b, h, lq, d = 2, 16, 1024, 128
    q, k, v = (torch.randn(b, h, lq, d, device="cuda", dtype=torch.float16) for _ in range(3))
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def full() -> object:
        launch.clear_plans()
        return flashrepro.attention(q, k, v, causal=True)

    def sdpa_with(backend: SDPBackend):
        def fn() -> object:
            with sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=True)
        return fn

    fns = {
        "flashrepro, full path": full,
        "flashrepro, launch plan": lambda: flashrepro.attention(q, k, v, causal=True),
        "torch.ops.flashrepro.attention": lambda: torch.ops.flashrepro.attention(
            q, k, v, True, None, False, "top_left", None),
        "sdpa cudnn": sdpa_with(SDPBackend.CUDNN_ATTENTION),
        "sdpa flash": sdpa_with(SDPBackend.FLASH_ATTENTION),
    }
    fa4 = peers.import_error("fa4-cute")
    if fa4 is None:
        from flash_attn.cute import flash_attn_func
        qn, kn, vn = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        fns["fa4-cute"] = lambda: flash_attn_func(qn, kn, vn, causal=True)
    rows, raw = [], {}
    for name, fn in fns.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        host = statistics.median(statistics.median(host_times(fn, 200)) for _ in range(5))
        eager = statistics.median(eager_us_per_call(fn, 200) for _ in range(5))
        long_eager = _eager_gc_off(fn, 2000)
        in_eager = statistics.median(_kernel_us_back_to_back(fn, 200))
        queued = statistics.median(_device_us_queued(fn, 200) for _ in range(5))
        kernel = statistics.median(time_calls(fn, 50))
        raw[name] = {"host_us": host, "eager_us": eager, "eager_2000_gc_off_us": long_eager,
                     "kernel_us_in_eager_loop": in_eager, "device_us_queued": queued,
                     "kernel_us": kernel}
        rows.append([name, f"{host:.1f}", f"{eager:.1f}", f"{long_eager:.1f}",
                     f"{in_eager:.1f}", f"{queued:.1f}", f"{kernel:.1f}"])
    rows += _plan_pieces(q, k, v)
    table = tabulate(rows, headers=["call", "host µs/call", "eager µs/call", "eager, 2000 calls, gc off",
                                   "kernel µs in the eager loop", "device µs/call, queued",
                                   "kernel µs (L2 flushed)"])
    meta = env.capture()
    text = (f"B={b} H={h} L={lq} D={d} fp16 causal; {meta['gpu']['name'] if meta['gpu'] else ''}"
            f", torch {meta['torch']}, triton {meta['triton']}, {meta['date']}"
            + ("" if fa4 is None else f"; fa4-cute not run: {fa4}") + "\n\n" + table)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "host_path.json").write_text(json.dumps({"env": meta, "rows": raw}, indent=1))
        (args.out / "host_path.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
