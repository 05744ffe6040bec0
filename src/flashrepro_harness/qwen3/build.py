"""The benchmark's model and its attention implementations.

``Qwen3ForCausalLM`` built from :func:`qwen3_0_6b_config` in code (the shape of
Qwen/Qwen3-0.6B's ``config.json``), random bfloat16 weights (:func:`build_models`).
Implementations (:data:`~flashrepro_harness.qwen3.IMPLS`): ``frepro``
(:mod:`flashrepro.integrations.transformers`), ``sdpa-cudnn`` and ``sdpa-flash``
(``attn_implementation="sdpa"`` inside ``sdpa_kernel(CUDNN_ATTENTION)`` /
``sdpa_kernel(FLASH_ATTENTION)``), and ``fa4`` (``flash_attn.cute.flash_attn_func``, the CuTe
DSL FlashAttention-4, where it imports; registered here as :data:`FA4_NAME`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

FA4_NAME = "fa4_cute"
"""The ``attn_implementation`` name of the FA4 peer (no "flash" in it: transformers 5.17 treats
such names as FlashAttention builds to import)."""


@dataclass(frozen=True)
class Shape:
    """One prefill: ``batch`` sequences of ``seqlen`` tokens."""

    batch: int
    seqlen: int

    @property
    def tokens(self) -> int:
        return self.batch * self.seqlen


def qwen3_0_6b_config(num_layers: int = 28) -> Any:
    """Qwen3-0.6B's architecture as a ``transformers.Qwen3Config`` (values from
    Qwen/Qwen3-0.6B's ``config.json``); ``num_layers`` < 28 only for quick runs."""
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=num_layers, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                       rms_norm_eps=1e-6, rope_theta=1_000_000.0, tie_word_embeddings=True,
                       attention_bias=False, use_sliding_window=False)


def shapes(lengths: list[int], tokens: int, short: bool) -> list[Shape]:
    """B = tokens / L for each L (B >= 1), then B=1, L=1024 when ``short`` (if not listed).

    Raises:
        ValueError: an L that does not divide ``tokens`` (B·L would not be ``tokens``).
    """
    out = []
    for length in lengths:
        if length > tokens or tokens % length:
            raise ValueError(f"--lengths: every L must divide --tokens={tokens}, got {length}")
        out.append(Shape(tokens // length, length))
    if short and Shape(1, 1024) not in out:
        out.append(Shape(1, 1024))
    return out


def fa4_available() -> str | None:
    """None when ``flash_attn.cute.flash_attn_func`` imports, else why not."""
    try:
        from flash_attn.cute import flash_attn_func  # noqa: F401
    except Exception as exc:  # ImportError, or a CUDA/CuTe DSL error at import
        return f"flash_attn.cute does not import: {type(exc).__name__}: {exc}"
    return None


def fa4_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                          value: torch.Tensor, attention_mask: torch.Tensor | None,
                          dropout: float = 0.0, scaling: float | None = None,
                          is_causal: bool | None = None, **kwargs: Any
                          ) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature, computed by FA4's ``flash_attn_func``.

    query (B, H, L_q, D), key/value (B, H_kv, L_k, D) arrive as transposed views of (B, L, H,
    D) tensors; FA4 takes that layout (and GQA, H_kv < H) directly:
    ``flash_attn_func(q, k, v, softmax_scale=..., causal=...)`` returns ``(out, lse)`` with out
    (B, L_q, H, D) (flash-attention ``flash_attn/cute/interface.py``; older versions return
    out alone). With transformers' ``FlashAttentionKwargs`` (``cu_seq_lens_q``/``_k``,
    ``max_length_q``/``_k``: packed sequences) the tokens go to ``flash_attn_varlen_func``
    flattened to (B·L, H, D). Returns (out, None).

    Raises:
        ValueError: an attention mask or dropout (the benchmark passes neither).
    """
    if attention_mask is not None or dropout:
        raise ValueError(f"{FA4_NAME}: the benchmark's FA4 peer takes no mask and no dropout")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    if kwargs.get("cu_seq_lens_q") is not None:
        from flash_attn.cute import flash_attn_varlen_func

        b, lq, h, d = q.shape
        res = flash_attn_varlen_func(
            q.reshape(b * lq, h, d), k.reshape(-1, *k.shape[2:]), v.reshape(-1, *v.shape[2:]),
            cu_seqlens_q=kwargs["cu_seq_lens_q"], cu_seqlens_k=kwargs["cu_seq_lens_k"],
            max_seqlen_q=kwargs["max_length_q"], max_seqlen_k=kwargs["max_length_k"],
            softmax_scale=scaling, causal=bool(causal))
        out = res[0] if isinstance(res, tuple) else res
        return out.view(b, lq, h, d), None
    from flash_attn.cute import flash_attn_func

    res = flash_attn_func(q, k, v, softmax_scale=scaling,
                          causal=query.shape[2] > 1 and bool(causal))
    return (res[0] if isinstance(res, tuple) else res), None


def register_fa4() -> None:
    """Register :func:`fa4_attention_forward` as :data:`FA4_NAME` (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(FA4_NAME, fa4_attention_forward)


def attn_name(impl: str) -> str:
    """The ``attn_implementation`` name of an implementation of the benchmarks."""
    from flashrepro.integrations import transformers as fr_tf

    return {"frepro": fr_tf.NAME, "fa4": FA4_NAME}.get(impl, "sdpa")

SDPA_BACKENDS = {"sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-flash": "FLASH_ATTENTION",
                 "sdpa-efficient": "EFFICIENT_ATTENTION"}
"""The ``torch.nn.attention.SDPBackend`` member each SDPA implementation is pinned to."""


def sdpa_backends(impl: str) -> list[Any] | None:
    """The ``sdpa_kernel`` backends of an SDPA implementation, None for the others."""
    from torch.nn.attention import SDPBackend

    name = SDPA_BACKENDS.get(impl)
    return None if name is None else [getattr(SDPBackend, name)]


def sdpa_context(impl: str) -> contextlib.AbstractContextManager:
    from torch.nn.attention import sdpa_kernel

    backends = sdpa_backends(impl)
    return sdpa_kernel(backends) if backends is not None else contextlib.nullcontext()


def make_forward(model: torch.nn.Module, impl: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """``f(input_ids) -> logits`` of ``model`` (its own copy, attention set to ``impl``'s),
    inside ``impl``'s ``sdpa_kernel`` context. Compiled layers
    (:func:`flashrepro_harness.qwen3.measure.compile_layers`) run
    compiled through it; the rest of the model runs eagerly."""
    model.set_attn_implementation(attn_name(impl))

    def forward(input_ids: torch.Tensor) -> torch.Tensor:
        with sdpa_context(impl):
            return model(input_ids, use_cache=False).logits

    return forward


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """``model.model.layers`` (transformers' decoder models: Qwen3, Llama, ...).

    Raises:
        ValueError: ``model`` has no ``model.layers`` ModuleList.
    """
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"model: expected a decoder model with model.model.layers, got "
                         f"{type(model).__name__}")
    return layers


def build_models(config: Any, impls: list[str]) -> dict[str, torch.nn.Module]:
    """One ``Qwen3ForCausalLM`` of ``config`` (:func:`qwen3_0_6b_config`) on the GPU, random
    bfloat16 weights drawn after ``torch.manual_seed(0)``, in eval mode; a deep copy of it per
    implementation of ``impls`` (each gets its attention set by :func:`make_forward`)."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        base = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()
    return {impl: copy.deepcopy(base) for impl in impls}
