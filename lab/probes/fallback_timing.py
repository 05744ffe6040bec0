"""Where the tuned table's sm_90 entry is the ws kernel but the launch cannot use it (D not 64
or 128, bottom-right causal with Lq > Lk), the Triton kernel runs at the ws entry's tiles
(128x128 w8 s2). Time that against the pre-ws table's choice (64x64 w4 s3 tma) in
interleaved rounds. On the H200:

    PYTHONPATH=src python lab/probes/fallback_timing.py
"""
import statistics

import torch

import flashrepro
from flashrepro.bench.timing import interleaved_rounds

CASES = [  # (label, B, H, Lq, Lk, D, causal, alignment)
    ("d96 full L4096", 4, 16, 4096, 4096, 96, False, "top_left"),
    ("d96 causal L4096", 4, 16, 4096, 4096, 96, True, "top_left"),
    ("d80 full L1024", 16, 16, 1024, 1024, 80, False, "top_left"),
    ("d128 bottom-right Lq>Lk", 4, 16, 4096, 2048, 128, True, "bottom_right"),
]


def call(q, k, v, causal, align, cfg):
    """One attention launch at ``cfg`` (a label, or None for the default config)."""
    config = None if cfg is None else flashrepro.KernelConfig.parse(cfg)
    return lambda: flashrepro.attention(q, k, v, causal=causal, causal_alignment=align,
                                        config=config)


for label, b, h, lq, lk, d, causal, align in CASES:
    q = torch.randn(b, h, lq, d, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(b, h, lk, d, device="cuda", dtype=torch.float16) for _ in range(2))
    fns = {cfg or "default": call(q, k, v, causal, align, cfg)
           for cfg in (None, "64x64 w4 s3 tma", "128x64 w8 s3 tma")}
    times = {n: statistics.median(s) for n, s in
             interleaved_rounds(fns, rounds=5, calls_per_round=20).items()}
    print(label, {n: f"{t:.1f} us" for n, t in times.items()}, flush=True)
