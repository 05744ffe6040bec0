"""flashrepro: FlashAttention forward kernels (Triton; Gluon on Hopper) for PyTorch.

Public API: :func:`attention` (SDPA's layout and causal meaning), :func:`article_attention` (the
article's kernel), :class:`KernelConfig` and :data:`ARTICLE`.
"""

from flashrepro.api import article_attention, attention
from flashrepro.configs import ARTICLE, KernelConfig

__version__ = "0.1.0"

__all__ = ["ARTICLE", "KernelConfig", "__version__", "article_attention", "attention"]
