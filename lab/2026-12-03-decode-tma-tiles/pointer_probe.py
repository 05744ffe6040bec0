"""Is it the TMA loads or the tile? The library's decode kernel (pointer loads) at the tiles
where the TMA kernel led (``ptr BNxWxS/splits``, through ``kvcache_forward``'s ``config``)
against ``tma 128x4x3/1``, the default launch and SDPA cuDNN and flash, at B in {16, 32, 64}
and L_k in {1k, 8k, 32k}; otherwise as probe.py. (lab/2026-12-03-decode-tma-tiles)

    PYTHONPATH=src:. python lab/2026-12-03-decode-tma-tiles/pointer_probe.py
"""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import flashrepro
from flashrepro.launch_varlen import DecodeConfig, kvcache_forward
from flashrepro_harness.bench.timing import interleaved_rounds

_TMA = Path(__file__).parents[1] / "2026-12-03-decode-tma" / "probe.py"
_spec = importlib.util.spec_from_file_location("decode_tma_probe", _TMA)
assert _spec is not None and _spec.loader is not None
_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_probe)

POINTER = ((128, 4, 3, 1), (128, 4, 3, 2), (128, 8, 3, 1), (128, 4, 2, 1), (64, 4, 3, 1))


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
    for bn, w, s, splits in POINTER:
        fns[f"ptr {bn}x{w}x{s}/{splits}"] = pointer(bn, w, s, splits)
    fns["tma 128x4x3/1"] = _probe.tma_call(q, k, v, used, block_n=128, num_stages=3,
                                           splits=1)[0]
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
    for b in (16, 32, 64):
        for l_k in (1024, 8192, 32768):
            print(measure(b, l_k), flush=True)
