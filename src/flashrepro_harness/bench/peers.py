"""Optional peer kernels: the state of the art a user could pick instead, declared in one place.

Each :class:`Peer` names the module it needs; it is enabled wherever that module imports
(tritonbench's pattern for optional operators), and everywhere else its row is skipped with the
import's one-line reason. Nothing here is a dependency: the ``fa4`` extra (pyproject.toml) and
the GPU lock install FA4; a missing peer never fails a run or the gate (whose reference stays
``torch-flash``).

A peer gets its own native, contiguous layout, built from flashrepro's (B, H, L, D) inputs once,
before any timing, so the timed call is the library call alone; its output is viewed back as
(B, H, L, D) for the error check (a view: no copy, and outside the timed region).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Peer:
    """One optional peer kernel.

    Attributes:
        name: its row's name in every table (``fa4-cute``).
        description: one line for the tables.
        module: the module that must import for the peer to run (``flash_attn.cute``).
        function: the attribute of ``module`` that runs the forward.
        layout: its native input layout, stated in the tables' method lines.
        build: ``(function, inputs, causal) -> call``: converts the (B, H, L, D) ``inputs`` to
            the native layout (once) and returns a zero-argument call over them.
        to_bhld: the call's result -> the output as a (B, H, L, D) view.
    """

    name: str
    description: str
    module: str
    function: str
    layout: str
    build: Callable[[Callable[..., Any], Inputs, bool], Callable[[], Any]]
    to_bhld: Callable[[Any], torch.Tensor]


def _fa4_build(fn: Callable[..., Any], inputs: Inputs, causal: bool) -> Callable[[], Any]:
    # flash_attn.cute.flash_attn_func(q, k, v, softmax_scale=None, causal=False, ...) takes
    # (B, L, H, D) and returns (out, lse) (4.0.0b36, flash_attn/cute/interface.py: the result of
    # FlashAttnFunc.apply; lse None unless return_lse); softmax_scale None is 1/sqrt(D), SDPA's.
    q, k, v = (t.transpose(1, 2).contiguous() for t in inputs)
    return lambda: fn(q, k, v, causal=causal)


def _fa4_output(result: Any) -> torch.Tensor:
    out = result[0] if isinstance(result, tuple) else result  # older releases return out alone
    return out.transpose(1, 2)


PEERS: dict[str, Peer] = {
    "fa4-cute": Peer(
        name="fa4-cute",
        description="FlashAttention 4's CuTe DSL forward (flash_attn.cute; "
                    "FlashAttentionForwardSm90 on sm_90)",
        module="flash_attn.cute",
        function="flash_attn_func",
        layout="(B, L, H, D) contiguous",
        build=_fa4_build,
        to_bhld=_fa4_output,
    ),
}
"""Every optional peer, by row name. Add one here and it appears in ``reproduce``, ``bench``
and ``tune`` wherever its module imports."""


def import_error(name: str) -> str | None:
    """None if peer ``name``'s module imports and has its function, else why not (one line).

    Raises:
        KeyError: ``name`` is not a key of :data:`PEERS`.
    """
    peer = PEERS[name]
    try:
        module: ModuleType = importlib.import_module(peer.module)
        getattr(module, peer.function)
    except Exception as exc:  # ImportError, or a module that fails while importing
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"{peer.module}.{peer.function} is not available ({type(exc).__name__}: {text})"
    return None


def make_call(name: str, inputs: Inputs, causal: bool) -> Callable[[], Any]:
    """A zero-argument call of peer ``name`` over ``inputs`` (q, k, v, each (B, H, L, D)),
    converted to the peer's layout here, outside any timed region.

    Raises:
        KeyError: unknown ``name``.
        ImportError: the peer's module does not import (check :func:`import_error` first).
    """
    peer = PEERS[name]
    fn = getattr(importlib.import_module(peer.module), peer.function)
    return peer.build(fn, inputs, causal)


def layouts_note(names: list[str]) -> str:
    """The tables' layout sentence: flashrepro's and SDPA's layout, then each peer of ``names``
    with its own."""
    native = [f"{n} {PEERS[n].layout}" for n in names if n in PEERS]
    return ("inputs in each kernel's native layout, built before timing: flashrepro and torch "
            "SDPA (B, H, L, D) contiguous" + "".join(f"; {s}" for s in native))
