"""Host µs of transformers' eager decode call through ``attn_implementation="frepro"``, on the
CPU, with the kernel launch stubbed: every call finds a decode plan, and launching it does
nothing. What is left is the integration's and ``kvcache_forward``'s own Python.
(lab/2026-12-03-decode-call-host-cost)

    PYTHONPATH=src python lab/2026-12-03-decode-call-host-cost/host_profile.py
"""

from __future__ import annotations

import cProfile
import os
import pstats
import timeit

os.environ["TRITON_INTERPRET"] = "1"  # CPU tensors pass the device rules

import torch

from flashrepro import launch_varlen
from flashrepro.integrations import transformers as fr_tf

CALLS = 20000


class AlwaysHit(dict):
    """Every plan key finds a plan."""

    def get(self, key, default=None):
        return object()


class Layer(torch.nn.Module):
    is_causal = True
    layer_idx = 3


def main() -> None:
    launch_varlen._DECODE_PLANS = AlwaysHit()
    launch_varlen._launch_plan = lambda *args, **kwargs: None
    # Qwen3-0.6B's decode shapes at B=1: GQA 16/8, D=128, one query, 1025 cached keys
    q = torch.randn(1, 16, 1, 128, dtype=torch.float16)
    k = torch.randn(1, 8, 1025, 128, dtype=torch.float16)
    v = torch.randn_like(k)
    layer = Layer()
    fr_tf.attention_forward(layer, q, k, v, None, scaling=0.088)  # checks the signature once
    calls = {
        "attention_forward": lambda: fr_tf.attention_forward(layer, q, k, v, None,
                                                             scaling=0.088),
        "kvcache_forward": lambda: launch_varlen.kvcache_forward(
            q, k, v, None, causal=True, scale=0.088, enable_gqa=True, num_splits=None,
            return_lse=False, bshd=True),
    }
    for name, fn in calls.items():
        best = min(timeit.repeat(fn, number=CALLS, repeat=5)) / CALLS
        print(f"{name}: {best * 1e6:.2f} µs per call")
    profile = cProfile.Profile()
    profile.runcall(lambda: [calls["attention_forward"]() for _ in range(CALLS)])
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
