"""The dynamic claim's atomics, relaxed against acq_rel, where the table was already dynamic:
causal L in {8192, 16384}, D in {64, 128}, fp16, H=16, B·L=16384 (the sweep's points).
(lab/2026-12-03-dynamic-schedule-tile-count)

Rows: ``dynamic`` (the table's entry; this commit's kernel, relaxed atomics) and
``dynamic-acq_rel`` (the same launch of lab/2026-12-02-claim-ahead's copy of the kernel before
the change, via ``tile_count.old_launch``). Parity against the fp32 reference first, then 12
interleaved rounds of 5 calls; ratios per round against ``dynamic``.

    PYTHONPATH=src:. python lab/2026-12-03-dynamic-schedule-tile-count/long_causal.py
"""

from __future__ import annotations

import statistics

import torch
import triton
from tile_count import old_launch  # this script's folder is first on sys.path

import flashrepro
from flashrepro.configs import default_config, launch_arch
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem
from tests.reference import assert_parity

if __name__ == "__main__":
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}")
    for d in (64, 128):
        for length in (8192, 16384):
            p = Problem(16384 // length, 16, length, length, d, "float16", True)
            q, k, v = p.inputs("cuda", seed=length)
            entry = default_config(d, True, length, launch_arch())
            assert entry.dynamic_schedule, entry
            fns = {"dynamic": lambda q=q, k=k, v=v: flashrepro.attention(q, k, v, causal=True),
                   "dynamic-acq_rel": old_launch(q, k, v, entry)}
            for fn in fns.values():
                assert_parity(fn(), None, q, k, v, causal=True)
            rounds = interleaved_rounds(fns, 12, 5)
            ratio = [a / b for a, b in zip(rounds["dynamic-acq_rel"], rounds["dynamic"],
                                           strict=True)]
            print(f"D={d} L={length} {entry.label()}: dynamic "
                  f"{statistics.median(rounds['dynamic']):.1f} µs; dynamic-acq_rel "
                  f"{statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}]",
                  flush=True)
