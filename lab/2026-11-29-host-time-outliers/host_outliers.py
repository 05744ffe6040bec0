"""Where the rare ~1 ms host times of timed calls come from (lab/2026-11-29-host-time-outliers/).

Run from the repository root on a GPU machine:

    PYTHONPATH=src python lab/2026-11-29-host-time-outliers/host_outliers.py

Times with :func:`flashrepro.bench.timing.time_calls_and_host` (time_calls' loop: L2 flush,
busy-wait, event, call, event) for 60 rounds of 10 calls per kernel at the article config, with
Python's garbage collector on and then off during the timed calls, and reports the host time
per call (``start.record()`` to after ``end.record()``): median, 99th percentile, maximum, how
many calls passed 80 % of the busy-wait, and how many of those were the first call of a round.
(The committed results came from this script's first version, which repeated that loop
itself.)
"""

from __future__ import annotations

import gc
import statistics

from tabulate import tabulate

from flashrepro.bench import kernels as K
from flashrepro.bench.problem import load_article
from flashrepro.bench.timing import HOST_MARGIN, busy_wait_us, time_calls_and_host

NAMES = ["flashrepro", "flashrepro-article-config", "torch-flash"]
ROUNDS, CALLS = 60, 10


def host_times(fn, gc_on: bool) -> list[tuple[int, float]]:
    """(index in round, host µs) of ROUNDS x CALLS calls timed as time_calls times them."""
    out = []
    for _ in range(ROUNDS):
        _, host_us = time_calls_and_host(fn, CALLS, warmup=1, gc_off=not gc_on)
        out += list(enumerate(host_us))
    return out


def main() -> None:
    problem, _ = load_article()
    wait = busy_wait_us()
    rows = []
    for causal in (True, False):
        inputs = problem.inputs()
        for name in NAMES:
            fn = K.make_call(name, inputs, causal)
            for gc_on in (True, False):
                gc.collect()
                samples = host_times(fn, gc_on)
                us = sorted(t for _, t in samples)
                over = [(i, t) for i, t in samples if t > HOST_MARGIN * wait]
                rows.append([name, "causal" if causal else "non-causal", "on" if gc_on else "off",
                             f"{statistics.median(us):.0f}", f"{us[int(0.99 * len(us))]:.0f}",
                             f"{us[-1]:.0f}", f"{len(over)} / {len(us)}",
                             sum(i == 0 for i, _ in over)])
    print(f"busy-wait: {wait:.0f} µs; warning margin {HOST_MARGIN:.0%} = "
          f"{HOST_MARGIN * wait:.0f} µs")
    print(tabulate(rows, ["kernel", "mask", "gc", "host µs p50", "p99", "max",
                          "calls > margin", "of them first in round"], tablefmt="github"))


if __name__ == "__main__":
    main()
