"""Host time per call against GPU time per call, at the article config (lab/2026-11-29-host-time-per-call/).

Run from the repository root on a GPU machine:

    PYTHONPATH=src python lab/probes/host_probe.py

For each kernel: the host's time per call (``time.perf_counter`` over 1000 back-to-back calls,
no synchronisation inside: what an eager caller pays on the CPU), the events time per call
(:func:`flashrepro.bench.timing.time_calls`, L2 flushed, busy-wait before each call) and the
CUDA-graph time per call (:func:`flashrepro.bench.timing.time_graph`, hot L2, no host work).
A kernel whose host time exceeds its GPU time is host-bound when called eagerly.
"""

from __future__ import annotations

import statistics
import time

import torch
from tabulate import tabulate

from flashrepro.bench import kernels as K
from flashrepro.bench.problem import load_article
from flashrepro.bench.timing import busy_wait_us, time_calls, time_graph

NAMES = ["flashrepro", "flashrepro-article-config", "article-kernel", "torch-flash",
         "torch-cudnn"]


def host_us(fn, calls: int = 1000) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main() -> None:
    problem, _ = load_article()
    rows = []
    for causal in (True, False):
        inputs = problem.inputs()
        for name in NAMES:
            fn = K.make_call(name, inputs, causal)
            rows.append([name, "causal" if causal else "non-causal", f"{host_us(fn):.1f}",
                         f"{statistics.median(time_calls(fn, 50)):.1f}",
                         f"{statistics.median(time_graph(fn, 20, 10)):.1f}"])
    print(f"busy-wait: {busy_wait_us():.0f} µs")
    print(tabulate(rows, ["kernel", "mask", "host µs/call", "events µs", "graph µs"],
                   tablefmt="github"))


if __name__ == "__main__":
    main()
