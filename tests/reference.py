"""Reference attention in high precision, and input/output helpers shared by the tests."""

from __future__ import annotations

import math

import torch


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                        scale: float | None = None, bottom_right: bool = False,
                        dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain softmax attention in ``dtype`` (float64 on CPU, float32 on GPU).

    Returns (o, lse): o (B, H, Lq, D) and lse (B, H, Lq), natural log. Rows that see no key
    give o = 0 and lse = -inf. Key/value heads are repeated for GQA.
    """
    q, k, v = (t.to(dtype) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    lq, lk = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        offset = lk - lq if bottom_right else 0
        i = torch.arange(lq, device=q.device)[:, None]
        j = torch.arange(lk, device=q.device)[None, :]
        s = s.masked_fill(j > i + offset, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    o = torch.nan_to_num(p, nan=0.0) @ v
    return o, lse


def random_qkv(b: int, h: int, lq: int, lk: int, d: int, dtype: torch.dtype,
               device: torch.device, h_kv: int | None = None,
               generator: torch.Generator | None = None):
    """Fresh standard-normal q (B, H, Lq, D), k and v (B, H_kv, Lk, D); never zeros."""
    h_kv = h if h_kv is None else h_kv
    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float32).to(device, dtype)
    return draw(b, h, lq, d), draw(b, h_kv, lk, d), draw(b, h_kv, lk, d)


def poisoned_like(q: torch.Tensor) -> torch.Tensor:
    """An output buffer full of NaN, so an element the kernel never writes fails the check."""
    return torch.full_like(q, float("nan"))
