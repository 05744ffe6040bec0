"""The fixed cost of a call: flashrepro against cuDNN and flash on problems too small to hide it
(lab/2026-11-29-call-fixed-cost-cold-cache/).

The timeline of lab/2026-11-29-three-consumer-tile/ of the article problem non-causal summed to ~46.6 kcycles per
consumer and its warps spanned ~49.8 kcycles, while Nsight Compute gave the kernel 31.7 µs
(~55 kcycles at 1.75 GHz) and a timed call 35.7 µs: a few µs of each call lie outside any
consumer phase (the CTAs' launch and set-up, the last store's drain, the launch itself). Are
they ours, or does cuDNN pay them too? Problems at D = 128, fp16, non-causal, with 132 tiles of
128 rows (one per SM) of 1, 2 and 4 key blocks, one tile alone, and the article problem:

    PYTHONPATH=src:. python lab/2026-11-29-call-fixed-cost-cold-cache/floor_probe.py timing
    PYTHONPATH=src:. python lab/2026-11-29-call-fixed-cost-cold-cache/floor_probe.py calls   # back-to-back, for ncu

timing: interleaved rounds with the project's timer (L2 flushed, busy-wait before each call):
flashrepro's default launch, the ws kernel with one program per tile, torch's cuDNN and flash.
calls: 5 back-to-back calls of flashrepro, cuDNN and flash on each of the first four problems,
for Nsight Compute to read each kernel's own duration (``floor.sh`` beside this file).
"""

from __future__ import annotations

import sys

from tabulate import tabulate

from flashrepro.bench.problem import Problem
from flashrepro.bench.timing import interleaved_rounds
from lab.probes.gluon_probe import RATIO_HEADERS, peer_calls, ratio_rows
from lab.probes.kernel_durations import back_to_back
from lab.probes.ws_probe import ws_call

SHAPES = [(1, 1, 128), (1, 132, 128), (1, 66, 256), (1, 33, 512), (2, 16, 1024)]  # B, H, L


def problems() -> list[Problem]:
    return [Problem(batch=b, heads=h, seqlen_q=n, seqlen_k=n, head_dim=128, dtype="float16",
                    causal=False) for b, h, n in SHAPES]


def timing() -> None:
    for problem in problems():
        q, k, v = problem.inputs()
        fns = peer_calls(q, k, v, False)
        fns["ws tilegrid"] = ws_call(q, k, v, False, (128, 2), None)
        rows = ratio_rows(problem, interleaved_rounds(fns, rounds=20, calls_per_round=10))
        print(tabulate(rows, RATIO_HEADERS, tablefmt="github"), flush=True)


def calls() -> None:
    for problem in problems()[:4]:
        back_to_back(problem, 5)


if __name__ == "__main__":
    {"timing": timing, "calls": calls}[sys.argv[1]]()
