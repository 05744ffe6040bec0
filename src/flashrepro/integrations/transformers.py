"""``attn_implementation="frepro"`` for Hugging Face transformers (extra ``models``).

Importing this module registers :func:`attention_forward` and :func:`mask` under :data:`NAME`::

    import flashrepro.integrations.transformers  # noqa: F401
    model = AutoModelForCausalLM.from_config(config, attn_implementation="frepro")

Every attention layer then runs flashrepro's kernels with the conventions of transformers
5.17's ``sdpa_attention_forward``: causal or bidirectional, GQA without ``repeat_kv`` copies,
forward only. Runs:

* equal-length batches: :func:`flashrepro.attention` (prefill), or
  :func:`flashrepro.attention_kvcache` over the cache for L_q <= 16 (decode);
* padded batches (a 2-D ``attention_mask`` with zeros: left padding, right padding, both)
  and a ``StaticCache``'s unwritten slots, with or without a KV cache, eager or compiled;
* packed sequences: ``position_ids`` that restart (transformers' packed-sequence mask, eager)
  or FlashAttention's keyword arguments ``cu_seq_lens_q``/``cu_seq_lens_k``/``max_length_q``/
  ``max_length_k`` (``FlashAttentionKwargs``, eager or compiled).

How padding runs without a host sync: :func:`mask`, which transformers calls once per
forward, turns the padding mask into each row's span of valid keys on the device
(:mod:`flashrepro.integrations.key_spans`) and returns that descriptor in place of a mask;
the layers pass it back to :func:`attention_forward`. There the queries are flattened to
B·L_q rows and the keys viewed token-major without a copy, and one
:func:`flashrepro.attention_varlen` launch gives each row's real queries its span (bottom-right
causal, as FlashAttention's varlen) and each padding query no key (output 0). For L_q <= 16
the rows whose valid keys are a prefix go through :func:`flashrepro.attention_kvcache` with
their span's end as ``seqused_k`` instead, and the two outputs (each 0 where the other
computes) are added. Shapes never depend on the lengths, so one compiled graph and one CUDA
graph serve every step of a ``StaticCache`` decode.

Where it is free, :func:`mask` reads the mask on the host instead, as transformers' own SDPA
mask does (one sync per forward): in eager mode, except a static cache's decode steps (L_q <=
16 with a tensor query offset: the compiled generate() path, kept free of syncs). There it
refuses a row whose valid keys are not contiguous by name, and an unpadded batch takes the
kernels of equal-length batches. Under tracing, in a CUDA-graph capture and in a static
cache's decode, such a row gets NaN outputs instead (never a silent wrong value).

Refused by name (ValueError): other mask patterns (sliding windows, chunked attention,
``or``/``and`` mask functions, custom 4-D masks), dropout, soft-capping, attention sinks,
position biases, ``output_attentions``, non-contiguous valid keys where :func:`mask` checks
them; under tracing packed sequences given only by ``position_ids`` (a RuntimeError at run
time: pass ``cu_seq_lens_*``/``max_length_*``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import (
    AttentionMaskInterface,
    bidirectional_mask_function,
    causal_mask_function,
)
from transformers.utils.import_utils import is_cuda_stream_capturing, is_tracing

import flashrepro
from flashrepro import launch, launch_varlen, native, ops
from flashrepro.api import needs_operator
from flashrepro.integrations.key_spans import (
    KVCACHE_MAX_LQ,
    KeyPrefix,
    KeySpans,
    Packed,
    UsedKeys,
    key_spans,
    key_validity,
    prefix_layout,
    token_major,
    with_layout,
)

NAME = "frepro"
"""The registered ``attn_implementation``. Not "flashrepro": transformers 5.17 imports a
FlashAttention build for any name containing "flash" (``is_flash_attention_requested``)."""

_UNSUPPORTED_KWARGS = {
    "softcap": "logit soft-capping",
    "sliding_window": "a sliding window",
    "position_bias": "an additive position bias",
    "s_aux": "attention sinks",
    "sinks": "attention sinks",
}
"""Model keyword arguments for features the kernel lacks: refused unless None, 0 or False."""

_VARLEN_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
"""transformers' ``FlashAttentionKwargs``: packed sequences given by their offsets."""
_VARLEN_SET = frozenset(_VARLEN_KWARGS)
_NAMED_KWARGS = frozenset({*_UNSUPPORTED_KWARGS, *_VARLEN_KWARGS, "output_attentions"})
"""The keyword arguments :func:`attention_forward` reads from ``kwargs``."""


def _refuse(what: str) -> ValueError:
    return ValueError(f"attn_implementation={NAME!r} cannot run {what}: flashrepro's kernels "
                      "compute causal or full softmax attention over each row's contiguous "
                      "valid keys, without other masks, dropout or biases; use "
                      "attn_implementation='sdpa' for this model or input")


def _is_packed_term(mask_function: Any, use_vmap: bool) -> bool:
    """Whether ``mask_function`` is transformers' causal pattern and-ed with its
    packed-sequence term (``and_masks(causal_mask_function, packed_sequence_mask_function(.))``
    in ``create_causal_mask``). Eager: read from the closure. Under tracing, where the closure
    cannot be read, any non-vmap ``and_mask`` (transformers adds that term whenever it cannot
    rule packing out); :func:`_assert_no_hidden_key` then checks it at run time."""
    if getattr(mask_function, "__name__", "") != "and_mask" or use_vmap:
        return False
    if is_tracing():
        return True
    cells = dict(zip(mask_function.__code__.co_freevars, mask_function.__closure__ or (),
                     strict=True))
    parts = cells["mask_functions"].cell_contents if "mask_functions" in cells else ()
    names = [getattr(p, "__qualname__", "") for p in parts]
    return (len(parts) == 2 and parts[0] is causal_mask_function
            and names[1].startswith("packed_sequence_mask_function."))


def mask(batch_size: int, q_length: int, kv_length: int, q_offset: int | torch.Tensor = 0,
         kv_offset: int = 0, mask_function: Any = causal_mask_function,
         attention_mask: torch.Tensor | None = None, **kwargs: Any
         ) -> KeyPrefix | UsedKeys | KeySpans | Packed | None:
    """``AttentionMaskInterface``'s function for :data:`NAME`, called with ``sdpa_mask``'s
    arguments once per forward: returns the descriptor of the keys each query sees
    (:mod:`flashrepro.integrations.key_spans`), which the model passes to every layer's
    :func:`attention_forward` as its ``attention_mask``.

    Returns None when every key is valid and the queries are the last keys (or the pattern is
    bidirectional): the kernels' ``causal`` flag is the mask, and at L_q <= 16 the decode
    kernel reads the whole cache;
    :class:`~flashrepro.integrations.key_spans.KeyPrefix` when every row's valid keys are the
    same prefix, known on the host (a static cache's prefill read on the host);
    :class:`~flashrepro.integrations.key_spans.UsedKeys` when each row's valid keys are a
    prefix ending at its last query, known on the device only (a static cache not read on
    the host); :class:`~flashrepro.integrations.key_spans.KeySpans` for padding;
    :class:`~flashrepro.integrations.key_spans.Packed` for transformers' packed-sequence term.
    When the mask is read on the host and when not: the module docstring.

    Raises:
        ValueError: another mask pattern (sliding window, chunked, custom ``or``/``and``
            terms), or, where the mask is read on the host, a row whose valid keys are not
            contiguous (padding between its tokens, e.g. right padding followed by generated
            tokens).
    """
    use_vmap = bool(kwargs.get("use_vmap", False))
    device = kwargs.get("device")
    for source in (attention_mask, q_offset):
        if device is None and isinstance(source, torch.Tensor):
            device = source.device
    bidirectional = mask_function is bidirectional_mask_function
    if not bidirectional and mask_function is not causal_mask_function:
        if not _is_packed_term(mask_function, use_vmap):
            pattern = getattr(mask_function, "__name__", mask_function)
            raise _refuse("this mask pattern (a sliding window, chunked attention or a custom "
                          f"or/and mask: {pattern})")
        no_restart = None
        if is_tracing():
            no_restart = _no_hidden_key(mask_function, batch_size, q_length, kv_length,
                                        q_offset, kv_offset, device)
        return Packed(no_restart)
    static = isinstance(q_offset, torch.Tensor)
    traced = is_tracing() or any(is_tracing(t) for t in (q_offset, attention_mask)
                                 if isinstance(t, torch.Tensor))
    on_host = not traced and not (static and q_length <= KVCACHE_MAX_LQ)
    last_query = None if bidirectional else q_offset + q_length - 1
    end = None  # the valid keys' end when every row is unpadded and it is a host int
    if bidirectional:
        end = kv_length
    elif not static:
        end = q_offset + q_length - kv_offset
    elif on_host:
        end = int(q_offset) + q_length - kv_offset
    if attention_mask is not None:
        valid = key_validity(batch_size, kv_length, kv_offset, last_query, attention_mask,
                             device)
        spans = key_spans(valid, 0 if bidirectional else q_offset - kv_offset)
        if not on_host:
            return with_layout(spans, q_length, kv_length, not bidirectional)
        start, stop, broken = torch.stack([spans.start, spans.end,
                                           spans.broken.to(torch.int32)]).tolist()
        if any(broken):
            raise _refuse(f"padding between the tokens of a row (rows {_rows(broken)} of "
                          "attention_mask have valid keys that are not contiguous, e.g. right "
                          "padding followed by generated tokens); pad on the left")
        if any(start) or any(s != end for s in stop):
            return with_layout(spans._replace(broken=None), q_length, kv_length,
                               not bidirectional)
    if end is None:  # a static cache, not read on the host
        used = (q_offset + q_length - kv_offset).to(device=device, dtype=torch.int32)
        # contiguous once per forward, not in each layer's launch
        return UsedKeys(used.reshape(1).expand(batch_size).contiguous())
    return None if end == kv_length else KeyPrefix(end)


def _rows(flags: list[int]) -> list[int]:
    return [i for i, f in enumerate(flags) if f][:8]


def _no_hidden_key(mask_function: Any, batch_size: int, q_length: int, kv_length: int,
                   q_offset: int | torch.Tensor, kv_offset: int,
                   device: torch.device | None) -> torch.Tensor:
    """A traced bool: ``mask_function`` shows the first key to every query and every key to the
    last query, as the causal pattern does; transformers' packed-sequence term fails it exactly
    when position_ids restart (``find_packed_sequence_indices``)."""
    b = torch.arange(batch_size, device=device)[:, None, None, None]
    h = torch.zeros(1, dtype=torch.long, device=device)[None, :, None, None]
    q = (torch.arange(q_length, device=device) + q_offset)[None, None, :, None]
    kv = (torch.arange(kv_length, device=device) + kv_offset)[None, None, None, :]
    first_key = mask_function(b, h, q, kv[..., :1])
    last_query = mask_function(b, h, q[..., -1:, :], kv)
    return first_key.all() & last_query.all()


def _assert_at_run_time(condition: torch.Tensor, message: str) -> None:
    """Raise ``RuntimeError(message)`` when the traced boolean ``condition`` is False at run time.

    Checked on a CPU copy (one sync): on a CUDA tensor ``torch._assert_async`` is a device-side
    assert that loses the CUDA context (lab/2026-12-01-compiled-mask-checks/). In a CUDA-graph
    capture, where a sync is illegal, the check stays on the device: a replay whose inputs
    violate it ends in that device-side assert."""
    if not torch.compiler.is_compiling() and is_cuda_stream_capturing():
        torch._assert_async(condition, message)
    else:
        torch._assert_async(condition.cpu(), message)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor,
                      attention_mask: KeyPrefix | UsedKeys | KeySpans | Packed | None,
                      dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature, computed by flashrepro's kernels.

    ``query`` is (B, H, L_q, D) fp16 or bf16, ``key`` and ``value`` (B, H_kv, L_k, D) with H a
    multiple of H_kv, any strides; ``scaling`` None is 1/sqrt(D). ``is_causal`` overrides
    ``module.is_causal`` (default True); causal aligned to the last valid key of each row
    (bottom-right, as a KV cache needs). ``attention_mask`` is what :func:`mask` returned.
    With ``cu_seq_lens_q``, ``cu_seq_lens_k``, ``max_length_q`` and ``max_length_k`` (all four)
    the tokens are packed sequences as FlashAttention's ``flash_attn_varlen_func`` takes them
    (query token b·L_q + i, key token b·L_k + j). Returns (attn_output, None), attn_output
    (B, L_q, H, D) in query's dtype; padding queries (outside their row's valid keys) get 0.

    Raises:
        ValueError: another ``attention_mask`` (a tensor: custom or 4-D masks), dropout > 0,
            ``softcap``, ``sliding_window``, ``position_bias``, ``s_aux``/``sinks`` or
            ``output_attentions`` set, some but not all of the four varlen arguments, or them
            with padding; packed sequences without ``position_ids``; and every error of the
            kernels' entry points (e.g. a tensor that requires grad: forward only).
        TypeError: ``cu_seq_lens_q`` or ``cu_seq_lens_k`` not a tensor of integers.
        RuntimeError: under tracing, at run time (first layer): packed sequences given only
            by ``position_ids``.
    """
    if dropout:
        raise _refuse(f"attention dropout (dropout={dropout})")
    varlen = _varlen_kwargs(kwargs) if kwargs else None
    descriptor = attention_mask
    if descriptor is not None and not isinstance(descriptor, (KeyPrefix, UsedKeys, KeySpans,
                                                              Packed)):
        shape = tuple(descriptor.shape) if isinstance(descriptor, torch.Tensor) else None
        raise _refuse(f"an explicit attention mask ({type(descriptor).__name__}, shape "
                      f"{shape}; flashrepro's own mask function returns key spans)")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    scale = None if scaling is None else float(scaling)
    if varlen is not None:
        if isinstance(descriptor, KeySpans):
            raise _refuse("padding in attention_mask together with cu_seq_lens_q/k (pass "
                          "one or the other)")
        return _packed(query, key, value, *varlen, causal, scale), None
    if isinstance(descriptor, KeyPrefix):
        key, value = key[:, :, :descriptor.length], value[:, :, :descriptor.length]
        descriptor = None
    if descriptor is None:  # every key valid (a DynamicCache's decode step): no seqused_k
        if query.shape[2] <= KVCACHE_MAX_LQ:
            return _kvcache(query, key, value, None, causal, scale), None
        return _dense(query, key, value, causal and query.shape[2] > 1, scale), None
    if isinstance(descriptor, Packed):
        if descriptor.no_restart is None:
            return _packed_by_position(query, key, value, kwargs.get("position_ids"),
                                       causal, scale), None
        if getattr(module, "layer_idx", 0) in (0, None):  # once per forward
            _assert_at_run_time(descriptor.no_restart, f"attn_implementation={NAME!r}: packed "
                                "sequences given only by position_ids (restarting within a "
                                "row) are not supported under tracing; pass cu_seq_lens_q/k "
                                "and max_length_q/k (FlashAttentionKwargs)")
        # the prefill kernels at any L_q: choosing by L_q would guard a dynamic length
        return _dense(query, key, value, causal and query.shape[2] > 1, scale), None
    if isinstance(descriptor, UsedKeys):
        if query.shape[2] <= KVCACHE_MAX_LQ:
            return _kvcache(query, key, value, descriptor.used, causal, scale), None
        return _prefix(query, key, value, descriptor.used, causal, scale), None
    return _spans(query, key, value, descriptor, causal, scale), None


def _varlen_kwargs(kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """Refuse the model keyword arguments of features the kernels lack
    (:data:`_UNSUPPORTED_KWARGS`, ``output_attentions``); return FlashAttention's four varlen
    arguments where any is given (all four, else refused by name), else None. Reads only the
    names passed."""
    named = _NAMED_KWARGS.intersection(kwargs)
    for name in sorted(named):  # in one order, whatever the model's
        value_set = kwargs[name]
        if name in _UNSUPPORTED_KWARGS and value_set is not None and value_set is not False \
                and not (isinstance(value_set, (int, float)) and value_set == 0):
            raise _refuse(f"{_UNSUPPORTED_KWARGS[name]} ({name}={value_set!r})")
    if "output_attentions" in named and kwargs["output_attentions"]:
        raise _refuse("output_attentions=True (the kernel never forms the attention weights)")
    if _VARLEN_SET.isdisjoint(named):
        return None
    varlen = tuple(kwargs.get(k) for k in _VARLEN_KWARGS)
    if all(v is None for v in varlen):
        return None
    if any(v is None for v in varlen):
        given = [k for k, v in zip(_VARLEN_KWARGS, varlen, strict=True) if v is not None]
        raise _refuse(f"packed sequences from {given} alone (pass all of "
                      f"{list(_VARLEN_KWARGS)})")
    return varlen


def _dense(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool,
           scale: float | None) -> torch.Tensor:
    """:func:`flashrepro.attention` (bottom-right causal, GQA allowed), output (B, L_q, H, D)."""
    if needs_operator(query, key, value):  # flashrepro.attention's rule
        return traced_attention(query, key, value, causal, scale, True)
    fast = native.forward_registry()
    if fast is not None:  # a plan hit launched from C++
        o = fast.forward(query, key, value, causal, scale, True, "bottom_right", False)
        if o is not None:
            return o.transpose(1, 2)
    # its eager call, the output born (B, L, H, D): no transpose copy, no out= checks
    o, _ = launch.forward(query, key, value, causal=causal, scale=scale, enable_gqa=True,
                          causal_alignment="bottom_right", return_lse=False, config=None,
                          out=None, bshd=True)
    if fast is not None:
        native.remember_forward(query, key, value, causal, scale, True, "bottom_right", False)
    return o.transpose(1, 2)


def traced_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool,
                     scale: float | None, enable_gqa: bool) -> torch.Tensor:
    """:func:`_dense` under ``torch.compile`` / ``torch.export``: the operator
    ``torch.ops.flashrepro.attention_bshd``, whose output is born (B, L_q, H, D), contiguous, as
    ``out=`` would cost a copy in a functional graph. Raises :func:`flashrepro.attention`'s
    ValueError and TypeError (at tracing, or when the compiled graph runs)."""
    return ops.attention_bshd(query, key, value, causal, scale, enable_gqa, "bottom_right",
                              None).transpose(1, 2)


def _kvcache(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             used: torch.Tensor | None, causal: bool, scale: float | None) -> torch.Tensor:
    """:func:`flashrepro.attention_kvcache` with ``seqused_k=used`` (None: every key), GQA
    allowed, output (B, L_q, H, D)."""
    if needs_operator(query, key, value, used):
        return flashrepro.attention_kvcache(query, key, value, used, causal=causal, scale=scale,
                                            enable_gqa=True).transpose(1, 2)
    fast = native.registry() if used is None else None
    if fast is not None:  # a DynamicCache's decode: a plan hit launched from C++
        o = fast.decode(query, key, value, causal, scale)
        if o is not None:
            return o
    # its eager call, the output born (B, L_q, H, D): no transpose copy, no out= checks
    o, _ = launch_varlen.kvcache_forward(query, key, value, used, causal=causal, scale=scale,
                                         enable_gqa=True, num_splits=None, return_lse=False,
                                         bshd=True)
    if fast is not None:
        native.remember(query, key, value, causal, scale)
    return o


_MEMO: dict[tuple[Any, ...], tuple[torch.Tensor, Any]] = {}
"""Derived kernel arguments of recent descriptors: (id(source), *key) -> (source, value)."""


def _derived(source: torch.Tensor, key: tuple[Any, ...], compute: Any) -> Any:
    """``compute()``, reused while the layers of one eager forward ask for it with the same
    descriptor tensor ``source`` (held, so its identity stays unique) and ``key``; at most 8
    entries are kept. Under tracing it is computed in the graph."""
    if is_tracing(source):
        return compute()
    entry = (id(source), *key)
    hit = _MEMO.get(entry)
    if hit is not None and hit[0] is source:
        return hit[1]
    value = compute()
    if len(_MEMO) >= 8:
        _MEMO.clear()
    _MEMO[entry] = (source, value)
    return value


def _varlen_bshd(query: torch.Tensor, k_flat: torch.Tensor, v_flat: torch.Tensor,
                 cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int,
                 causal: bool, scale: float | None, used: torch.Tensor | None) -> torch.Tensor:
    """:func:`flashrepro.attention_varlen` on ``query`` (B, H, L_q, D) flattened to B·L_q rows;
    output (B, L_q, H, D)."""
    b, h, lq, d = query.shape
    q_flat = query.transpose(1, 2).reshape(b * lq, h, d)
    o = flashrepro.attention_varlen(q_flat, k_flat, v_flat, cu_q, cu_k, max_q, max_k,
                                    causal=causal, scale=scale, seqused_k=used)
    return o.view(b, lq, h, d)


def _prefix(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, used: torch.Tensor,
            causal: bool, scale: float | None) -> torch.Tensor:
    """:class:`UsedKeys` for L_q > 16: one varlen sequence per row."""
    lq, lk = query.shape[2], key.shape[2]
    k_flat, v_flat, tokens = token_major(key, value)
    cu_q, cu_k, seqused = _derived(used, ("prefix", lq, lk, tokens),
                                   lambda: prefix_layout(used, lq, lk, tokens))
    return _varlen_bshd(query, k_flat, v_flat, cu_q, cu_k, lq, lk, causal, scale, seqused)


def _spans(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, spans: KeySpans,
           causal: bool, scale: float | None) -> torch.Tensor:
    """:class:`KeySpans`: the varlen kernel over each row's span (L_q <= 16: only rows the
    KV-cache kernel cannot take, the two outputs added), NaN on broken rows."""
    b, lq, lk = query.shape[0], query.shape[2], key.shape[2]
    k_flat, v_flat, tokens = token_major(key, value)
    if spans.layout is None or (spans.layout.lq, spans.layout.causal) != (lq, causal):
        spans = _derived(spans.end, ("layout", lq, lk, causal),
                         lambda: with_layout(spans, lq, lk, causal))
    layout = spans.layout
    assert layout is not None
    cu_k = _derived(layout.key_offsets, ("cu_k", tokens),
                    lambda: layout.cu_seqlens_k(tokens))
    out = _varlen_bshd(query, k_flat, v_flat, layout.cu_seqlens_q, cu_k, lq, lk, causal,
                       scale, layout.seqused_k)
    if layout.kv_used is not None:
        out = out + _kvcache(query, key, value, layout.kv_used, causal, scale)
    broken = spans.broken
    if broken is not None:
        out = out + _derived(broken, ("poison", out.dtype), lambda: torch.where(
            broken, float("nan"), 0.0).to(out.dtype).view(b, 1, 1, 1))
    return out


def _token_rows(t: torch.Tensor) -> torch.Tensor:
    """(B, H, L, D) -> (B·L, H, D), token b·L + i (a view where the memory allows)."""
    b, h, n, d = t.shape
    return t.transpose(1, 2).reshape(b * n, h, d)


def _host_int(name: str, value: object) -> int:
    if isinstance(value, torch.Tensor):
        if is_tracing(value):
            raise _refuse(f"{name} as a tensor under tracing (pass a host int)")
        return int(value)
    return value  # type: ignore[return-value]  # attention_varlen names a bad type


def _offsets(name: str, value: object, device: torch.device) -> torch.Tensor:
    """FlashAttentionKwargs' cumulative lengths as the varlen kernel takes them: int32 on
    ``device``, from a tensor of any integer dtype (transformers makes int32)."""
    if not isinstance(value, torch.Tensor) or value.dtype.is_floating_point \
            or value.dtype.is_complex or value.dtype == torch.bool:
        what = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
        raise TypeError(f"attn_implementation={NAME!r}: {name} must be a tensor of integer "
                        f"offsets (FlashAttentionKwargs), got {what}")
    return value.to(device=device, dtype=torch.int32)


def _packed(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_q: torch.Tensor,
            cu_k: torch.Tensor, max_q: object, max_k: object, causal: bool,
            scale: float | None) -> torch.Tensor:
    """FlashAttentionKwargs' packed sequences: query token b·L_q + i, key token b·L_k + j."""
    device = query.device
    cu_q = _offsets("cu_seq_lens_q", cu_q, device)
    cu_k = _offsets("cu_seq_lens_k", cu_k, device)
    o = flashrepro.attention_varlen(_token_rows(query), _token_rows(key), _token_rows(value),
                                    cu_q, cu_k, _host_int("max_length_q", max_q),
                                    _host_int("max_length_k", max_k), causal=causal,
                                    scale=scale)
    b, h, lq, d = query.shape
    return o.view(b, lq, h, d)


_POSITION_MEMO: list[Any] = [None, None]


def _packed_by_position(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        position_ids: torch.Tensor | None, causal: bool,
                        scale: float | None) -> torch.Tensor:
    """Eager packed sequences from ``position_ids`` (B or 1, L): a sequence starts at each
    row's first token and wherever the id is not the previous one plus 1 (transformers'
    ``find_packed_sequence_indices``). Its offsets need a host read of their count and longest
    length (one sync per forward, as transformers' own FlashAttention path)."""
    b, lq = query.shape[0], query.shape[2]
    if position_ids is None or key.shape[2] != lq:
        raise _refuse("packed sequences without position_ids of the queries' length (the "
                      "model passes none, or a KV cache holds earlier tokens)")
    seen = _POSITION_MEMO[0]
    # the offsets depend on the queries' batch and device as well: (1, L) ids serve any B
    if (seen is None or seen[0] is not position_ids
            or seen[1:] != (position_ids._version, b, lq, query.device)):
        pos = position_ids.to(query.device).expand(b, lq)
        starts = torch.ones((b, lq), dtype=torch.bool, device=query.device)
        starts[:, 1:] = pos[:, 1:] - pos[:, :-1] != 1
        cu = torch.cat([starts.flatten().nonzero().flatten(),
                        torch.tensor([b * lq], device=query.device)]).to(torch.int32)
        _POSITION_MEMO[:] = [(position_ids, position_ids._version, b, lq, query.device),
                             (cu, int(cu.diff().max()))]
    cu, longest = _POSITION_MEMO[1]
    return _packed(query, key, value, cu, cu, longest, longest, causal, scale)


def register() -> None:
    """Register :func:`attention_forward` and :func:`mask` under :data:`NAME` (idempotent)."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, mask)


register()
