"""Optional peer kernels, declared in one place (tritonbench's pattern): each :class:`Peer` runs
wherever its module imports, and is skipped with the import's one-line reason elsewhere. None is
a dependency (the ``fa4`` extra installs FA4); a missing peer never fails a run or the gate.

A peer's inputs are built in its native contiguous layout once, before timing; its output is
viewed back as (B, H, L, D) for the error check.
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
        module, function: what must import to run it (``flash_attn.cute.flash_attn_func``).
        layout: its native input layout, stated in the tables.
        build: ``(function, inputs, causal) -> call``: the (B, H, L, D) inputs converted once,
            and a zero-argument call over them.
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
    # flash_attn/cute/interface.py (4.0.0b36): (B, L, H, D) in, (out, lse) out; scale 1/sqrt(D)
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
"""Every optional peer by row name; ``reproduce``, ``bench`` and ``tune`` time each that imports."""


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
