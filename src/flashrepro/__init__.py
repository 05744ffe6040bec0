"""flashrepro: FlashAttention forward kernels (Triton; Gluon on Hopper) for PyTorch.

Public API: :func:`attention` (SDPA's layout and causal meaning), :func:`attention_kvcache` (a
KV cache with per-sequence lengths), :func:`attention_varlen` (packed sequences),
:func:`article_attention` (the article's kernel), :class:`KernelConfig` and :data:`ARTICLE`.
"""

from flashrepro.api import article_attention, attention
from flashrepro.api_varlen import attention_kvcache, attention_varlen
from flashrepro.configs import ARTICLE, KernelConfig

__version__ = "0.1.0"

__all__ = ["ARTICLE", "KernelConfig", "__version__", "article_attention", "attention",
           "attention_kvcache", "attention_varlen"]
