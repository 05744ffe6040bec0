"""The decode kernel with TMA loads of K and V (decode_tma.py) against the library's (pointer
loads) and SDPA cuDNN, at B=16, L_q=1, GQA 16/8, D=128, bf16, every cache full.
(lab/2026-12-03-decode-tma)

Rows: ``flashrepro`` (attention_kvcache, the default launch); ``tma`` (the same grid, tile
and splits, TMA loads); ``tma 128x4x2/1`` and ``tma 128x4x3/1`` (one program per (batch,
KV head), 128-key blocks, as cuDNN's launch); ``sdpa-cudnn``. Each row's output is checked
against SDPA's float32 math first, then 8 interleaved rounds of 5 calls (L2 flushed,
busy-wait, CUDA events); ratios per round against ``sdpa-cudnn``.

    PYTHONPATH=src:. python lab/2026-12-03-decode-tma/probe.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa
from triton.tools.tensor_descriptor import TensorDescriptor

import flashrepro
from flashrepro.counters import stream_counters
from flashrepro.kernels import LOG2_E
from flashrepro.launch_varlen import (
    MERGE_BLOCK_S,
    MERGE_ELEMENTS,
    _decode_shape,
    num_kv_splits,
)
from flashrepro_harness.bench.timing import interleaved_rounds

sys.path.insert(0, str(Path(__file__).parent))
from decode_tma import decode_tma_kernel


def tma_call(q, k, v, used, block_n=None, num_warps=4, num_stages=None, splits=None):
    """decode_tma_kernel's launch as kvcache_forward would make it (causal, no LSE)."""
    b, h, lq, d = q.shape
    shape = _decode_shape(q, k, torch.cuda.get_device_properties(0).multi_processor_count, None)
    block_n = block_n or shape.config.block_n
    num_stages = num_stages or shape.config.num_stages
    l_max = k.shape[2]
    splits = splits or num_kv_splits(shape.programs, l_max, block_n, shape.num_sms)
    o = torch.empty_like(q)
    grid = (b * k.shape[1], shape.row_blocks, splits)
    if splits > 1:
        parts = torch.empty(b * h * lq * splits * (d + 1), dtype=torch.float32, device=q.device)
        locks = stream_counters(q.device, grid[0] * grid[1])
    else:
        parts, locks = q, used
    kd, vd = (TensorDescriptor.from_tensor(t, [1, 1, block_n, shape.block_d]) for t in (k, v))

    def run() -> torch.Tensor:
        decode_tma_kernel[grid](
            q, kd, vd, o, q, used, parts, locks, *q.stride(), *k.stride(), *o.stride(), 0, 0, 0,
            k.shape[1], shape.kv_group, lq, l_max, splits, LOG2_E / d ** 0.5,
            HEAD_DIM=d, BLOCK_D=shape.block_d, BLOCK_M=shape.block_m, BLOCK_N=block_n,
            CAUSAL=True, SPLIT=splits > 1, STORE_LSE=False, MERGE_S=MERGE_BLOCK_S,
            MERGE_R=max(1, MERGE_ELEMENTS // (MERGE_BLOCK_S * shape.block_d)),
            num_warps=num_warps, num_stages=num_stages)
        return o
    return run, f"{block_n}x{num_warps}x{num_stages}/{splits}"


def measure(b: int, l_k: int) -> str:
    g = torch.Generator("cuda").manual_seed(l_k)
    q = torch.randn(b, 16, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(b, 8, l_k, 128, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(2))
    used = torch.full((b,), l_k, dtype=torch.int32, device="cuda")
    with sdpa_kernel([SDPBackend.MATH]):
        ref = sdpa(q.float(), k.float(), v.float(), enable_gqa=True)

    def cudnn() -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return sdpa(q, k, v, enable_gqa=True)
    fns = {"sdpa-cudnn": cudnn,
           "flashrepro": lambda: flashrepro.attention_kvcache(q, k, v, used, causal=True,
                                                              enable_gqa=True)}
    labels = {}
    for name, kw in (("tma", {}), ("tma 128x4x2/1", dict(block_n=128, num_stages=2, splits=1)),
                     ("tma 128x4x3/1", dict(block_n=128, num_stages=3, splits=1))):
        fns[name], labels[name] = tma_call(q, k, v, used, **kw)
    for name, fn in fns.items():
        err = (fn().float() - ref).abs().max().item()
        assert err < 2e-2, (name, err)
    rounds = interleaved_rounds(fns, 8, 5)
    base = rounds["sdpa-cudnn"]
    out = [f"B={b} L_k={l_k}: sdpa-cudnn {statistics.median(base):.1f} µs"]
    for name in list(fns)[1:]:
        ratio = [a / c for a, c in zip(rounds[name], base, strict=True)]
        out.append(f"{name}{' ' + labels[name] if name == 'tma' else ''} "
                   f"{statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}]")
    return "; ".join(out)


if __name__ == "__main__":
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}",
          flush=True)
    for l_k in (1024, 8192, 32768):
        print(measure(16, l_k), flush=True)
