"""At the causal points the table runs on the static persistent grid (snake order, groups at
the L2 bound), is the dynamic schedule with equal head groups faster?
(lab/2026-12-02-d64-long-causal-groups)

fp16, H=16, B·L=16384; rows ``default`` and ``dynamic`` (the entry's tiles with
dynamic_schedule, which select() gives equal head groups); each checked once against the
fp32 reference, then interleaved rounds (L2 flushed, busy-wait, CUDA events). One line per
point as it finishes.

    PYTHONPATH=src:. python lab/2026-12-02-d64-long-causal-groups/snake_points.py
"""

from __future__ import annotations

import dataclasses
import statistics

import flashrepro
from flashrepro.configs import default_config, launch_arch
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem
from tests.reference import assert_parity

POINTS = ((128, 1024), (128, 4096), (64, 2048))



def measure(d: int, length: int) -> str:
    p = Problem(16384 // length, 16, length, length, d, "float16", True)
    q, k, v = p.inputs("cuda", seed=length)
    entry = default_config(d, True, length, launch_arch())
    dynamic = dataclasses.replace(entry, dynamic_schedule=True)
    fns = {"default": lambda: flashrepro.attention(q, k, v, causal=True),
           "dynamic": lambda: flashrepro.attention(q, k, v, causal=True, config=dynamic)}
    for fn in fns.values():
        assert_parity(fn(), None, q, k, v, causal=True)
    rounds = interleaved_rounds(fns, 8, 5)
    ratio = [a / b for a, b in zip(rounds["dynamic"], rounds["default"], strict=True)]
    return (f"D={d} causal L={length} {entry.label()}: default "
            f"{statistics.median(rounds['default']):.1f} µs, dynamic "
            f"{statistics.median(rounds['dynamic']):.1f} µs, dynamic/default "
            f"{statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}]")


if __name__ == "__main__":
    for d, length in POINTS:
        print(measure(d, length), flush=True)
