"""Run any rung of the memory ladder by name (:mod:`flashrepro_harness.bench.ladder_kernels`'s
kernels, the article's kernel and the production launch), for the profiler's workloads."""

from __future__ import annotations

import math

import torch
import triton

from flashrepro.api import article_attention, attention
from flashrepro.configs import KernelConfig, default_config
from flashrepro.kernels import LOG2_E
from flashrepro.validation import check_out, validate
from flashrepro_harness.bench import ladder_kernels as ladder


def launch(variant: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
           causal: bool = False, scale: float | None = None,
           config: KernelConfig | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Run one rung of the ladder: ``softmax(q·kᵀ·scale + mask)·v``, forward only.

    Args:
        variant: one of :data:`flashrepro_harness.bench.ladder_kernels.VARIANTS`: ``'v1'``,
            ``'v2_kcol'``, ``'v2_kt'``, ``'v2_kcol_fma'``, ``'v2_kt_fma'``, ``'article'``
            (:func:`flashrepro.article_attention`) or ``'fwd'`` (:func:`flashrepro.attention`).
        q: (B, H, Lq, D) fp16 or bf16, D a power of two in 16..256; CUDA (or the CPU under
            ``TRITON_INTERPRET=1``).
        k, v: (B, H, Lk, D), q's dtype and device, Lk >= 1.
        causal: top-left causal mask, as SDPA's ``is_causal``.
        scale: softmax scale, default 1/sqrt(D).
        config: default :func:`flashrepro.configs.default_config`; ``'article'`` needs BLOCK_M
            a multiple of BLOCK_N.
        out: optional (B, H, Lq, D) output of q's dtype.

    Returns o, (B, H, Lq, D) in q's dtype.

    Raises:
        TypeError, ValueError: bad inputs (see :func:`flashrepro.validation.validate`); an unknown
            variant; a head dim that is not a power of two in 16..256; Lk = 0; a config that
            does not fit the GPU.
    """
    if variant not in ladder.VARIANTS:
        raise ValueError(f"variant must be one of {ladder.VARIANTS}, got {variant!r}")
    validate(q, k, v, scale=scale, enable_gqa=False, causal_alignment="top_left")
    lq, d = q.shape[2], q.shape[3]
    if d < 16 or d & (d - 1):
        raise ValueError(f"the ladder kernels need a power-of-two head dim >= 16, got D={d}")
    if k.shape[2] < 1:
        raise ValueError("k and v need at least one key row (Lk >= 1), got Lk=0")
    cfg = config if config is not None else default_config(d, causal, lq, None)
    if variant == "fwd":
        return attention(q, k, v, causal=causal, scale=scale, config=cfg, out=out)
    if variant == "article":
        return article_attention(q, k, v, causal=causal, scale=scale, config=cfg, out=out)
    o = check_out(out, q)
    if o.numel() == 0:
        return o
    qk_scale = (1.0 / math.sqrt(d) if scale is None else float(scale)) * LOG2_E
    try:
        if variant == "v1":
            ladder.launch_v1(q, k, v, o, causal, qk_scale, cfg)
        else:
            k_transposed, fma_dot = ladder.V2_MODES[variant]
            ladder.launch_v2(q, k, v, o, causal, qk_scale, cfg, k_transposed, fma_dot)
    except triton.runtime.errors.OutOfResources as exc:
        raise ValueError(f"config {cfg.label()} does not fit this GPU for variant {variant}, "
                         f"D={d}: {exc}") from exc
    return o
