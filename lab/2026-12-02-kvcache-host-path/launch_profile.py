"""Which part of an eager ``attention_kvcache`` call costs its host time on the GPU host (GPU)?

The call cost ~100 µs in a loop of its own at B=1 (decode_host_time.py), against ~26 µs for its
Python without the launch on a CPU host and 23 µs for ``flashrepro.attention`` from its plan.
Times, per call, 2000 calls each, no busy-wait (the kernels are short): the whole call; the
decode kernel's ``direct.launch`` from a prebuilt KernelCall; its DirectLaunch alone; the
KernelCall's ``ordered_values`` and ``specialization``; ``torch.empty`` of the split parts; and
``flashrepro.attention`` for comparison. Then a cProfile of 2000 calls, by own time.

    PYTHONPATH=src python3 lab/2026-12-02-kvcache-host-path/launch_profile.py
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable

import torch

import flashrepro
from flashrepro import direct
from flashrepro.kernels.call import KernelCall
from flashrepro.kernels.decode import decode_fwd_kernel


def per_call(fn: Callable[[], object], n: int = 2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return us


def main() -> None:
    b, h, h_kv, d, length = 1, 16, 8, 128, 1024
    q = torch.randn(b, 1, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k, v = (torch.randn(b, h_kv, length, d, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    out = torch.empty(b, 1, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    used = torch.full((b,), length, dtype=torch.int32, device="cuda")
    o_part = torch.empty(b, h, 1, 16, d, device="cuda")
    lse_part = torch.empty(b, h, 1, 16, device="cuda")
    call = KernelCall(decode_fwd_kernel, (b * h_kv, 1, 16), (
        q, k, v, o_part, lse_part, used, *q.stride(), *k.stride(), *o_part.stride(),
        *lse_part.stride(), h_kv, h // h_kv, 1, length, 16, 0.127), dict(
        HEAD_DIM=d, BLOCK_D=d, BLOCK_M=16, BLOCK_N=64, CAUSAL=True, STORE_LSE=True,
        num_warps=4, num_stages=3))
    flags = tuple(p.is_constexpr for p in decode_fwd_kernel.params)
    values = call.ordered_values()
    with torch.inference_mode():
        direct.launch(call, 6)
        direct.launch(call, 6)
        (dl,) = [x for x in direct._COMPILED.values() if x is not None][:1]
        stream = torch._C._cuda_getCurrentRawStream(0)
        rows = {
            "attention_kvcache (B=1, out=)": lambda: flashrepro.attention_kvcache(
                q, k, v, used, causal=True, enable_gqa=True, out=out),
            "direct.launch(decode call)": lambda: direct.launch(call, 6),
            "DirectLaunch(tail)": lambda: dl((b * h_kv, 1, 16), stream, tuple(values[:6]),
                                             values[6:]),
            "ordered_values": call.ordered_values,
            "specialization": lambda: direct.specialization(flags, values),
            "2x torch.empty (parts)": lambda: (torch.empty(b, h, 1, 16, d, device="cuda"),
                                               torch.empty(b, h, 1, 16, device="cuda")),
            "attention (dense, out=)": lambda: flashrepro.attention(
                q, k, v, enable_gqa=True, out=out),
        }
        for name, fn in rows.items():
            print(f"{name:34s} {per_call(fn):8.2f} µs/call")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            flashrepro.attention_kvcache(q, k, v, used, causal=True, enable_gqa=True, out=out)
        prof.disable()
        torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
