"""The forward as torch operators, for ``torch.compile``, CUDA graphs and ``torch.export``.

Registered with ``torch.library.custom_op`` under the namespace ``flashrepro``, each with a fake
(meta) implementation that checks the inputs (:func:`flashrepro.validation.validate`) and gives
the output's shape, dtype and strides, so a compiler traces one opaque op instead of Triton's
launcher (as FlashAttention-3 registers ``flash_attn_3::_flash_attn_forward``):

* ``torch.ops.flashrepro.attention(q, k, v, causal, scale, enable_gqa, causal_alignment,
  config) -> o``
* ``torch.ops.flashrepro.attention_lse(...) -> (o, lse)``, the same with the log-sum-exp.

:func:`flashrepro.attention` calls them by itself while it is being traced; eager calls go
straight to :func:`flashrepro.launch.forward`, past the dispatcher. ``config`` is a
:class:`~flashrepro.configs.KernelConfig` label or name (``KernelConfig.parse``), or None.
Forward only: no autograd formula is registered, and inputs that require grad are refused as in
eager mode.
"""

from __future__ import annotations

import torch

from flashrepro.configs import KernelConfig
from flashrepro.launch import forward
from flashrepro.validation import validate


def _run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None,
         enable_gqa: bool, causal_alignment: str, config: str | None,
         return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    return forward(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
                   causal_alignment=causal_alignment, return_lse=return_lse,
                   config=None if config is None else KernelConfig.parse(config), out=None)


def _fake_output(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 scale: float | None, enable_gqa: bool, causal_alignment: str,
                 config: str | None) -> torch.Tensor:
    validate(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
             causal_alignment=causal_alignment)
    if config is not None:
        KernelConfig.parse(config)
    return q.new_empty(q.shape)  # contiguous (B, H, Lq, D), as the kernel's output


@torch.library.custom_op("flashrepro::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              scale: float | None, enable_gqa: bool, causal_alignment: str,
              config: str | None) -> torch.Tensor:
    """o = softmax(q·kᵀ·scale + mask)·v: :func:`flashrepro.attention` as an operator.

    Args:
        q: (B, H, Lq, D) float16/bfloat16; k, v: (B, H_kv, Lk, D); as
            :func:`flashrepro.attention`, whose keyword arguments the others are.
        config: a KernelConfig label (``"128x128 w8 s2 tma overlap ws"``), a name, or None.

    Returns:
        o, (B, H, Lq, D) contiguous, q's dtype.

    Raises:
        TypeError, ValueError: as :func:`flashrepro.attention` (also while tracing, from the
            fake implementation).
    """
    o, _ = _run(q, k, v, causal, scale, enable_gqa, causal_alignment, config, False)
    return o


@attention.register_fake
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    scale: float | None, enable_gqa: bool, causal_alignment: str,
                    config: str | None) -> torch.Tensor:
    return _fake_output(q, k, v, causal, scale, enable_gqa, causal_alignment, config)


@torch.library.custom_op("flashrepro::attention_lse", mutates_args=())
def attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  scale: float | None, enable_gqa: bool, causal_alignment: str,
                  config: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention` that also returns the LSE: (o, lse), lse (B, H, Lq) float32, the
    natural-log log-sum-exp of each row's scaled, masked scores."""
    o, lse = _run(q, k, v, causal, scale, enable_gqa, causal_alignment, config, True)
    assert lse is not None
    return o, lse


@attention_lse.register_fake
def _attention_lse_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                        scale: float | None, enable_gqa: bool, causal_alignment: str,
                        config: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    o = _fake_output(q, k, v, causal, scale, enable_gqa, causal_alignment, config)
    b, h, lq, _ = q.shape
    return o, q.new_empty((b, h, lq), dtype=torch.float32)
