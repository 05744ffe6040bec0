"""flashrepro: a Triton FlashAttention-2 forward kernel with reproducible SASS and timing analysis.

Public API: :func:`attention` (SDPA-compatible forward) and :class:`KernelConfig`.
"""

from flashrepro.api import article_attention, attention
from flashrepro.configs import ARTICLE, KernelConfig

__version__ = "0.1.0"

__all__ = ["ARTICLE", "KernelConfig", "__version__", "article_attention", "attention"]
