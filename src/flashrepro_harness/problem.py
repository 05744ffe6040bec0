"""The benchmark problem (shape, dtype, causal); the article's, from reproduce/article.toml."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from flashrepro_harness.env import positive_int
from flashrepro_harness.paths import ARTICLE_TOML

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Problem:
    """One attention forward problem: q (B, H, Lq, D), k and v (B, H, Lk, D)."""

    batch: int
    heads: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    dtype: str
    causal: bool

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def flops(self) -> float:
        """Forward FLOPs: 4·B·H·Lq·Lk·D, halved when causal (FlashAttention-2's convention)."""
        flops = 4.0 * self.batch * self.heads * self.seqlen_q * self.seqlen_k * self.head_dim
        return flops / 2 if self.causal else flops

    def key(self) -> str:
        """File-name-safe key, e.g. ``b2-h16-l1024x1024-d128-float16-causal``."""
        mask = "causal" if self.causal else "full"
        return (f"b{self.batch}-h{self.heads}-l{self.seqlen_q}x{self.seqlen_k}-d{self.head_dim}"
                f"-{self.dtype}-{mask}")

    def inputs(self, device: str = "cuda", seed: int = 0):
        """Fresh standard-normal q, k, v on ``device`` (never zeros)."""
        gen = torch.Generator(device=device).manual_seed(seed)
        def draw(length: int) -> torch.Tensor:
            shape = (self.batch, self.heads, length, self.head_dim)
            return torch.randn(shape, generator=gen, device=device, dtype=self.torch_dtype)
        return draw(self.seqlen_q), draw(self.seqlen_k), draw(self.seqlen_k)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_article(path: Path = ARTICLE_TOML) -> tuple[Problem, dict[str, Any]]:
    """The SASS article's problem and its published numbers (docs/article.md).

    Returns:
        (problem, published) where published maps names (``ratio_first``, ``triton_ldsm``, ...)
        to the article's numbers.

    Raises:
        FileNotFoundError: when ``path`` does not exist.
    """
    data = tomllib.loads(path.read_text())
    p = data["problem"]
    problem = Problem(batch=p["batch"], heads=p["heads"], seqlen_q=p["seqlen"],
                      seqlen_k=p["seqlen"], head_dim=p["head_dim"], dtype=p["dtype"],
                      causal=p["causal"])
    return problem, data["published"]


def head_dim(text: str) -> int:
    """argparse ``type=`` of a head dim: an int in 1..:data:`~flashrepro.validation.
    MAX_HEAD_DIM` (the kernels' range)."""
    from flashrepro.validation import MAX_HEAD_DIM

    value = positive_int(text)
    if value > MAX_HEAD_DIM:
        raise argparse.ArgumentTypeError(f"head dims run up to {MAX_HEAD_DIM} (the kernels' "
                                         f"range), got {value}")
    return value


def add_grid_arguments(parser: argparse.ArgumentParser, per: str) -> None:
    """``--lengths``, ``--head-dims`` and ``--tokens``: the grid of problems (H = 16, B·L =
    tokens) that ``tune`` and ``bench`` share, so the tuned table covers the sweep's points.
    ``per``: what one problem is called in the help ("point", "problem")."""
    parser.add_argument("--lengths", type=positive_int, nargs="+",
                        default=[512, 1024, 2048, 4096, 8192, 16384],
                        help="sequence lengths L = Lq = Lk (default: %(default)s)")
    parser.add_argument("--head-dims", type=head_dim, nargs="+", default=[64, 128],
                        help="head dims D (default: %(default)s)")
    parser.add_argument("--tokens", type=positive_int, default=16384,
                        help=f"B·L per {per} (default: %(default)s)")
