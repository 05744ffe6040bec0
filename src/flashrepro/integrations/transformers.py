"""``attn_implementation="frepro"`` for Hugging Face transformers (extra ``models``).

Importing this module registers :func:`attention_forward` and :func:`mask` under :data:`NAME`::

    import flashrepro.integrations.transformers  # noqa: F401
    model = AutoModelForCausalLM.from_config(config, attn_implementation="frepro")

Every attention layer then runs :func:`flashrepro.attention` with the conventions of
transformers 5.17's ``sdpa_attention_forward``: causal or bidirectional, GQA without
``repeat_kv`` copies, forward only. Other masks and features raise a ValueError naming them.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import (
    AttentionMaskInterface,
    bidirectional_mask_function,
    causal_mask_function,
    prepare_padding_mask,
)
from transformers.utils.import_utils import is_cuda_stream_capturing, is_tracing

import flashrepro
from flashrepro import ops
from flashrepro.api import needs_operator

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


def _refuse(what: str) -> ValueError:
    return ValueError(f"attn_implementation={NAME!r} cannot run {what}: flashrepro's kernel "
                      "computes causal or full softmax attention without masks, dropout or "
                      "biases; use attn_implementation='sdpa' for this model or input")


def mask(batch_size: int, q_length: int, kv_length: int, q_offset: int | torch.Tensor = 0,
         kv_offset: int = 0, mask_function: Any = causal_mask_function,
         attention_mask: torch.Tensor | None = None, **kwargs: Any) -> None:
    """``AttentionMaskInterface``'s function for :data:`NAME`, called with ``sdpa_mask``'s
    arguments: returns None (the kernel's ``causal`` flag is the mask) or raises.

    Accepted: ``bidirectional_mask_function``; ``causal_mask_function`` with the queries the last
    keys (``q_offset + q_length == kv_offset + kv_length``); an ``attention_mask`` (B, N) that is
    True at key columns kv_offset .. kv_offset + L_k - 1 (a column past N is padding, as in
    ``prepare_padding_mask``). Under tracing transformers and-s a packed-sequence term into the
    pattern (without ``use_vmap``): accepted, and checked at run time on the first key's column
    and the last query's row.

    Raises:
        ValueError: another mask pattern, padding, causal queries that are not the last keys
            (a static cache's unwritten slots), or a static cache under tracing.
        RuntimeError: under tracing, at run time: padding or packed sequences.
    """
    traced_and = (is_tracing() and getattr(mask_function, "__name__", "") == "and_mask"
                  and not kwargs.get("use_vmap", False))
    if mask_function not in (causal_mask_function, bidirectional_mask_function) and not traced_and:
        pattern = getattr(mask_function, "__name__", mask_function)
        raise _refuse("this mask pattern (a sliding window, chunked attention, packed sequences "
                      f"or a custom or/and mask: {pattern})")
    if isinstance(q_offset, torch.Tensor):
        if is_tracing(q_offset):
            raise _refuse("a static cache under tracing (the query offset is a tensor)")
        q_offset = int(q_offset)
    if traced_and:
        _assert_no_hidden_key(mask_function, batch_size, q_length, kv_length, q_offset,
                              kv_offset, kwargs.get("device"))
    if (mask_function is not bidirectional_mask_function
            and q_offset + q_length != kv_offset + kv_length):
        raise _refuse(f"queries at positions {q_offset}..{q_offset + q_length - 1} against keys "
                      f"at {kv_offset}..{kv_offset + kv_length - 1} (the queries must be the "
                      "last keys; a static cache's unwritten slots are not)")
    if attention_mask is not None:
        # The keys' columns as transformers reads them; a missing column is a padded key.
        padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
        padding = padding[:, kv_offset:kv_offset + kv_length]
        if is_tracing(padding):
            _assert_at_run_time(padding.all(), f"attn_implementation={NAME!r}: padding tokens "
                                "in attention_mask are not supported")
        elif not bool(padding.all()):
            raise _refuse("padding (attention_mask has False entries); pass sequences of equal "
                          "length without padding, or attention_mask=None")
    return None


def _assert_no_hidden_key(mask_function: Any, batch_size: int, q_length: int, kv_length: int,
                          q_offset: int, kv_offset: int, device: torch.device | None) -> None:
    """Assert at run time that ``mask_function`` shows the first key to every query and every key
    to the last query, as the causal and bidirectional patterns do; transformers' packed-sequence
    term fails it exactly when position_ids restart (``find_packed_sequence_indices``)."""
    b = torch.arange(batch_size, device=device)[:, None, None, None]
    h = torch.zeros(1, dtype=torch.long, device=device)[None, :, None, None]
    q = (torch.arange(q_length, device=device) + q_offset)[None, None, :, None]
    kv = (torch.arange(kv_length, device=device) + kv_offset)[None, None, None, :]
    first_key = mask_function(b, h, q, kv[..., :1])
    last_query = mask_function(b, h, q[..., -1:, :], kv)
    _assert_at_run_time(first_key.all() & last_query.all(),
                        f"attn_implementation={NAME!r}: packed sequences (position_ids "
                        "restarting within a row) or another mask term hiding keys are not "
                        "supported under tracing")


def _assert_at_run_time(condition: torch.Tensor, message: str) -> None:
    """Raise ``RuntimeError(message)`` when the traced boolean ``condition`` is False at run time.

    Checked on a CPU copy (one sync per mask): on a CUDA tensor ``torch._assert_async`` is a
    device-side assert that loses the CUDA context (lab/2026-12-01-compiled-mask-checks/). In a
    CUDA-graph capture, where a sync is illegal, the check stays on the device: a replay whose
    inputs violate it ends in that device-side assert."""
    if not torch.compiler.is_compiling() and is_cuda_stream_capturing():
        torch._assert_async(condition, message)
    else:
        torch._assert_async(condition.cpu(), message)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, attention_mask: torch.Tensor | None,
                      dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature, computed by :func:`flashrepro.attention`.

    ``query`` is (B, H, L_q, D) fp16 or bf16, ``key`` and ``value`` (B, H_kv, L_k, D) with H a
    multiple of H_kv, any strides; ``scaling`` None is 1/sqrt(D). ``is_causal`` overrides
    ``module.is_causal`` (default True); causal only when L_q > 1, aligned to the last key
    (``causal_alignment='bottom_right'``, as a KV cache needs). Returns (attn_output, None),
    attn_output (B, L_q, H, D), contiguous, in query's dtype.

    Raises:
        ValueError: ``attention_mask`` not None (:func:`mask` makes it None), dropout > 0,
            ``softcap``, ``sliding_window``, ``position_bias``, ``s_aux``/``sinks`` or
            ``output_attentions`` set, and every error of :func:`flashrepro.attention` (e.g. a
            tensor that requires grad: the kernel is forward-only).
    """
    if attention_mask is not None:
        raise _refuse(f"an explicit attention mask (shape {tuple(attention_mask.shape)})")
    if dropout:
        raise _refuse(f"attention dropout (dropout={dropout})")
    for name, what in _UNSUPPORTED_KWARGS.items():
        value_set = kwargs.get(name)
        if value_set is not None and value_set is not False and not (
                isinstance(value_set, (int, float)) and value_set == 0):
            raise _refuse(f"{what} ({name}={value_set!r})")
    if kwargs.get("output_attentions", False):
        raise _refuse("output_attentions=True (the kernel never forms the attention weights)")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = query.shape[2] > 1 and bool(causal)
    enable_gqa = key.shape[1] != query.shape[1]
    if needs_operator(query):  # the same rule as flashrepro.attention's, one check per layer
        return traced_attention(query, key, value, causal, scaling, enable_gqa), None
    b, h, lq, d = query.shape
    # Written straight into the (B, L, H, D) layout transformers wants: no transpose copy.
    out = torch.empty((b, lq, h, d), dtype=query.dtype, device=query.device)
    flashrepro.attention(query, key, value, causal=causal, scale=scaling,
                         enable_gqa=enable_gqa, causal_alignment="bottom_right",
                         out=out.transpose(1, 2))
    return out, None


def traced_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool,
                     scale: float | None, enable_gqa: bool) -> torch.Tensor:
    """:func:`attention_forward` under ``torch.compile`` / ``torch.export``: the operator
    ``torch.ops.flashrepro.attention_bshd``, whose output is born (B, L_q, H, D), contiguous, as
    ``out=`` would cost a copy in a functional graph. Raises :func:`flashrepro.attention`'s
    ValueError and TypeError (at tracing, or when the compiled graph runs)."""
    if scale is not None:
        scale = float(scale)
    return ops.attention_bshd(query, key, value, causal, scale, enable_gqa, "bottom_right",
                              None).transpose(1, 2)


def register() -> None:
    """Register :func:`attention_forward` and :func:`mask` under :data:`NAME` (idempotent)."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, mask)


register()
