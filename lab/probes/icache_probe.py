"""Does a timed call pay for fetching the kernel's code? (diagnostic; lab/2026-11-29-call-fixed-cost-cold-cache/)

With every cache cold (Nsight Compute ``--cache-control all``) the ws kernel's warps stall on
instruction fetch 4-7x as often as warm and the kernel takes 36.3 µs against cuDNN's 32.6
(cold_cache.sh, stalls.sh there). The project's timer flushes L2 before each call, which evicts the code from
L2 too. Here each kernel is timed by the project's timer (``time_calls_and_host``: L2
flushed, busy-wait, CUDA events around one call) and, alternately, with the same compiled
kernel launched once on a tiny problem between the flush and the busy-wait (its
``before_wait``), outside the timed events: its code (and little data) is
then in L2 and in one SM's caches. The difference bounds what the timed call pays for code
fetches from HBM; it is a diagnostic, not a way of timing (the reported numbers never
pre-warm). On an H200, from the repository root:

    PYTHONPATH=src:. python lab/probes/icache_probe.py

The committed run (5c484e2, lab/2026-11-29-call-fixed-cost-cold-cache/stalls/icache.txt)
wrote the timer's steps out in the probe, with Python's garbage collector left on.
"""

from __future__ import annotations

import statistics

import torch
from tabulate import tabulate

from flashrepro.bench.problem import Problem, load_article
from flashrepro.bench.timing import time_calls_and_host
from flashrepro.kernels import fwd_gluon_ws
from lab.probes.gluon_probe import peer_calls

ROUNDS, CALLS = 20, 10


def _compiled() -> int:
    """Binaries of the ws kernel compiled so far in this process (Triton's per-device cache)."""
    return sum(len(c[0]) for c in fwd_gluon_ws.attn_fwd_gluon_ws_kernel.device_caches.values())


def main() -> None:
    article, _ = load_article()
    for causal in (False, True):
        problem = Problem(**{**article.as_dict(), "causal": causal})
        # Same B, H (so the same heads_per_group, 32) and the same integer specializations as
        # the article problem: the tiny call runs the very binary the timed call runs (the
        # compiled-kernel count below must not grow).
        tiny = Problem(**{**problem.as_dict(), "seqlen_q": 128, "seqlen_k": 128})
        fns = peer_calls(*problem.inputs(), causal)
        warms = peer_calls(*tiny.inputs(), causal)
        fns["flashrepro"]()
        torch.cuda.synchronize()
        before = _compiled()
        for fn in (*fns.values(), *warms.values()):
            fn()
        torch.cuda.synchronize()
        print(f"ws kernel binaries: {before} after the timed problem, {_compiled()} after the "
              "tiny one too (equal: the same binary)", flush=True)
        medians: dict[str, list[float]] = {}
        for _ in range(ROUNDS):
            for name, fn in fns.items():
                for label, warm in (("", None), (" + tiny call before", warms[name])):
                    gpu_us, _ = time_calls_and_host(fn, CALLS, warmup=0, before_wait=warm)
                    medians.setdefault(name + label, []).append(statistics.median(gpu_us))
        rows = [[problem.key(), name, f"{statistics.median(m):.2f}",
                 f"{statistics.quantiles(m, n=4)[0]:.2f}-{statistics.quantiles(m, n=4)[2]:.2f}"]
                for name, m in medians.items()]
        print(tabulate(rows, ["problem", "kernel", "µs (median of round medians)",
                              "IQR of rounds"], tablefmt="github"), flush=True)


if __name__ == "__main__":
    main()
