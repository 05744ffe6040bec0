"""The forward as torch operators, for ``torch.compile``, CUDA graphs and ``torch.export``.

Defined with ``torch.library`` under the namespace ``flashrepro``, each with a fake (meta)
implementation that checks the inputs (:func:`flashrepro.validation.validate`) and gives the
output's shape, dtype and strides, so a compiler traces one opaque op instead of Triton's
launcher (as FlashAttention-3 registers ``flash_attn_3::_flash_attn_forward``):

* ``torch.ops.flashrepro.attention(q, k, v, causal, scale, enable_gqa, causal_alignment,
  config) -> o``
* ``torch.ops.flashrepro.attention_lse(...) -> (o, lse)``, the same with the log-sum-exp.
* ``torch.ops.flashrepro.attention_bshd(...) -> o``: o (B, H, Lq, D) laid out in memory as
  (B, Lq, H, D), so ``o.transpose(1, 2)`` is contiguous: the layout transformers' attention
  functions return, written by the kernel itself (under tracing an ``out=`` buffer can only be
  filled by a copy of the op's output; this op makes that copy unnecessary).
* ``torch.ops.flashrepro.attention_kvcache(q, k, v, seqused_k, causal, scale, enable_gqa,
  num_splits) -> (o, lse)``: :func:`flashrepro.attention_kvcache`.
* ``torch.ops.flashrepro.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
  max_seqlen_k, causal, scale, seqused_k) -> (o, lse)``: :func:`flashrepro.attention_varlen`.

:func:`flashrepro.attention` calls them by itself while it is being traced; eager calls go
straight to :func:`flashrepro.launch.forward`, past the dispatcher. ``config`` is a
:class:`~flashrepro.configs.KernelConfig` label or name (``KernelConfig.parse``), or None.

The ops are defined with ``torch.library.Library`` and a ``CompositeExplicitAutograd`` kernel
rather than ``torch.library.custom_op``: custom_op's Python autograd wrapper cost about 28 µs
per eager call on the H200 (lab/2026-12-01-host-path/), more than the kernel's own host work.
Forward only: no autograd formula is registered, and inputs that require grad are refused as
in eager mode.
"""

from __future__ import annotations

import torch

from flashrepro import launch_varlen, native
from flashrepro.configs import KernelConfig
from flashrepro.launch import forward
from flashrepro.validation import validate

_ARGS = ("Tensor q, Tensor k, Tensor v, bool causal, float? scale, bool enable_gqa, "
         "str causal_alignment, str? config")
_LIB = torch.library.Library("flashrepro", "DEF")
_LIB.define(f"attention({_ARGS}) -> Tensor")
_LIB.define(f"attention_lse({_ARGS}) -> (Tensor, Tensor)")
_LIB.define(f"attention_bshd({_ARGS}) -> Tensor")


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
             scale: float | None, enable_gqa: bool, causal_alignment: str,
             config: str | None, bshd: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of :func:`flashrepro.launch.forward` with the op's arguments (``config`` a
    label, a name or None; ``bshd``: o with (B, Lq, H, D) memory).

    Every op stores the LSE: a launch plan made here then holds no buffer of its own, which a
    CUDA-graph pool (``mode="reduce-overhead"``) would count as a leaked allocation."""
    o, lse = forward(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
                     causal_alignment=causal_alignment, return_lse=True,
                     config=None if config is None else KernelConfig.parse(config), out=None,
                     bshd=bshd)
    assert lse is not None
    return o, lse


def _attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                   scale: float | None, enable_gqa: bool, causal_alignment: str,
                   config: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse): o (B, H, Lq, D) contiguous in q's dtype, lse (B, H, Lq) float32, the
    natural-log log-sum-exp of each row's scaled, masked scores. Arguments and errors are
    :func:`flashrepro.attention`'s; ``config`` a label, a name or None.

    With ``FLASHREPRO_NATIVE=1`` each op's CUDA kernel is C++ (:mod:`flashrepro.native`, built
    at the first call of an op): a plan hit launches with no Python frame (in a compiled graph
    the op is otherwise a layer's one call whose body is Python), and any other call comes to
    the op's kernel here, whose plan is then registered with it."""
    return _native_forward(q, k, v, causal, scale, enable_gqa, causal_alignment, config, False)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
               scale: float | None, enable_gqa: bool, causal_alignment: str,
               config: str | None) -> torch.Tensor:
    return _native_forward(q, k, v, causal, scale, enable_gqa, causal_alignment, config,
                           False)[0]


def _attention_bshd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    scale: float | None, enable_gqa: bool, causal_alignment: str,
                    config: str | None) -> torch.Tensor:
    """o as :func:`_attention`'s, in a (B, Lq, H, D) buffer (returned as its (B, H, Lq, D)
    transposed view), which the kernel writes from a launch plan of its own."""
    return _native_forward(q, k, v, causal, scale, enable_gqa, causal_alignment, config,
                           True)[0]


def _native_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    scale: float | None, enable_gqa: bool, causal_alignment: str,
                    config: str | None, bshd: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_forward`, then its plan registered with :mod:`flashrepro.native` where that is
    switched on (the first such call builds it)."""
    o, lse = _forward(q, k, v, causal, scale, enable_gqa, causal_alignment, config, bshd)
    if config is None and q.is_cuda and native.forward_registry() is not None:
        native.remember_forward(q, k, v, causal, scale, enable_gqa, causal_alignment, True,
                                bshd)
    return o, lse


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
           scale: float | None, enable_gqa: bool, causal_alignment: str,
           config: str | None) -> None:
    """The fakes' checks: the eager path's (:func:`flashrepro.validation.validate`, the
    config label), so tracing refuses what eager refuses."""
    validate(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
             causal_alignment=causal_alignment)
    if config is not None:
        KernelConfig.parse(config)


def _fake_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              scale: float | None, enable_gqa: bool, causal_alignment: str,
              config: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    _check(q, k, v, causal, scale, enable_gqa, causal_alignment, config)
    b, h, lq, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((b, h, lq), dtype=torch.float32)


def _fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
          scale: float | None, enable_gqa: bool, causal_alignment: str,
          config: str | None) -> torch.Tensor:
    _check(q, k, v, causal, scale, enable_gqa, causal_alignment, config)
    return q.new_empty(q.shape)


def _fake_bshd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
               scale: float | None, enable_gqa: bool, causal_alignment: str,
               config: str | None) -> torch.Tensor:
    _check(q, k, v, causal, scale, enable_gqa, causal_alignment, config)
    b, h, lq, d = q.shape
    return q.new_empty((b, lq, h, d)).transpose(1, 2)


_LIB.impl("attention", _attention, "CompositeExplicitAutograd")
_LIB.impl("attention_bshd", _attention_bshd, "CompositeExplicitAutograd")
_LIB.impl("attention_lse", _attention_lse, "CompositeExplicitAutograd")
torch.library.register_fake("flashrepro::attention", _fake, lib=_LIB)
torch.library.register_fake("flashrepro::attention_lse", _fake_lse, lib=_LIB)
torch.library.register_fake("flashrepro::attention_bshd", _fake_bshd, lib=_LIB)

attention = torch.ops.flashrepro.attention.default
"""``torch.ops.flashrepro.attention``: o = softmax(q·kᵀ·scale + mask)·v, (B, H, Lq, D)."""
attention_lse = torch.ops.flashrepro.attention_lse.default
"""``torch.ops.flashrepro.attention_lse``: (o, lse)."""
attention_bshd = torch.ops.flashrepro.attention_bshd.default
"""``torch.ops.flashrepro.attention_bshd``: o (B, H, Lq, D) with (B, Lq, H, D) memory."""


# -- lengths as data: KV caches and packed sequences (flashrepro.launch_varlen) --
# Defined like the ops above; both always return the LSE (for a CUDA-graph pool, no buffer
# of its own), and take their length tensors without reading them.

_LIB.define("attention_kvcache(Tensor q, Tensor k, Tensor v, Tensor? seqused_k, bool causal, "
            "float? scale, bool enable_gqa, int? num_splits) -> (Tensor, Tensor)")
_LIB.define("attention_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, "
            "Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, bool causal, "
            "float? scale, Tensor? seqused_k) -> (Tensor, Tensor)")


def _attention_kvcache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       seqused_k: torch.Tensor | None, causal: bool, scale: float | None,
                       enable_gqa: bool, num_splits: int | None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of :func:`flashrepro.attention_kvcache`: o (B, H, Lq, D) contiguous, lse
    (B, H, Lq) float32."""
    o, lse = launch_varlen.kvcache_forward(q, k, v, seqused_k, causal=causal, scale=scale,
                                           enable_gqa=enable_gqa, num_splits=num_splits,
                                           return_lse=True)
    assert lse is not None
    return o, lse


def _fake_kvcache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  seqused_k: torch.Tensor | None, causal: bool, scale: float | None,
                  enable_gqa: bool, num_splits: int | None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    launch_varlen.validate_kvcache(q, k, v, seqused_k, causal=causal, scale=scale,
                                   enable_gqa=enable_gqa, num_splits=num_splits,
                                   return_lse=True)
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


def _attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                      max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                      scale: float | None, seqused_k: torch.Tensor | None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of :func:`flashrepro.attention_varlen`: o (total_q, H, D) contiguous, lse
    (H, total_q) float32."""
    o, lse = launch_varlen.varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                          max_seqlen_k, causal=causal, scale=scale,
                                          return_lse=True, seqused_k=seqused_k)
    assert lse is not None
    return o, lse


def _fake_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                 cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                 causal: bool, scale: float | None, seqused_k: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    launch_varlen.validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, causal=causal, scale=scale, return_lse=True,
                                  seqused_k=seqused_k)
    total_q, h, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((h, total_q), dtype=torch.float32)


_LIB.impl("attention_kvcache", _attention_kvcache, "CompositeExplicitAutograd")
_LIB.impl("attention_varlen", _attention_varlen, "CompositeExplicitAutograd")
torch.library.register_fake("flashrepro::attention_kvcache", _fake_kvcache, lib=_LIB)
torch.library.register_fake("flashrepro::attention_varlen", _fake_varlen, lib=_LIB)

attention_kvcache = torch.ops.flashrepro.attention_kvcache.default
"""``torch.ops.flashrepro.attention_kvcache``: (o, lse) over a KV cache, ``seqused_k`` or full."""
attention_varlen = torch.ops.flashrepro.attention_varlen.default
"""``torch.ops.flashrepro.attention_varlen``: (o, lse) over packed sequences."""
