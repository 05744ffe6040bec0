"""The kernels a benchmark compares, by name: flashrepro's, torch SDPA's backends and the
optional peers of :mod:`flashrepro_harness.bench.peers` (FA4's CuTe kernel, where it imports).

Each entry is a zero-argument callable over fixed inputs. Torch's backends are forced one at a
time with ``torch.nn.attention.sdpa_kernel`` (its default on an H200 is cuDNN). A flashrepro row
that raises has failed (:class:`KernelFailed`), never "skipped"; torch's backends and the peers
are skipped with the reason where they cannot run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import flashrepro
from flashrepro import configs
from flashrepro.configs import ARTICLE, KernelConfig
from flashrepro_harness.bench import peers
from flashrepro_harness.bench.reference import Reference
from flashrepro_harness.results import REFERENCE_PREFIX, is_product

Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

TORCH_BACKENDS = {
    "torch-flash": SDPBackend.FLASH_ATTENTION,
    "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
    "torch-efficient": SDPBackend.EFFICIENT_ATTENTION,
}
FLASHREPRO = {
    "flashrepro": "the production kernel, per-arch default config",
    "flashrepro-article-config": "the production kernel at the article's 64x64, 4 warps",
    "article-kernel": "the frozen article kernel (kernels/article.py), 64x64, 4 warps",
}
P_IN_REGISTERS = "flashrepro-p-in-registers"
"""Timed only in ``reproduce``'s mma.sync child, at :data:`flashrepro.configs.P_IN_REGISTERS`."""
LAUNCHES: dict[str, KernelConfig] = {
    "flashrepro-article-config": ARTICLE,
    "article-kernel": ARTICLE,
    P_IN_REGISTERS: configs.P_IN_REGISTERS,
}
"""The fixed launch of each flashrepro row but ``flashrepro`` (the per-arch default)."""
PAIRABLE = (*FLASHREPRO, P_IN_REGISTERS)
"""Rows that can also be timed with a reference checkout's code (``reproduce --reference-src``)."""
DESCRIPTIONS = {
    **FLASHREPRO,
    P_IN_REGISTERS: "the production kernel at 128x64, 8 warps: P stays in registers on mma.sync",
    "torch-flash": "torch SDPA, flash backend (FlashAttention-2)",
    "torch-cudnn": "torch SDPA, cuDNN backend",
    "torch-efficient": "torch SDPA, memory-efficient backend",
    **{name: peer.description for name, peer in peers.PEERS.items()},
}
BEST_PEER_CANDIDATES = ("torch-cudnn", *peers.PEERS)
"""The kernels that make up "the best peer" in tables: cuDNN and every optional peer that runs."""


class KernelFailed(RuntimeError):
    """A flashrepro row (or its reference twin) raised; ``row`` names it, ``reason`` is one
    line. The run fails; it is never a skip."""

    def __init__(self, row: str, reason: str) -> None:
        super().__init__(f"{row} failed: {reason}")
        self.row, self.reason = row, reason


def first_line(exc: BaseException) -> str:
    """``"TypeName: first line of the message"``."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


def make_call(name: str, inputs: Inputs, causal: bool,
              config: KernelConfig | None = None,
              reference: Reference | None = None) -> Callable[[], torch.Tensor]:
    """A callable running kernel ``name`` on ``inputs`` (q, k, v CUDA tensors, each
    (B, H, L, D)); a peer's inputs are converted to its layout here, once (:func:`output`).

    ``name``: a key of :data:`DESCRIPTIONS`; ``causal``: SDPA's ``is_causal``; ``config``:
    overrides ``flashrepro``'s launch; ``reference``: run a :data:`PAIRABLE` row with a
    reference checkout's code (same call, inputs and output layout).

    Raises:
        KeyError: unknown ``name``, or a ``reference`` for a row not in :data:`PAIRABLE`.
        ImportError: a peer whose module does not import.
    """
    if reference is not None and name not in PAIRABLE:
        raise KeyError(f"only the rows {sorted(PAIRABLE)} have a reference twin, got {name!r}")
    if name in peers.PEERS:
        return peers.make_call(name, inputs, causal)
    q, k, v = inputs
    out = torch.full_like(q, float("nan"))  # an element the kernel never writes stays NaN
    attention, article_attention = flashrepro.attention, flashrepro.article_attention
    fixed = LAUNCHES.get(name) if name != "article-kernel" else None
    if reference is not None:
        attention, article_attention = reference.attention(), reference.article_attention()
        config = reference.config(config) if config is not None else None
        fixed = reference.config(fixed) if fixed is not None else None
    if name == "flashrepro":
        return lambda: attention(q, k, v, causal=causal, config=config, out=out)
    if name in ("flashrepro-article-config", P_IN_REGISTERS):
        return lambda: attention(q, k, v, causal=causal, config=fixed, out=out)
    if name == "article-kernel":  # its own frozen default config: the article's 64x64
        return lambda: article_attention(q, k, v, causal=causal, out=out)
    backend = TORCH_BACKENDS[name]

    def call() -> torch.Tensor:
        with sdpa_kernel(backend):
            return sdpa(q, k, v, is_causal=causal)
    return call


def output(name: str, result: object) -> torch.Tensor:
    """The output of a call of kernel ``name`` (what :func:`make_call`'s call returned) as a
    (B, H, L, D) tensor or view, for checking it like flashrepro's."""
    if name in peers.PEERS:
        return peers.PEERS[name].to_bhld(result)
    assert isinstance(result, torch.Tensor)
    return result


def probe(name: str, inputs: Inputs, causal: bool, reference: Reference | None = None
          ) -> tuple[str, str] | None:
    """Run kernel ``name`` once on these inputs: None when it runs, else ``(state, reason)``.

    A flashrepro row (or its twin) that raises is ``"failed"``; a peer that does not import or
    raises anything (FA4 asserts on what it does not support) is ``"skipped"``, as is a torch
    backend raising a RuntimeError (other errors propagate).
    """
    if name in peers.PEERS and (reason := peers.import_error(name)):
        return "skipped", reason
    product = is_product(name) or reference is not None
    errors = Exception if (product or name in peers.PEERS) else RuntimeError
    try:
        make_call(name, inputs, causal, reference=reference)()
        torch.cuda.synchronize()
    except errors as exc:
        if product:
            return "failed", first_line(exc)
        if name in peers.PEERS:
            return "skipped", first_line(exc)
        return "skipped", str(exc).splitlines()[0] if str(exc) else ""
    return None


def available(name: str, inputs: Inputs, causal: bool) -> str | None:
    """None if kernel ``name`` runs on these inputs here, else why it is skipped (one line):
    :func:`probe`'s reason for a peer or a torch backend.

    Raises:
        KernelFailed: a flashrepro row raised (the product is never skipped).
    """
    result = probe(name, inputs, causal)
    if result is not None and result[0] == "failed":
        raise KernelFailed(name, result[1])
    return None if result is None else result[1]


def output_errors(causal: bool, calls: dict[str, Callable[[], object]], inputs: Inputs
                  ) -> dict[str, float]:
    """Max |o - ref| over every element of each call (name -> :func:`make_call`'s callable,
    ``reference:`` twins included) against SDPA's math on float32 copies of the inputs; any NaN
    makes it NaN.

    Raises:
        KernelFailed: a call raised, or returned another shape than (B, H, L, D).
    """
    q, k, v = inputs
    ref = sdpa(q.float(), k.float(), v.float(), is_causal=causal)
    errors = {}
    for name, call in calls.items():
        try:
            out = output(name.removeprefix(REFERENCE_PREFIX), call())
        except Exception as exc:
            raise KernelFailed(name, f"in the output check: {first_line(exc)}") from exc
        if out.shape != ref.shape:
            raise KernelFailed(name, f"returned shape {tuple(out.shape)}, expected "
                                     f"{tuple(ref.shape)} (B, H, L, D)")
        diff = (out.float() - ref).abs()
        errors[name] = float("nan") if diff.isnan().any() else diff.max().item()
    return errors
