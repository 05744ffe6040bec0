"""``attn_implementation="frepro"`` for Hugging Face transformers (extra ``models``).

Importing this module registers :func:`attention_forward` with transformers'
``AttentionInterface`` and :func:`mask` with its ``AttentionMaskInterface``, both under the name
:data:`NAME` (idempotent: :func:`register` may be called again). Then::

    import flashrepro.integrations.transformers  # noqa: F401
    model = AutoModelForCausalLM.from_config(config, attn_implementation="frepro")

runs every attention layer through :func:`flashrepro.attention`: causal (or bidirectional)
attention without padding, GQA through ``enable_gqa`` (no ``repeat_kv`` copies), forward only.
What the kernel cannot do is refused with a ValueError that names the rule: padding or custom
masks, sliding windows, packed sequences, attention dropout, logit soft-capping, attention
sinks, position biases, ``output_attentions``, static caches with unwritten slots.

Conventions are those of transformers 5.17's ``integrations/sdpa_attention.py``
(``sdpa_attention_forward``): queries, keys and values arrive as (B, H, L, D) and (B, H_kv, L,
D); the output is returned as (B, L, H, D) with attention weights None; ``is_causal`` from the
call, else ``module.is_causal``, and causal only when L_q > 1 (a single query row sees every
key, as under SDPA).
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
"""The ``attn_implementation`` name this module registers. Not "flashrepro": transformers 5.17
treats every name containing "flash" as a FlashAttention build to import
(``utils.generic.is_flash_attention_requested``, then ``lazy_import_flash_attention``), and
``set_attn_implementation("flashrepro")`` fails there."""

_UNSUPPORTED_KWARGS = {
    "softcap": "logit soft-capping",
    "sliding_window": "a sliding window",
    "position_bias": "an additive position bias",
    "s_aux": "attention sinks",
    "sinks": "attention sinks",
}
"""Keyword arguments transformers' models pass to an attention function for features the kernel
lacks: refused when not None (and not 0 / False)."""


def _refuse(what: str) -> ValueError:
    return ValueError(f"attn_implementation={NAME!r} cannot run {what}: flashrepro's kernel "
                      "computes causal or full softmax attention without masks, dropout or "
                      "biases; use attn_implementation='sdpa' for this model or input")


def mask(batch_size: int, q_length: int, kv_length: int, q_offset: int | torch.Tensor = 0,
         kv_offset: int = 0, mask_function: Any = causal_mask_function,
         attention_mask: torch.Tensor | None = None, **kwargs: Any) -> None:
    """The mask function of ``AttentionMaskInterface`` for :data:`NAME`: always None, or an error.

    transformers calls it from ``create_causal_mask`` / ``create_bidirectional_mask`` with the
    arguments of ``masking_utils.sdpa_mask``. The attention function then needs no mask: the
    causal pattern is the kernel's ``causal`` flag.

    Args:
        batch_size, q_length, kv_length: the attention's B, L_q and L_k.
        q_offset, kv_offset: positions of the first query and the first key (a KV cache).
        mask_function: transformers' mask pattern; only ``causal_mask_function`` and
            ``bidirectional_mask_function`` are accepted (sliding windows, chunked attention,
            packed sequences and or/and masks compose other functions). Under tracing
            (torch.compile, export) transformers cannot tell whether position_ids restart and
            always and-s a packed-sequence term into the pattern: that and-composition is
            accepted (not one of the caller's own, which transformers builds with
            ``use_vmap=True``), and the pattern is evaluated on the first key's column and the
            last query's row (B·(L_q + L_k) elements), which the plain causal or bidirectional
            pattern sees in full; a hidden element there (packed sequences) fails at run time.
        attention_mask: (B, N) bool or integer padding mask over key positions, or None. The
            keys are its columns kv_offset .. kv_offset + L_k - 1, and a column past N counts
            as padding (transformers' ``prepare_padding_mask``); all True there is no padding.
        **kwargs: the rest of ``sdpa_mask``'s arguments; ``use_vmap`` and ``device`` are read.

    Returns:
        None.

    Raises:
        ValueError: another mask pattern; padding (a False in ``attention_mask``); for a
            causal pattern, queries that are not the last L_q of the keys (``q_offset +
            q_length != kv_offset + kv_length``, e.g. a static cache's unwritten slots), where
            neither causal alignment of the kernel is the mask transformers means. A
            bidirectional pattern (an encoder; a decoder's cross-attention onto the encoder,
            L_q != L_k) lets every query see every key and needs no alignment.
        RuntimeError: under tracing, at run time (a data-dependent check cannot be a Python
            branch there): padding, or packed sequences (position_ids restarting in a row).
    """
    # Under torch.compile / export transformers cannot check position_ids for packed sequences
    # (masking_utils.find_packed_sequence_indices) and always and-s a packed-sequence term into
    # the pattern; accepted there, as transformers' own flash_attention_mask ignores the pattern.
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
        # The keys' columns as transformers reads them: kv_offset on, a short mask padded with
        # False (masking_utils.prepare_padding_mask), so a missing column is a padded key.
        padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
        padding = padding[:, kv_offset:kv_offset + kv_length]
        if is_tracing(padding):
            # A data-dependent check cannot be a Python branch under torch.compile / export.
            _assert_at_run_time(padding.all(), f"attn_implementation={NAME!r}: padding tokens "
                                "in attention_mask are not supported")
        elif not bool(padding.all()):
            raise _refuse("padding (attention_mask has False entries); pass sequences of equal "
                          "length without padding, or attention_mask=None")
    return None


def _assert_no_hidden_key(mask_function: Any, batch_size: int, q_length: int, kv_length: int,
                          q_offset: int, kv_offset: int, device: torch.device | None) -> None:
    """Under tracing: assert at run time that ``mask_function`` shows the first key to every
    query and every key to the last query, as the causal (queries the last keys) and
    bidirectional patterns do. transformers' packed-sequence term
    (``masking_utils.packed_sequence_mask_function``: query and key in the same sequence) hides
    the first key from every query after a restart of position_ids, so this is exactly its
    check (``find_packed_sequence_indices``: packed iff a row's last sequence index is not 0).
    Indices broadcast as in ``masking_utils._non_vmap_expansion_sdpa``."""
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

    The condition is copied to the CPU first (one device-to-host sync per mask transformers
    builds: one per decoder forward, up to three for an encoder-decoder).
    ``torch._assert_async`` on a CUDA tensor is a device-side assert instead: no message, and
    the process's CUDA context is lost for every later call (``CUDA error: device-side assert
    triggered``), eagerly and under aot_eager and inductor alike; on a CPU tensor it raises the
    message, in graphs too (lab/2026-12-01-compiled-mask-checks/).

    An eager call during a CUDA-graph capture (``torch.cuda.graph``; transformers' ``is_tracing``
    is True there too, and without a cache or attention_mask it adds the packed-sequence term
    for position_ids it made itself) cannot copy to the host: a sync is illegal in a capture.
    There the check stays on the device, where it is captured with the graph: a replay whose
    inputs violate it ends in the device-side assert above. Refusing the capture instead would
    refuse valid inputs (an all-ones mask, position_ids that do not restart)."""
    if not torch.compiler.is_compiling() and is_cuda_stream_capturing():
        torch._assert_async(condition, message)
    else:
        torch._assert_async(condition.cpu(), message)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, attention_mask: torch.Tensor | None,
                      dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature, computed by :func:`flashrepro.attention`.

    Args:
        module: the attention layer (``is_causal``, ``num_key_value_groups`` are read).
        query: (B, H, L_q, D) float16 or bfloat16 (any strides; usually a transposed view).
        key, value: (B, H_kv, L_k, D), H a multiple of H_kv (GQA through ``enable_gqa``).
        attention_mask: must be None (:func:`mask` turns padding-free masks into None; a 4-D
            custom mask is refused).
        dropout: must be 0 (the kernel has no dropout; transformers passes the config's
            attention dropout only in training).
        scaling: softmax scale; None is 1/sqrt(D).
        is_causal: overrides ``module.is_causal`` (default True), as in
            ``sdpa_attention_forward``; causal only when L_q > 1. With L_k > L_q (a KV cache)
            the mask is aligned to the last key (``causal_alignment='bottom_right'``), which is
            what transformers' causal mask means when the queries are the last tokens.
        **kwargs: the model's other arguments; ``softcap``, ``sliding_window``,
            ``position_bias``, ``s_aux``/``sinks`` and ``output_attentions`` must be unset.

    Returns:
        (attn_output, None): attn_output (B, L_q, H, D), contiguous, query's dtype.

    Raises:
        ValueError: an attention mask, dropout > 0, one of the unsupported kwargs set, and
            every error of :func:`flashrepro.attention` (e.g. a tensor that requires grad
            while autograd is on: the kernel is forward-only).
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
    # The kernel writes any strides: straight into the (B, L, H, D) layout transformers wants,
    # with no transpose copy afterwards (SDPA's flash and cuDNN outputs are that layout too).
    out = torch.empty((b, lq, h, d), dtype=query.dtype, device=query.device)
    flashrepro.attention(query, key, value, causal=causal, scale=scaling,
                         enable_gqa=enable_gqa, causal_alignment="bottom_right",
                         out=out.transpose(1, 2))
    return out, None


def traced_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool,
                     scale: float | None, enable_gqa: bool) -> torch.Tensor:
    """:func:`attention_forward`'s call under ``torch.compile`` / ``torch.export``: the operator
    ``torch.ops.flashrepro.attention_bshd``, whose output is born in the (B, L, H, D) layout.
    Through ``flashrepro.attention(..., out=buffer)`` the traced graph would fill the buffer
    with a copy of the op's output (functional ops cannot write into an argument), one read and
    write of B·L·H·D elements per layer that eager calls do not make.

    Returns:
        (B, L_q, H, D), contiguous, query's dtype.

    Raises:
        ValueError, TypeError: :func:`flashrepro.attention`'s, from the op's fake (tracing) or
            its checks (the compiled graph's run).
    """
    if scale is not None:
        scale = float(scale)
    return ops.attention_bshd(query, key, value, causal, scale, enable_gqa, "bottom_right",
                              None).transpose(1, 2)


def register() -> None:
    """Register :func:`attention_forward` and :func:`mask` under :data:`NAME` (idempotent)."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, mask)


register()
