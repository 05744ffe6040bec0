"""Public entry points with lengths as data: attention over a KV cache whose sequences have
their own lengths (:func:`attention_kvcache`, decode and short queries), and over packed
sequences (:func:`attention_varlen`, FlashAttention's ``flash_attn_varlen_func``).

The lengths are int32 device tensors, read by the kernels on the device: no host sync, one
compiled kernel for every length, calls that a CUDA graph can capture. Eager calls launch
through :mod:`flashrepro.launch_varlen`; under ``torch.compile``, ``torch.export`` and
dispatch modes the calls go through ``torch.ops.flashrepro.attention_kvcache`` and
``torch.ops.flashrepro.attention_varlen`` (:mod:`flashrepro.ops`), as
:func:`flashrepro.attention` does. Forward only, no autograd.
"""

from __future__ import annotations

import torch

from flashrepro import launch_varlen, ops
from flashrepro.api import check_traced_input, needs_operator
from flashrepro.validation import _check_flag, check_scale, check_traced_out

__all__ = ["attention_kvcache", "attention_varlen"]


def attention_kvcache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seqused_k: torch.Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    num_splits: int | None = None,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention of short queries over a KV cache whose sequences hold ``seqused_k[b]`` valid
    keys each (decode: Lq = 1; speculative or chunked decode: a few rows).

    A function of its own rather than a ``seqused_k`` keyword of :func:`flashrepro.attention`:
    its causal mask is aligned to each sequence's own last valid key, which neither of
    ``attention``'s alignments expresses for lengths that differ per sequence, and it runs
    another kernel (:mod:`flashrepro.kernels.decode`: the query heads that share a key/value
    head packed into one tile, the keys split between programs when B·H_kv cannot fill the
    GPU, the parts merged by their LSE). ``attention``'s launch path is left as it is.

    Same answer as SDPA's math backend, per sequence b, on ``q[b]`` and the first
    ``seqused_k[b]`` keys of ``k[b]`` and ``v[b]`` (with ``is_causal`` meaning the mask
    :func:`torch.nn.attention.bias.causal_lower_right` gives).

    Args:
        q: (B, H, Lq, D) float16 or bfloat16 on a CUDA device (or the CPU under Triton's
            interpreter, ``TRITON_INTERPRET=1`` set before import; float16 only there); any
            strides. Built for Lq of 1 to about 16; larger Lq is right but slower than
            :func:`flashrepro.attention`. 1 <= D <= 256.
        k: the key cache, (B, H_kv, L_max, D): q's dtype and device, any strides (a unit
            last-dim stride is the fast path). Rows at and past ``seqused_k[b]`` are never
            read into the result (they may hold anything, NaN included).
        v: the value cache, like k. k and v of different strides are read through contiguous
            copies.
        seqused_k: (B,) int32 on q's device: the valid keys of each sequence. Values are not
            checked on the host (that would be a sync): the kernel clamps each into
            [0, L_max]. 0 keys give o = 0 and lse = -inf. None (FlashAttention's
            ``cache_seqlens=None``): every sequence holds all L_max keys.
        causal: query row i sees key j iff ``j <= i + seqused_k[b] - Lq`` (aligned to the
            sequence's last valid key, as FlashAttention's ``flash_attn_with_kvcache``); rows
            with ``i < Lq - seqused_k[b]`` see no key (o = 0, lse = -inf). Without it every
            row sees keys ``0 .. seqused_k[b] - 1``. ``seqused_k[b]`` reads L_max where
            ``seqused_k`` is None.
        scale: softmax scale, default 1/sqrt(D); the rules of :func:`flashrepro.attention`.
        enable_gqa: allow H to be a multiple of H_kv (query head h reads key/value head
            h // (H / H_kv)), as SDPA's ``enable_gqa``.
        num_splits: key splits per (batch, key/value head); None picks them from the shapes
            (:func:`flashrepro.launch_varlen.num_kv_splits`: B, H_kv, L_max and the SM
            count, never the lengths). 1..65535.
        return_lse: also return the natural-log log-sum-exp of each row's scaled, masked
            scores, (B, H, Lq) float32.
        out: optional (B, H, Lq, D) tensor of q's dtype and device for the output, sharing no
            memory with q, k or v (``out = q`` itself allowed): :func:`flashrepro.attention`'s
            rules. Under tracing it is written by a copy.

    Returns:
        o, (B, H, Lq, D) in q's dtype (``out`` when given); with ``return_lse``, also lse.

    Edge cases:
        * Sizes of 0 (B, H, Lq) give empty outputs; L_max = 0 gives o = 0, lse = -inf.
        * A row that sees no key gets o = 0 and lse = -inf.
        * Non-finite q or k, as :func:`flashrepro.attention`: a row whose scores over one
          whole key block are all -inf is NaN, even if later keys are finite; a row whose
          visible scores are all -inf is NaN, or o = 0 and lse = -inf where they fit in one
          masked block (the last, partial one).

    Raises:
        TypeError, ValueError: :func:`flashrepro.launch_varlen.validate_kvcache`'s rules,
            each naming the argument: q, k, v, flags and ``scale`` as
            :func:`flashrepro.attention`; ``seqused_k`` not an int32 tensor (TypeError), not
            of shape (B,) or not on q's device (ValueError); ``num_splits`` not None or an
            int (TypeError), outside 1..65535 (ValueError); ``out`` as in
            :func:`flashrepro.attention`.
    """
    if isinstance(q, torch.Tensor) and needs_operator(q, k, v, seqused_k, out):
        for name, flag in (("causal", causal), ("enable_gqa", enable_gqa),
                           ("return_lse", return_lse)):
            _check_flag(name, flag)  # the op's schema would coerce 1 to True
        launch_varlen.check_num_splits(num_splits)
        _check_traced_inputs(scale, q=q, k=k, v=v, seqused_k=seqused_k)
        o, lse = ops.attention_kvcache(q, k, v, seqused_k, causal, scale, enable_gqa,
                                       num_splits)
        if out is not None:
            o = check_traced_out(out, q).copy_(o)
    else:
        o, lse = launch_varlen.kvcache_forward(q, k, v, seqused_k, causal=causal, scale=scale,
                                               enable_gqa=enable_gqa, num_splits=num_splits,
                                               return_lse=return_lse, out=out)
    return (o, lse) if return_lse else o


def attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    scale: float | None = None,
    return_lse: bool = False,
    seqused_k: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention over packed sequences of different lengths, FlashAttention's
    ``flash_attn_varlen_func`` (forward, no dropout, no window): B sequences concatenated
    along the token dim, each attending only to its own keys.

    Same answer as SDPA's math backend run on each sequence alone: for sequence b, q rows
    ``cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1`` against key/value rows
    ``cu_seqlens_k[b] .. cu_seqlens_k[b+1] - 1``.

    Args:
        q: (total_q, H, D) float16 or bfloat16 on a CUDA device (or the CPU under Triton's
            interpreter; float16 only there), any strides; 1 <= D <= 256.
        k: (total_k, H_kv, D), q's dtype and device, any strides; H a multiple of H_kv
            (grouped-query attention, query head h reads key/value head h // (H / H_kv)).
        v: like k; k and v of different strides are read through contiguous copies.
        cu_seqlens_q: (B + 1,) int32 on q's device: the sequences' first q rows, then
            total_q (cumulative lengths from 0). Values are not checked on the host: the
            kernel clamps each offset into [0, total_q] and each sequence's end to at least
            its start, so no value reads out of bounds; rows of q that no sequence covers
            are left unwritten.
        cu_seqlens_k: (B + 1,) int32, the same for k and v (clamped into [0, total_k]).
        max_seqlen_q: a host int >= the longest query sequence: the grid covers it (rows
            of longer sequences past it are left unwritten). Not a compile-time constant: a
            new value launches the same kernel.
        max_seqlen_k: a host int >= 0, FlashAttention's argument; the kernel reads the key
            lengths from the offsets and needs no bound, so it is only checked.
        causal: aligned to each sequence's last key (FlashAttention's convention for
            varlen): row i of sequence b sees key j iff ``j <= i + Lk_b - Lq_b``; rows with
            ``i < Lq_b - Lk_b`` see no key.
        scale: softmax scale, default 1/sqrt(D); the rules of :func:`flashrepro.attention`.
        return_lse: also return the natural-log log-sum-exp of each row's scaled, masked
            scores, (H, total_q) float32 (FlashAttention's varlen layout).
        seqused_k: optional (B,) int32 on q's device: sequence b uses only its first
            ``seqused_k[b]`` keys (from ``cu_seqlens_k[b]``), clamped into [0, its key
            count]; for a cache laid out packed.

    Returns:
        o, (total_q, H, D) contiguous in q's dtype; with ``return_lse``, also lse.

    Edge cases:
        * Empty sequences (equal offsets) are allowed; B = 0, total_q = 0 or
          max_seqlen_q = 0 launch nothing. A query row whose sequence has no key (or that
          the causal mask leaves none) gets o = 0 and lse = -inf.
        * Non-finite q or k: as :func:`flashrepro.attention`: a row whose visible scores are
          all -inf is NaN, as SDPA's softmax, and so is a row whose scores over one whole key
          block are all -inf, even if later keys are finite.

    Raises:
        TypeError, ValueError: :func:`flashrepro.launch_varlen.validate_varlen`'s rules,
            each naming the argument: q, k, v (3 dims, shapes, dtype, device, grad), the
            offset and length tensors (int32, (B + 1,) / (B,), q's device), ``max_seqlen_*``
            (ints >= 0), ``causal``, ``return_lse``, ``scale``.
    """
    if isinstance(q, torch.Tensor) and needs_operator(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                                      seqused_k):
        for name, flag in (("causal", causal), ("return_lse", return_lse)):
            _check_flag(name, flag)
        for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            launch_varlen.check_max_seqlen(name, value)  # the schema would coerce a bool
        _check_traced_inputs(scale, q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q,
                             cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k)
        o, lse = ops.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                      max_seqlen_k, causal, scale, seqused_k)
    else:
        o, lse = launch_varlen.varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                              max_seqlen_q, max_seqlen_k, causal=causal,
                                              scale=scale, return_lse=return_lse,
                                              seqused_k=seqused_k)
    return (o, lse) if return_lse else o


def _check_traced_inputs(scale: object, **tensors: object) -> None:
    """What the operator's schema would coerce or refuse without naming the argument on the
    traced path: ``scale`` (a bool would run as 1.0), and each tensor argument
    (:func:`flashrepro.api.check_traced_input`; ``seqused_k`` may be None)."""
    check_scale(scale)
    for name, t in tensors.items():
        if not (t is None and name == "seqused_k"):
            check_traced_input(name, t)
