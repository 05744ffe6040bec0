"""Launch a compiled Triton kernel again with little host work: Triton's C launcher called
directly, with an argument list built once per tensor address.

``CompiledKernel.run`` (Triton 3.6's ``CudaLauncher``) does three things per launch that a
repeated launch of one signature does not need:

- it re-encodes every host-side TMA descriptor (``make_tensordesc_arg`` ->
  ``cuTensorMapEncodeTiled``), a few µs each, four per forward call. A descriptor's contents
  depend only on its tensor's address once dtype, shape, strides, block and swizzle are fixed,
  and a launch plan fixes them;
- it passes tensors, whose address the C launcher reads by calling ``data_ptr()`` and checks
  with a driver call (``cuPointerGetAttribute``) per tensor; the plan has already checked that
  every tensor is on the launch's GPU, so the address goes in as an int (the launcher's other
  accepted form);
- it builds the launch metadata for Triton's launch hooks (``CompiledKernel.launch_metadata``)
  and the C launcher calls both hook chains, also when no hook is registered.

So :class:`DirectLaunch` keeps each slot's encoded descriptor per address, and the whole
argument tuple of the C launcher per (stream, addresses): a model's layers reuse a handful of
addresses from torch's caching allocator, so a repeated call is one tuple lookup and the C
call. With a launch hook registered (Proton, a profiler) it builds the metadata and passes the
hooks, as Triton does. Where the launcher is not the one this module knows (another Triton, a
kernel that needs scratch memory), :meth:`DirectLaunch.bind` returns None and the caller keeps
``CompiledKernel.run``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from triton import knobs
from triton.compiler import CompiledKernel

from flashrepro.kernels.call import with_base

try:  # Triton 3.6's NVIDIA launcher pieces; absent elsewhere (then nothing binds)
    from triton.backends.nvidia.driver import CudaLauncher, make_tensordesc_arg
except ImportError:  # pragma: no cover - other backends
    CudaLauncher = make_tensordesc_arg = None

MAX_ADDRESSES = 256
"""Encoded descriptors kept per slot, and argument tuples per launch, before that cache starts
over."""


def _idle(hook: Any) -> bool:
    """True when a Triton launch hook would do nothing: None (older Triton) or an empty
    ``knobs.HookChain`` (Triton 3.6's default)."""
    return hook is None or (getattr(hook, "calls", None) is not None and not hook.calls)


class DirectLaunch:
    """One compiled kernel's launch with its arguments after the first ``io_count`` fixed.

    Args:
        raw: the C launcher (``mod.launch``).
        compiled: the compiled kernel (function handle, packed metadata).
        launcher: its ``CudaLauncher`` (cooperative-grid and PDL flags).
        io_templates: the first ``len(io_templates)`` kernel arguments' slots
            (:func:`flashrepro.kernels.call.io_templates`): None for a tensor, a TMA
            descriptor (base None) for a descriptor.
        tail: every later argument, as ``CompiledKernel.run`` takes it (no descriptors).

    Attributes:
        encodes: TMA descriptors encoded so far (one per new address of a descriptor slot).
    """

    def __init__(self, raw: Callable[..., Any], compiled: CompiledKernel, launcher: Any,
                 io_templates: tuple[Any, ...], tail: list[Any]) -> None:
        self._raw = raw
        self._compiled = compiled
        self._flags = (launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                       compiled.packed_metadata)
        metas = iter(getattr(compiled.metadata, "tensordesc_meta", None) or [])
        self._slots: list[tuple[Any, Any, dict[int, list[Any]]] | None] = [
            None if t is None else (t, next(metas, None), {}) for t in io_templates]
        self._tail = tail
        self._args: dict[tuple[int, ...], tuple[Any, ...]] = {}
        self.encodes = 0

    @classmethod
    def bind(cls, compiled: CompiledKernel, io_templates: tuple[Any, ...],
             tail: list[Any]) -> DirectLaunch | None:
        """A direct launch of ``compiled``, or None where its launcher is not Triton 3.6's
        CUDA launcher, it needs scratch memory, or a later argument is a descriptor."""
        launcher = compiled.run
        if CudaLauncher is None or not isinstance(launcher, CudaLauncher):
            return None
        if launcher.global_scratch_size or launcher.profile_scratch_size:
            return None
        if any(not isinstance(v, (torch.Tensor, int, float, bool, type(None))) for v in tail):
            return None
        raw = launcher.launch
        closure = getattr(raw, "__closure__", None)
        if closure is not None:  # wrap_handle_tensordesc's inner: the C launcher is a cell
            cells = dict(zip(raw.__code__.co_freevars, closure, strict=True))
            if "launcher" not in cells:
                return None
            raw = cells["launcher"].cell_contents
        if not callable(raw):
            return None
        return cls(raw, compiled, launcher, io_templates, tail)

    def _expand(self, slot: int, tensor: torch.Tensor) -> list[Any]:
        """The launcher's arguments for ``tensor`` in io slot ``slot``: its address (a tensor
        slot) or its encoded descriptor, shape and strides (a descriptor slot)."""
        entry = self._slots[slot]
        address = tensor.data_ptr()
        if entry is None:
            return [address]
        template, meta, cache = entry
        expanded = cache.get(address)
        if expanded is None:
            # Without metadata Triton passes the descriptor as its base tensor, shape and
            # strides: the base goes in as its address, so the cache keeps no tensor alive.
            expanded = [address if isinstance(a, torch.Tensor) else a
                        for a in make_tensordesc_arg(with_base(template, tensor), meta)]
            self.encodes += 1
            if len(cache) >= MAX_ADDRESSES:
                cache.clear()
            cache[address] = expanded
        return expanded

    def _arguments(self, io: tuple[torch.Tensor, ...]) -> list[Any]:
        """The C launcher's arguments after its hooks: the expanded io slots, then the tail."""
        args: list[Any] = []
        for slot, tensor in enumerate(io):
            args.extend(self._expand(slot, tensor))
        args.extend(self._tail)
        return args

    def __call__(self, grid: tuple[int, int, int], stream: int,
                 io: tuple[torch.Tensor, ...]) -> None:
        """Launch on ``stream`` (a raw CUDA stream handle) with ``io`` as the first arguments:
        tensors of the templates' dtype, shape, strides and 16-byte alignment, on the GPU
        current for the launch (the caller's plan checked both)."""
        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        if not (_idle(enter) and _idle(leave)):
            self._raw(grid[0], grid[1], grid[2], stream, self._compiled.function,
                      *self._flags, self._compiled.launch_metadata(grid, stream, *io, *self._tail),
                      enter, leave, *self._arguments(io))
            return
        key = (stream, grid, *[t.data_ptr() for t in io])
        args = self._args.get(key)
        if args is None:
            args = (grid[0], grid[1], grid[2], stream, self._compiled.function, *self._flags,
                    None, None, None, *self._arguments(io))
            if len(self._args) >= MAX_ADDRESSES:
                self._args.clear()
            self._args[key] = args
        self._raw(*args)
