"""For tests: :func:`flashrepro.select.select` on given q, k, v with a fresh output and LSE
on their device (meta tensors included), and the stand-in GPU facts unless given."""

from __future__ import annotations

import torch

from flashrepro.configs import KernelConfig
from flashrepro.select import STAND_IN_L2_BYTES, STAND_IN_NUM_SMS, Selection, select


def choose(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, arch: int | None,
           mma_v3: bool = True, config: KernelConfig | str | None = None, causal: bool = False,
           causal_alignment: str = "top_left", scale: float | None = None,
           return_lse: bool = False, out: torch.Tensor | None = None,
           num_sms: int = STAND_IN_NUM_SMS, l2_bytes: int = STAND_IN_L2_BYTES) -> Selection:
    """The selection for this call (LSE as a full (B, H, Lq) buffer: the strides the launch's
    one-element stand-in also has)."""
    b, h, lq, _ = q.shape
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    lse = torch.empty(b, h, lq, dtype=torch.float32, device=q.device)
    return select(q, k, v, o, lse, causal=causal, scale=scale, causal_alignment=causal_alignment,
                  return_lse=return_lse, config=config, arch=arch, mma_v3=mma_v3,
                  num_sms=num_sms, l2_bytes=l2_bytes)
