"""flashrepro: a Triton FlashAttention-2 forward kernel with reproducible SASS and timing analysis.

Public API: :func:`attention` (SDPA-compatible forward), :func:`attention_kvcache` (a KV cache
with per-sequence lengths), :func:`attention_varlen` (packed sequences) and :class:`KernelConfig`.
"""

from flashrepro.api import article_attention, attention
from flashrepro.api_varlen import attention_kvcache, attention_varlen
from flashrepro.configs import ARTICLE, KernelConfig

__version__ = "0.1.0"

__all__ = ["ARTICLE", "KernelConfig", "__version__", "article_attention", "attention",
           "attention_kvcache", "attention_varlen"]
