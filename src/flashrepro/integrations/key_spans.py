"""Which keys the queries of a batch see, as device tensors: the descriptors that
:mod:`flashrepro.integrations.transformers` computes once per forward from transformers' mask
arguments and passes to every attention layer in place of a mask, and the kernel arguments
derived from them.

Key index j of a layer's keys (B, H_kv, L_k, D) is the token at absolute position
``kv_offset + j``; query row i is at ``q_offset + i``. transformers' causal mask shows query
position p the valid keys at positions <= p, where a key is valid when the 2-D padding mask is
True at its column (a column past the mask is padding). For each row b the descriptors hold
the valid keys as one contiguous span ``start[b] .. end[b] - 1`` (left padding, right padding,
a static cache's unwritten slots): then the queries at positions inside the span are the last
keys of the span, and the mask is FlashAttention's varlen causal mask (bottom-right) on that
span. Rows whose valid keys are not contiguous (padding between tokens) are ``broken``.

Nothing here reads a tensor's values on the host: the spans, offsets and lengths are computed
on the device and read by the kernels there.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["KVCACHE_MAX_LQ", "KeyPrefix", "KeySpans", "Packed", "SpanLayout", "UsedKeys",
           "key_spans", "key_validity", "kv_split", "prefix_layout", "span_layout",
           "token_major", "with_layout"]

KVCACHE_MAX_LQ = 16
"""Query lengths up to this run :func:`flashrepro.attention_kvcache` (its GQA-packed decode
kernel, built for L_q of 1 to about 16); longer ones the prefill kernels."""


class KeyPrefix(NamedTuple):
    """Keys ``0 .. length - 1`` of every row are valid, the queries are the last of them (a
    static cache's prefill, checked on the host); a host int."""

    length: int


class UsedKeys(NamedTuple):
    """Keys ``0 .. used[b] - 1`` of row b are valid and (causal) the queries are the last of
    them: ``used`` (B,) int32 on the device (a static cache without padding, not read on the
    host)."""

    used: torch.Tensor


class SpanLayout(NamedTuple):
    """The kernel arguments of a :class:`KeySpans` for queries of length ``lq`` (``causal`` or
    not), computed once per forward (:func:`with_layout`): ``cu_seqlens_q`` (3B + 1,) and
    ``seqused_k`` (3B,) as :func:`span_layout` gives them, and its ``cu_seqlens_k`` as
    ``key_rows·T + key_offsets`` (each (3B + 1,)), T being the keys' tokens per row, known only
    to the layer (:func:`token_major`). ``kv_used``: with ``split``, the KV-cache kernel's
    ``seqused_k`` (:func:`kv_split`), else None. All int32."""

    lq: int
    causal: bool
    cu_seqlens_q: torch.Tensor
    key_rows: torch.Tensor
    key_offsets: torch.Tensor
    seqused_k: torch.Tensor
    kv_used: torch.Tensor | None

    def cu_seqlens_k(self, tokens_per_row: int) -> torch.Tensor:
        return (self.key_rows * tokens_per_row + self.key_offsets).to(torch.int32)


class KeySpans(NamedTuple):
    """Row b's valid keys are ``start[b] .. end[b] - 1`` (0 .. 0 when it has none); query row i
    is key index ``query_start[b] + i``. All (B,) int32 on the device. ``broken``: (B,) bool,
    True where a row's valid keys are not contiguous (its outputs are poisoned with NaN); None
    when that was ruled out on the host. ``layout``: the kernel arguments, or None."""

    start: torch.Tensor
    end: torch.Tensor
    query_start: torch.Tensor
    broken: torch.Tensor | None
    layout: SpanLayout | None = None


class Packed(NamedTuple):
    """transformers' packed-sequence mask term: sequences restart where ``position_ids`` do.
    ``no_restart``: under tracing, where transformers adds the term whether or not the ids
    restart, a bool tensor True when they do not (checked at run time); None in eager mode,
    where transformers adds it only when they do."""

    no_restart: torch.Tensor | None


def key_validity(batch: int, kv_length: int, kv_offset: int,
                 last_query: int | torch.Tensor | None, padding: torch.Tensor | None,
                 device: torch.device | str | None) -> torch.Tensor:
    """(B, L_k) bool: key j of row b is valid, i.e. ``padding[b, kv_offset + j]`` (all True
    without ``padding``; a column past its width is False, as transformers'
    ``prepare_padding_mask``) and, when ``last_query`` is given (causal masks), its position
    ``kv_offset + j`` is at most ``last_query``, the last query's position."""
    positions = torch.arange(kv_length, device=device) + kv_offset
    if padding is None:
        valid = torch.ones((batch, kv_length), dtype=torch.bool, device=device)
    else:
        padding = padding.to(device=device, dtype=torch.bool)
        width = padding.shape[-1]
        short = kv_offset + kv_length - width
        if short > 0:
            padding = torch.nn.functional.pad(padding, (0, short))
        valid = padding[:, kv_offset:kv_offset + kv_length].expand(batch, kv_length)
    if last_query is not None:
        valid = valid & (positions <= last_query)[None, :]
    return valid


def key_spans(valid: torch.Tensor, query_start: int | torch.Tensor) -> KeySpans:
    """The :class:`KeySpans` of a (B, L_k) validity mask (:func:`key_validity`): first and one
    past the last valid key of each row, ``broken`` where fewer keys than that span are
    valid. ``query_start``: the key index of query row 0 (an int or a 0-dim tensor)."""
    batch, length = valid.shape
    if length == 0:  # argmax needs a column: an empty row is a span of no keys
        valid = valid.new_zeros(batch, 1)
        length = 1
    flags = valid.to(torch.int8)
    any_valid = valid.any(dim=1)
    first = flags.argmax(dim=1)
    end = length - flags.flip(1).argmax(dim=1)
    first = torch.where(any_valid, first, 0)
    end = torch.where(any_valid, end, 0)
    broken = valid.sum(dim=1) != end - first
    q0 = torch.as_tensor(query_start, device=valid.device).reshape(1).expand(batch)
    return KeySpans(first.to(torch.int32), end.to(torch.int32), q0.to(torch.int32), broken)


def _query_rows(spans: KeySpans, lq: int, causal: bool
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's real queries ``qa .. qe - 1`` (int64): causal, those at key indices inside its
    span (the others are padding and get 0); without the causal mask every row."""
    start, end, q0 = spans.start.long(), spans.end.long(), spans.query_start.long()
    if not causal:
        return torch.zeros_like(start), torch.full_like(start, lq)
    qa = (start - q0).clamp(0, lq)
    return qa, torch.maximum((end - q0).clamp(0, lq), qa)


def kv_split(spans: KeySpans, lq: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows the KV-cache kernel can take (valid keys a prefix ``0 .. end - 1``, every query
    real: causal, the last query is the last valid key; not broken) and their ``seqused_k``:
    returns (rows (B,) bool, used (B,) int32: ``end`` on those rows, 0 elsewhere)."""
    rows = spans.start == 0
    if causal:
        rows = rows & (spans.end == spans.query_start + lq)
    if spans.broken is not None:
        rows = rows & ~spans.broken
    return rows, torch.where(rows, spans.end, 0).to(torch.int32)


def span_layout(spans: KeySpans, lq: int, lk: int, tokens_per_row: int, causal: bool,
                skip_rows: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``attention_varlen`` arguments (cu_seqlens_q, cu_seqlens_k, seqused_k; int32) for queries
    flattened to B·L_q rows and keys flattened with row b's key j at token
    ``b·tokens_per_row + j`` (:func:`token_major`).

    Three sequences per row: the padding queries before its real ones and those after (no
    keys: output 0), and the real queries ``qa .. qe - 1`` over its span of keys, causal
    bottom-right (their last query is the span's last key). ``skip_rows`` (B,) bool: rows whose
    real queries get no keys here either (those the KV-cache kernel computes)."""
    qa, qe = _query_rows(spans, lq, causal)
    start, end = spans.start.long(), spans.end.long()
    batch = start.shape[0]
    keys = end - start
    if skip_rows is not None:
        keys = torch.where(skip_rows, 0, keys)
    row = torch.arange(batch, device=start.device)
    q0, k0 = row * lq, row * tokens_per_row
    zero = torch.zeros_like(keys)
    cu_q = torch.cat([torch.stack([q0, q0 + qa, q0 + qe], 1).flatten(),
                      q0.new_full((1,), batch * lq)])
    cu_k = torch.cat([torch.stack([k0, k0 + start, k0 + end], 1).flatten(),
                      k0.new_full((1,), max(batch - 1, 0) * tokens_per_row + lk)])
    used = torch.stack([zero, keys, zero], 1).flatten()
    return cu_q.to(torch.int32), cu_k.to(torch.int32), used.to(torch.int32)


def with_layout(spans: KeySpans, lq: int, lk: int, causal: bool) -> KeySpans:
    """``spans`` with its :class:`SpanLayout` for queries of length ``lq`` over ``lk`` keys
    (split between the kernels when ``lq`` <= :data:`KVCACHE_MAX_LQ`)."""
    rows, used = kv_split(spans, lq, causal) if lq <= KVCACHE_MAX_LQ else (None, None)
    cu_q, offsets, seqused = span_layout(spans, lq, lk, 0, causal, skip_rows=rows)
    batch = spans.start.shape[0]
    key_rows = torch.arange(3 * batch + 1, device=cu_q.device) // 3
    key_rows = key_rows.clamp(max=max(batch - 1, 0)).to(torch.int32)
    return spans._replace(layout=SpanLayout(lq, causal, cu_q, key_rows, offsets, seqused, used))


def prefix_layout(used: torch.Tensor, lq: int, lk: int, tokens_per_row: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``attention_varlen`` arguments for :class:`UsedKeys`: one sequence per row, its L_q
    queries over keys ``0 .. used[b] - 1`` (laid out as in :func:`span_layout`)."""
    batch = used.shape[0]
    row = torch.arange(batch + 1, device=used.device)
    cu_k = torch.cat([row[:-1] * tokens_per_row,
                      row.new_full((1,), max(batch - 1, 0) * tokens_per_row + lk)])
    return (row * lq).to(torch.int32), cu_k.to(torch.int32), used.to(torch.int32)


def token_major(k: torch.Tensor, v: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """k and v (B, H_kv, L, D) as (total, H_kv, D) views for ``attention_varlen``, row b's key
    j at token ``b·T + j``: returns (k view, v view, T).

    A view exists when the batch stride is a multiple T >= L of the key stride: the
    (B, L, H_kv, D) memory of a fresh projection (T = L) and a cache's (B, H_kv, L, D)
    (T = H_kv·L; then the view's head stride L·D makes tokens of different heads share
    addresses, which the kernel reads but never writes). Otherwise both are copied to
    contiguous memory first; likewise when k's and v's strides differ."""
    batch, heads, length, dim = k.shape
    if length == 0:
        return k.new_empty((0, heads, dim)), v.new_empty((0, heads, dim)), 0
    if k.stride() != v.stride():
        k, v = k.contiguous(), v.contiguous()
    stride_b, stride_h, stride_l, stride_d = k.stride()
    usable = length <= 1 or (stride_l > 0 and (batch <= 1 or (
        stride_b % stride_l == 0 and stride_b // stride_l >= length)))
    if not usable:
        k, v = k.contiguous(), v.contiguous()
        stride_b, stride_h, stride_l, stride_d = k.stride()
    if length <= 1:  # the key stride is never stepped along: make it one row of the batch
        stride_l = stride_b if batch > 1 else max(stride_l, 1)
        tokens = 1
    else:
        tokens = stride_b // stride_l if batch > 1 else length
    total = max(batch - 1, 0) * tokens + length
    shape, strides = (total, heads, dim), (stride_l, stride_h, stride_d)
    return k.as_strided(shape, strides), v.as_strided(shape, strides), tokens
