"""Host µs of a decode call's parts on a CPU host: transformers' attention_forward for one
Qwen3-0.6B layer at B=1 (q (1, 16, 1, 128), caches (1, 8, L, 128) growing by one key per call,
fp16), plan hits, the launch itself a no-op. Run with TRITON_INTERPRET=1 (CPU tensors pass the
interpreter's checks); the plan's launch object, the kernel's argument binding and the stream
buffers (fresh tensors off a GPU, one cached buffer per stream on it) are stood in for.

    TRITON_INTERPRET=1 PYTHONPATH=src python lab/2026-12-06-decode-call-cpu-breakdown/probe.py
"""

from __future__ import annotations

import statistics
import time
import timeit

import torch

from flashrepro import api, launch_varlen
from flashrepro.integrations import transformers as fr_tf
from flashrepro.kernels import call as kernel_call

B, H, H_KV, D, L0, STEPS = 1, 16, 8, 128, 1024, 64
N = 20000


class _NoLaunch:
    def on_stream(self, grid: object, device: object, io: object, tail: object) -> None:
        pass


class _Layer(torch.nn.Module):
    is_causal = True
    layer_idx = 3


def main() -> None:
    # plans are made (a launch object, the kernel's bound values) but nothing runs
    launch_varlen.launch = lambda call, io_count, extra=(): _NoLaunch()
    kernel_call.KernelCall.ordered_values = lambda self: [*self.args] + [None] * 12
    buffers = (torch.zeros(4096, dtype=torch.int32), torch.empty(1 << 20))
    launch_varlen.stream_buffers = lambda device, count, numel: buffers  # a GPU's cached ones
    layer = _Layer()
    q = torch.randn(B, H, 1, D, dtype=torch.float16)
    ks = [torch.randn(B, H_KV, L0 + i, D, dtype=torch.float16) for i in range(STEPS)]
    vs = [torch.randn(B, H_KV, L0 + i, D, dtype=torch.float16) for i in range(STEPS)]
    scale = D ** -0.5
    for k, v in zip(ks[:3], vs[:3], strict=True):  # the full path once: checks, plans
        fr_tf.attention_forward(layer, q, k, v, None, scaling=scale)

    def loop() -> float:
        t0 = time.perf_counter_ns()
        for k, v in zip(ks, vs, strict=True):
            fr_tf.attention_forward(layer, q, k, v, None, scaling=scale)
        return (time.perf_counter_ns() - t0) / STEPS / 1e3

    rounds = [loop() for _ in range(200)]
    print(f"attention_forward over a growing cache: median {statistics.median(rounds):.2f} µs, "
          f"min {min(rounds):.2f} µs per call (200 rounds of {STEPS} calls)")
    k, v = ks[10], vs[10]
    key = launch_varlen._kvcache_signature(q, k, v, None, True, scale, True, None, False,
                                           None, True)
    shape = launch_varlen._CHECKED_KVCACHE[key]
    plan = next(iter(shape.plans.values()))
    o = q.new_empty((B, 1, H, D))
    parts = {
        "attention_forward (one cache length)":
            lambda: fr_tf.attention_forward(layer, q, k, v, None, scaling=scale),
        "  kvcache_forward": lambda: launch_varlen.kvcache_forward(
            q, k, v, None, causal=True, scale=scale, enable_gqa=True, num_splits=None,
            return_lse=False, bshd=True),
        "    needs_operator": lambda: api.needs_operator(q, k, v, None),
        "    _kvcache_signature": lambda: launch_varlen._kvcache_signature(
            q, k, v, None, True, scale, True, None, False, None, True),
        "      of it: q, k, v ZeroTensor checks": lambda: (
            q._is_zerotensor(), k._is_zerotensor(), v._is_zerotensor()),
        "    signature lookup": lambda: launch_varlen._CHECKED_KVCACHE.get(key),
        "    output new_empty": lambda: q.new_empty((B, 1, H, D)),
        "    split count": lambda: shape.splits(k.shape[2]),
        "    _launch_plan": lambda: launch_varlen._launch_plan(plan, q, k, v, None, o, None,
                                                            k.stride(), k.shape[2]),
        "(an empty call)": lambda: None,
    }
    print(f"splits {shape.splits(k.shape[2])}; best of 5 x {N} calls:")
    for name, fn in parts.items():
        best = min(timeit.repeat(fn, number=N, repeat=5)) / N * 1e6
        print(f"  {name:40s} {best:6.2f} µs")


if __name__ == "__main__":
    main()
