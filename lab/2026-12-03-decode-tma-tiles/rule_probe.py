"""Where does one split with 128-key, 3-stage tiles pay? The library's decode kernel (pointer
loads) through ``kvcache_forward``'s ``config`` and ``num_splits`` at B in {8, 10, 12, 16, 24,
32} (64-192 programs of (batch, kv head) on 132 SMs), L_k in {1k, 8k, 32k}: the default launch
(``flashrepro``, at this commit's rule) and ``ptr BNxWxS/splits`` cells, against SDPA cuDNN
and flash; otherwise as probe.py. (lab/2026-12-03-decode-tma-tiles)

    PYTHONPATH=src:. python lab/2026-12-03-decode-tma-tiles/rule_probe.py
"""

from __future__ import annotations

import statistics

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import flashrepro
from flashrepro.launch_varlen import DecodeConfig, kvcache_forward
from flashrepro_harness.bench.timing import interleaved_rounds

CELLS = ((64, 4, 3, 1), (64, 4, 3, 2), (128, 4, 3, 1), (128, 4, 3, 2), (128, 4, 2, 1))


def measure(b: int, l_k: int) -> str:
    g = torch.Generator("cuda").manual_seed(b * 100003 + l_k)
    q = torch.randn(b, 16, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(b, 8, l_k, 128, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(2))
    used = torch.full((b,), l_k, dtype=torch.int32, device="cuda")
    with sdpa_kernel([SDPBackend.MATH]):
        ref = sdpa(q.float(), k.float(), v.float(), enable_gqa=True)

    def backend(which: SDPBackend):
        def run() -> torch.Tensor:
            with sdpa_kernel([which]):
                return sdpa(q, k, v, enable_gqa=True)
        return run

    def pointer(bn: int, w: int, s: int, splits: int):
        def run() -> torch.Tensor:
            return kvcache_forward(q, k, v, used, causal=True, scale=None, enable_gqa=True,
                                   num_splits=splits, return_lse=False,
                                   config=DecodeConfig(bn, w, s))[0]
        return run
    fns = {"flashrepro": lambda: flashrepro.attention_kvcache(q, k, v, used, causal=True,
                                                              enable_gqa=True)}
    for bn, w, s, splits in CELLS:
        fns[f"ptr {bn}x{w}x{s}/{splits}"] = pointer(bn, w, s, splits)
    peers = {"sdpa-cudnn": backend(SDPBackend.CUDNN_ATTENTION),
             "sdpa-flash": backend(SDPBackend.FLASH_ATTENTION)}
    for name, fn in {**fns, **peers}.items():
        o = torch.full_like(q, float("nan"))
        o.copy_(fn())
        err = (o.float() - ref).abs().max().item()
        assert err < 2e-2, (name, err)
    rounds = interleaved_rounds({**fns, **peers}, 8, 5)
    best = [min(c, f) for c, f in zip(rounds["sdpa-cudnn"], rounds["sdpa-flash"], strict=True)]
    out = [f"B={b} L_k={l_k}: best SDPA {statistics.median(best):.1f} µs "
           f"(cudnn {statistics.median(rounds['sdpa-cudnn']):.1f}, "
           f"flash {statistics.median(rounds['sdpa-flash']):.1f})"]
    for name in fns:
        ratio = [a / c for a, c in zip(rounds[name], best, strict=True)]
        out.append(f"  {name:22s} {statistics.median(ratio):.3f} "
                   f"[{min(ratio):.3f}-{max(ratio):.3f}]")
    return "\n".join(out)


if __name__ == "__main__":
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}",
          flush=True)
    for b in (8, 10, 12, 16, 24, 32):
        for l_k in (1024, 8192, 32768):
            print(measure(b, l_k), flush=True)
