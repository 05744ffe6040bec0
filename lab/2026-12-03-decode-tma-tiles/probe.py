"""TMA decode (lab/2026-12-03-decode-tma/decode_tma.py) at more tiles, stage counts and
batches: B in {1, 16, 64}, L_k in {1k, 8k, 32k}, L_q=1, GQA 16/8, D=128, bf16, caches full.

Rows: ``flashrepro`` (attention_kvcache's default launch) and ``tma BNxWxS/splits`` (the
TMA kernel, splits from the library's rule at that block unless given), each checked against
SDPA's float32 math first; then 8 interleaved rounds of 5 calls (L2 flushed, busy-wait, CUDA
events) with SDPA cuDNN and flash. Ratios per round over the faster SDPA backend of that round.
A tile that does not compile (shared memory) is reported as such.
(lab/2026-12-03-decode-tma-tiles)

    PYTHONPATH=src:. python lab/2026-12-03-decode-tma-tiles/probe.py
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
from flashrepro_harness.bench.timing import interleaved_rounds

_TMA = Path(__file__).parents[1] / "2026-12-03-decode-tma" / "probe.py"
_spec = importlib.util.spec_from_file_location("decode_tma_probe", _TMA)
assert _spec is not None and _spec.loader is not None
_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_probe)
tma_call = _probe.tma_call

VARIANTS: tuple[dict[str, int], ...] = (
    {},
    dict(block_n=128, num_warps=4, num_stages=3),
    dict(block_n=128, num_warps=8, num_stages=3),
    dict(block_n=128, num_warps=4, num_stages=4),
    dict(block_n=64, num_warps=4, num_stages=4),
    dict(block_n=64, num_warps=4, num_stages=6),
    dict(block_n=128, num_warps=4, num_stages=3, splits=1),
    dict(block_n=128, num_warps=4, num_stages=3, splits=2),
)


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
    peers = {"sdpa-cudnn": backend(SDPBackend.CUDNN_ATTENTION),
             "sdpa-flash": backend(SDPBackend.FLASH_ATTENTION)}
    fns = {"flashrepro": lambda: flashrepro.attention_kvcache(q, k, v, used, causal=True,
                                                              enable_gqa=True)}
    notes = []
    for kw in VARIANTS:
        try:
            fn, label = tma_call(q, k, v, used, **kw)
            name = f"tma {label}"
            if name in fns:
                continue
            fn()
        except Exception as e:  # a tile that does not fit is a finding
            notes.append(f"{kw}: {type(e).__name__}")
            continue
        fns[name] = fn
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
    out += [f"  not run: {n}" for n in notes]
    return "\n".join(out)


if __name__ == "__main__":
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}",
          flush=True)
    for b in (16, 64, 1):
        for l_k in (1024, 8192, 32768):
            print(measure(b, l_k), flush=True)
