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
* ``torch.ops.flashrepro.attention_triton(q, k, v, causal, scale, enable_gqa,
  causal_alignment, config, bshd) -> (o, lse)``: a ``torch.library.triton_op`` whose body
  inductor traces, so that its generated code launches the Triton kernel itself (no Python op
  call per run); see :data:`attention_triton`.
* ``torch.ops.flashrepro.attention_kvcache(q, k, v, seqused_k, causal, scale, enable_gqa,
  num_splits) -> (o, lse)``: :func:`flashrepro.attention_kvcache`.
* ``torch.ops.flashrepro.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
  max_seqlen_k, causal, scale, seqused_k) -> (o, lse)``: :func:`flashrepro.attention_varlen`.

:func:`flashrepro.attention` calls them by itself while it is being traced; eager calls go
straight to :func:`flashrepro.launch.forward`, past the dispatcher; with :data:`INLINE_TRITON`
on, a call under ``torch.compile`` on a CUDA device takes ``attention_triton``. ``config`` is a
:class:`~flashrepro.configs.KernelConfig` label or name (``KernelConfig.parse``), or None.

The ops are defined with ``torch.library.Library`` and a ``CompositeExplicitAutograd`` kernel
rather than ``torch.library.custom_op``: custom_op's Python autograd wrapper cost about 28 µs
per eager call on the H200 (lab/2026-12-01-host-path/), more than the kernel's own host work.
Forward only: no autograd formula is registered, and inputs that require grad are refused as
in eager mode.
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.utils._python_dispatch import _disable_current_modes
from triton.runtime.jit import JITFunction

from flashrepro import launch_varlen
from flashrepro.configs import TRITON_FALLBACK, KernelConfig, default_config
from flashrepro.kernels.call import IO_ARGS
from flashrepro.launch import _gpu_facts, forward
from flashrepro.select import Selection, code_arch, select
from flashrepro.validation import validate

_ARGS = ("Tensor q, Tensor k, Tensor v, bool causal, float? scale, bool enable_gqa, "
         "str causal_alignment, str? config")
_LIB = torch.library.Library("flashrepro", "DEF")
_LIB.define(f"attention({_ARGS}) -> Tensor")
_LIB.define(f"attention_lse({_ARGS}) -> (Tensor, Tensor)")
_LIB.define(f"attention_bshd({_ARGS}) -> Tensor")


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
             scale: float | None, enable_gqa: bool, causal_alignment: str,
             config: str | None, out: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of :func:`flashrepro.launch.forward` with the op's arguments (``config`` a
    label, a name or None), o written into ``out`` when given.

    Every op stores the LSE: a launch plan made here then holds no buffer of its own, which a
    CUDA-graph pool (``mode="reduce-overhead"``) would count as a leaked allocation."""
    o, lse = forward(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
                     causal_alignment=causal_alignment, return_lse=True,
                     config=None if config is None else KernelConfig.parse(config), out=out)
    assert lse is not None
    return o, lse


def _attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                   scale: float | None, enable_gqa: bool, causal_alignment: str,
                   config: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse): o (B, H, Lq, D) contiguous in q's dtype, lse (B, H, Lq) float32, the
    natural-log log-sum-exp of each row's scaled, masked scores. Arguments and errors are
    :func:`flashrepro.attention`'s; ``config`` a label, a name or None."""
    return _forward(q, k, v, causal, scale, enable_gqa, causal_alignment, config)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
               scale: float | None, enable_gqa: bool, causal_alignment: str,
               config: str | None) -> torch.Tensor:
    return _forward(q, k, v, causal, scale, enable_gqa, causal_alignment, config)[0]


def _attention_bshd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    scale: float | None, enable_gqa: bool, causal_alignment: str,
                    config: str | None) -> torch.Tensor:
    """o as :func:`_attention`'s, in a (B, Lq, H, D) buffer (returned as its (B, H, Lq, D)
    transposed view): the kernel writes that layout through ``out=``, from a launch plan of
    its own."""
    b, h, lq, d = q.shape
    out = torch.empty((b, lq, h, d), dtype=q.dtype, device=q.device).transpose(1, 2)
    return _forward(q, k, v, causal, scale, enable_gqa, causal_alignment, config, out)[0]


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


# -- the forward as a triton_op: inductor launches the Triton kernel itself --

INLINE_TRITON = os.environ.get("FLASHREPRO_INLINE_TRITON", "0") not in ("", "0")
"""Whether :func:`flashrepro.attention` under ``torch.compile`` on a CUDA device calls
:data:`attention_triton` instead of the opaque ops; from ``FLASHREPRO_INLINE_TRITON=1`` at
import, or set here (dynamo guards on it: a change recompiles). Off by default: it trades the
Gluon kernels' speed for host time, worth it only where a compiled forward is host-bound
(lab/2026-12-02-compiled-op-host-cost/). Symbolic sizes (``dynamic=True``, or dynamo's
automatic dynamic shapes after a size changes) take the opaque op; ``dynamic=False`` inlines
every size."""


def inline_config(head_dim: int, causal: bool, seqlen_q: int, arch: int | None) -> KernelConfig:
    """The launch :data:`attention_triton` gives ``config=None``: the default launch's config
    (:func:`~flashrepro.configs.default_config` for ``arch``, the code arch) without TMA, and
    :data:`~flashrepro.configs.TRITON_FALLBACK` without TMA where that is a Gluon config."""
    cfg = default_config(head_dim, causal, seqlen_q, arch)
    return replace(TRITON_FALLBACK if cfg.overlap else cfg, tma=False)


def _resolved_config(q: torch.Tensor, causal: bool, config: str | None) -> str | None:
    """``config``, or for None the label of :func:`inline_config` for q (None where q's sizes
    are symbolic: the opaque op then picks at run time)."""
    if config is not None or not all(isinstance(s, int) for s in q.shape):
        return config
    facts = _gpu_facts(q.device)
    arch = code_arch(facts["arch"], facts["mma_v3"])
    return inline_config(q.shape[3], causal, q.shape[2], arch).label()


def _stand_in(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor of t's shape, strides and dtype, made outside any tracing mode (so
    :func:`~flashrepro.select.select` may read its ``data_ptr``)."""
    with _disable_current_modes():
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def inline_selection(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                     lse: torch.Tensor, *, causal: bool, scale: float | None,
                     causal_alignment: str, config: str | None) -> Selection | None:
    """The selection ``attention_triton`` hands to ``torch.library.wrap_triton``, or None
    where inductor cannot launch it (then the op calls ``attention_lse``).

    Only a plain Triton kernel whose Q, K, V, O, LSE are tensors qualifies: torch 2.13 stores a
    TMA descriptor made outside dynamo as a constant of the traced call, its tensor unseen, so
    inductor drops the launch as writing nothing; and it re-emits a kernel's source under
    ``@triton.jit``, which a Gluon kernel is not (lab/2026-12-02-compiled-op-host-cost/). Also
    None off a CUDA device, for symbolic sizes or strides, and for empty calls.
    """
    tensors = (q, k, v, o, lse)
    if q.device.type != "cuda" or not all(
            isinstance(s, int) for t in tensors for s in (*t.shape, *t.stride())):
        return None
    if o.numel() == 0 or k.shape[2] == 0:
        return None
    chosen = select(*map(_stand_in, tensors), causal=causal, scale=scale,
                    causal_alignment=causal_alignment, return_lse=True,
                    config=None if config is None else KernelConfig.parse(config),
                    **_gpu_facts(q.device))
    call = chosen.call
    if type(call.kernel) is not JITFunction or any(
            slot is not None for slot in call.args[:IO_ARGS]):  # a descriptor template
        return None
    return chosen


def _outputs(q: torch.Tensor, bshd: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """New o (B, H, Lq, D), in (B, Lq, H, D) memory when ``bshd``, and lse (B, H, Lq) fp32."""
    b, h, lq, d = q.shape
    o = (q.new_empty((b, lq, h, d)).transpose(1, 2) if bshd else q.new_empty(q.shape))
    return o, q.new_empty((b, h, lq), dtype=torch.float32)


def _attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                      scale: float | None, enable_gqa: bool, causal_alignment: str,
                      config: str | None, bshd: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The body that AOT tracing (``torch.compile``) runs for ``attention_triton``."""
    _check(q, k, v, causal, scale, enable_gqa, causal_alignment, config)
    config = _resolved_config(q, causal, config)
    o, lse = _outputs(q, bshd)
    chosen = inline_selection(q, k, v, o, lse, causal=causal, scale=scale,
                              causal_alignment=causal_alignment, config=config)
    if chosen is None:
        o_op, lse = attention_lse(q, k, v, causal, scale, enable_gqa, causal_alignment, config)
        return (o.copy_(o_op) if bshd else o_op), lse
    io = chosen.operands(q, k, v, o, lse)
    call = chosen.bind(io)
    torch.library.wrap_triton(call.kernel)[call.grid](*call.args, **call.kwargs)
    if io[3] is not o:  # written through a contiguous buffer
        o.copy_(io[3])
    return o, lse


def _attention_triton_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                            scale: float | None, enable_gqa: bool, causal_alignment: str,
                            config: str | None, bshd: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``attention_triton`` outside tracing: :func:`flashrepro.launch.forward` (launch plans)
    with the config the traced body resolves."""
    config = _resolved_config(q, causal, config)
    out = _outputs(q, True)[0] if bshd else None
    return _forward(q, k, v, causal, scale, enable_gqa, causal_alignment, config, out)


def _fake_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 scale: float | None, enable_gqa: bool, causal_alignment: str,
                 config: str | None, bshd: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _check(q, k, v, causal, scale, enable_gqa, causal_alignment, config)
    return _outputs(q, bshd)


def _decompose_in_aot(mode: FunctionalTensorMode, op: torch._ops.OpOverload, types: tuple,
                      args: tuple, kwargs: dict) -> object:
    """Under AOT tracing's functionalization, ``attention_triton`` is its body (the rule
    ``torch.library.triton_op`` registers, torch/_library/triton.py), except for
    ``torch.export``, which keeps the op."""
    from torch.export._trace import custom_triton_ops_decomposition_disabled

    if custom_triton_ops_decomposition_disabled():
        return mode.__torch_dispatch__(op, types, args, kwargs)
    if any(t not in (torch.Tensor, FunctionalTensor) and not issubclass(t, FakeTensor)
           for t in types):
        return NotImplemented
    with mode:
        return _attention_triton(*args, **kwargs)


# torch.library.triton_op's definition (as FlashAttention's flash_attn/utils/library.py has
# it), without its scan of the body's source for kernels: that imports torch._inductor, about
# 1.2 s of `import flashrepro`.
_TRITON_OP = torch.library.custom_op("flashrepro::attention_triton", _attention_triton_eager,
                                     mutates_args=())
_TRITON_OP.register_fake(_fake_triton)
_TRITON_OP.register_torch_dispatch(FunctionalTensorMode, _decompose_in_aot)

attention_triton = torch.ops.flashrepro.attention_triton.default
"""``torch.ops.flashrepro.attention_triton(q, k, v, causal, scale, enable_gqa,
causal_alignment, config, bshd) -> (o, lse)``: (o, lse) as ``attention_lse``, o in
(B, Lq, H, D) memory when ``bshd`` (as ``attention_bshd``); an operator whose body AOT
tracing sees.

Under ``torch.compile`` inductor traces the body and launches the kernel from its own
generated code, without a Python op call per run, where :func:`inline_selection` returns a
selection: the Triton kernel with pointer loads. ``config`` None runs :func:`inline_config`
(never a Gluon or TMA launch); a ``config`` that selects a Gluon or TMA kernel, symbolic sizes
and the CPU make the body call the opaque ``attention_lse`` (with ``bshd``, plus a copy into
the (B, Lq, H, D) buffer). Eager calls (an exported program, opcheck) launch the same config
through :func:`flashrepro.launch.forward`. Arguments and errors are
:func:`flashrepro.attention`'s; ``config`` a label, a name or None."""


# -- lengths as data: KV caches and packed sequences (flashrepro.launch_varlen) --
# Defined like the ops above; both always return the LSE (for a CUDA-graph pool, no buffer
# of its own), and take their length tensors without reading them.

_LIB.define("attention_kvcache(Tensor q, Tensor k, Tensor v, Tensor seqused_k, bool causal, "
            "float? scale, bool enable_gqa, int? num_splits) -> (Tensor, Tensor)")
_LIB.define("attention_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, "
            "Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, bool causal, "
            "float? scale, Tensor? seqused_k) -> (Tensor, Tensor)")


def _attention_kvcache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       seqused_k: torch.Tensor, causal: bool, scale: float | None,
                       enable_gqa: bool, num_splits: int | None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of :func:`flashrepro.attention_kvcache`: o (B, H, Lq, D) contiguous, lse
    (B, H, Lq) float32."""
    o, lse = launch_varlen.kvcache_forward(q, k, v, seqused_k, causal=causal, scale=scale,
                                           enable_gqa=enable_gqa, num_splits=num_splits,
                                           return_lse=True)
    assert lse is not None
    return o, lse


def _fake_kvcache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seqused_k: torch.Tensor,
                  causal: bool, scale: float | None, enable_gqa: bool,
                  num_splits: int | None) -> tuple[torch.Tensor, torch.Tensor]:
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
"""``torch.ops.flashrepro.attention_kvcache``: (o, lse) over a KV cache with ``seqused_k``."""
attention_varlen = torch.ops.flashrepro.attention_varlen.default
"""``torch.ops.flashrepro.attention_varlen``: (o, lse) over packed sequences."""
