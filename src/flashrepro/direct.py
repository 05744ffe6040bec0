"""Relaunch a compiled Triton kernel with little host work: Triton 3.6's C launcher called directly.

Per launch ``CompiledKernel.run`` re-encodes each TMA descriptor (``cuTensorMapEncodeTiled``),
checks each tensor with a driver call and builds launch-hook metadata. A launch plan fixes
dtype, shape, strides and device, so :class:`DirectLaunch` encodes a descriptor once per address
and caches the whole argument tuple per (stream, grid, addresses): torch's caching allocator
reuses a few addresses. With a launch hook registered (Proton) it passes metadata and hooks as
Triton does; :meth:`DirectLaunch.bind` returns None for a launcher it does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from triton import knobs
from triton.compiler import CompiledKernel

from flashrepro.kernels.call import KernelCall, with_base

try:  # Triton 3.6's NVIDIA launcher pieces; absent elsewhere (then nothing binds)
    from triton.backends.nvidia.driver import CudaLauncher, make_tensordesc_arg
except ImportError:  # pragma: no cover - other backends
    CudaLauncher = make_tensordesc_arg = None

MAX_ADDRESSES = 256
"""Encoded descriptors per slot, and argument tuples per launch, kept before a cache clears."""


def hooks_idle() -> bool:
    """Whether Triton's launch enter and exit hooks both do nothing (no Proton session): each
    is None or an empty ``knobs.HookChain``."""
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return ((enter is None or (getattr(enter, "calls", None) is not None and not enter.calls))
            and (leave is None or (getattr(leave, "calls", None) is not None
                                   and not leave.calls)))


class DirectLaunch:
    """A compiled kernel's launch whose arguments after the io slots are fixed.

    Args:
        raw: the C launcher.
        compiled: the compiled kernel.
        launcher: its ``CudaLauncher`` (cooperative-grid and PDL flags).
        io_templates: the leading arguments' slots (:func:`flashrepro.kernels.call.io_templates`):
            None for a tensor, a TMA descriptor with base None for a descriptor.
        tail: every later argument, as ``CompiledKernel.run`` takes it (no descriptors).

    Attributes:
        tail: the bound tail.
        encodes: TMA descriptors encoded so far.
    """

    def __init__(self, raw: Callable[..., Any], compiled: CompiledKernel, launcher: Any,
                 io_templates: tuple[Any, ...], tail: list[Any]) -> None:
        self._raw = raw
        self._compiled = compiled
        self._function = compiled.function
        self._flags = (launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                       compiled.packed_metadata)
        metas = iter(getattr(compiled.metadata, "tensordesc_meta", None) or [])
        self._slots: list[tuple[Any, Any, dict[int, list[Any]]] | None] = [
            None if t is None else (t, next(metas, None), {}) for t in io_templates]
        self._plain = all(slot is None for slot in self._slots)  # tensors only, no descriptor
        self.tail = tail
        self._args: dict[tuple[int, ...], tuple[Any, ...]] = {}
        self.encodes = 0

    @property
    def compiled(self) -> CompiledKernel:
        """The compiled kernel."""
        return self._compiled

    @property
    def function(self) -> int:
        """Its CUfunction handle."""
        return self._function

    @property
    def io_templates(self) -> tuple[Any, ...]:
        """The io slots' templates: None for a tensor, a TMA descriptor with base None."""
        return tuple(None if slot is None else slot[0] for slot in self._slots)

    @property
    def cooperative(self) -> bool:
        """Whether it launches as a cooperative grid."""
        return bool(self._flags[0])

    @property
    def pdl(self) -> bool:
        """Whether it launches with programmatic dependent launch."""
        return bool(self._flags[1])

    @classmethod
    def bind(cls, compiled: CompiledKernel, io_templates: tuple[Any, ...],
             tail: list[Any]) -> DirectLaunch | None:
        """A direct launch of ``compiled``, or None unless its launcher is Triton 3.6's CUDA
        launcher, without scratch memory, with no descriptor in ``tail``."""
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

    def on_stream(self, grid: tuple[int, int, int], device: int, io: tuple[torch.Tensor, ...],
                  tail: Sequence[Any] | None = None) -> None:
        """:meth:`__call__` on torch's current stream of GPU ``device`` (the io tensors')."""
        stream = torch._C._cuda_getCurrentRawStream(device)
        if device != torch._C._cuda_getDevice():  # Triton's launcher runs on the current GPU
            with torch.cuda.device(device):
                self(grid, stream, io, tail)
        elif tail is not None and self._plain and hooks_idle():
            # __call__'s launch with this call's tail, inlined: a decode step makes one per
            # layer (lab/2026-12-03-decode-call-flat-path/)
            self._raw(grid[0], grid[1], grid[2], stream, self._function, *self._flags, None,
                      None, None, *[t.data_ptr() for t in io], *tail)
        else:
            self(grid, stream, io, tail)

    def _expand(self, slot: int, tensor: torch.Tensor) -> list[Any]:
        """Slot ``slot``'s launcher arguments: the address, or the encoded descriptor's."""
        entry = self._slots[slot]
        address = tensor.data_ptr()
        if entry is None:
            return [address]
        template, meta, cache = entry
        expanded = cache.get(address)
        if expanded is None:
            # A base tensor goes in as its address, so the cache keeps no tensor alive.
            expanded = [address if isinstance(a, torch.Tensor) else a
                        for a in make_tensordesc_arg(with_base(template, tensor), meta)]
            self.encodes += 1
            if len(cache) >= MAX_ADDRESSES:
                cache.clear()
            cache[address] = expanded
        return expanded

    def _arguments(self, io: tuple[torch.Tensor, ...], tail: Sequence[Any]) -> list[Any]:
        """The C launcher's arguments after its hooks: the io slots, then the tail."""
        if self._plain:
            return [t.data_ptr() for t in io] + list(tail)
        args: list[Any] = []
        for slot, tensor in enumerate(io):
            args.extend(self._expand(slot, tensor))
        args.extend(tail)
        return args

    def __call__(self, grid: tuple[int, int, int], stream: int, io: tuple[torch.Tensor, ...],
                 tail: Sequence[Any] | None = None) -> None:
        """Launch on ``stream`` (a raw CUDA stream handle) with ``io`` first: tensors of the
        templates' dtype, shape, strides and 16-byte alignment on the current GPU (the caller's
        plan checks them). ``tail`` replaces the bound tail for this launch: values of the
        same Triton specialization (:func:`specialization`), checked by the caller."""
        hooked = not hooks_idle()
        if tail is not None or hooked:
            tail = self.tail if tail is None else tail
            enter, leave = ((knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
                            if hooked else (None, None))
            metadata = (self._compiled.launch_metadata(grid, stream, *io, *tail) if hooked
                        else None)
            self._raw(grid[0], grid[1], grid[2], stream, self._function, *self._flags,
                      metadata, enter, leave, *self._arguments(io, tail))
            return
        key = (stream, grid, *[t.data_ptr() for t in io])
        args = self._args.get(key)
        if args is None:
            args = (grid[0], grid[1], grid[2], stream, self._function, *self._flags,
                    None, None, None, *self._arguments(io, self.tail))
            if len(self._args) >= MAX_ADDRESSES:
                self._args.clear()
            self._args[key] = args
        self._raw(*args)


_INT32 = range(-(2**31), 2**31)
_UINT64 = range(2**63, 2**64)


def int_class(v: int) -> int:
    """Triton 3.6's specialization of a non-constexpr int: its integer type (int32, int64 or
    uint64), whether it is 1, whether 16 divides it."""
    return (v in _INT32) + 2 * (v in _UINT64) + 4 * (v == 1) + 8 * (v % 16 == 0)


def specialization(constexprs: tuple[bool, ...], values: list[Any]) -> tuple[Any, ...]:
    """A key that tells apart every two argument lists Triton 3.6 compiles differently
    (``native_specialize_impl``, called for each argument by ``JITFunction.run``), and may tell
    apart some it does not: a constexpr (``constexprs[i]`` true) by its class and value (True,
    1 and 1.0 are equal keys to a dict but three kernels to Triton); a tensor by
    dtype and whether its address is a multiple of 16; an int by Triton's integer type for it
    (int32, int64 or uint64), whether it is 1 and whether 16 divides it; anything else (float,
    bool, None) by its class."""
    key: list[Any] = []
    for is_constexpr, v in zip(constexprs, values, strict=True):
        if is_constexpr:
            key.append((v.__class__, v))
        elif v.__class__ is int:
            key.append(int_class(v))
        elif isinstance(v, torch.Tensor):
            key.append((v.dtype, v.data_ptr() & 15 == 0))
        else:
            key.append(v.__class__)
    return tuple(key)


_COMPILED: dict[tuple[Any, ...], DirectLaunch | None] = {}
_PARAMS: dict[int, tuple[tuple[bool, ...], frozenset[str]]] = {}
"""Per kernel: which parameters are constexprs, and the parameter names."""


def launch(call: KernelCall, io_count: int,
           extra_key: tuple[Any, ...] = ()) -> DirectLaunch | None:
    """Run ``call``, whose first ``io_count`` arguments are tensors and the rest scalars (ints,
    floats, bools, None; constexprs and launch options as keywords).

    On a GPU the first call of each :func:`specialization` (with the device, the launch options
    among the keywords, Triton's debug and instrumentation switches, and ``extra_key``:
    whatever else the caller knows changes the compiled code, such as an environment switch)
    goes through Triton's JIT path and keeps its compiled
    kernel; later calls of that specialization launch it through :class:`DirectLaunch` with
    their own arguments, without Triton's per-launch binding. So shapes and strides may change
    from call to call (a KV cache that grows) at the cost of a key, not a launch through Triton.
    Under the interpreter every call takes the JIT path.

    Returns the specialization's DirectLaunch, for a caller that keeps it and passes later
    calls' arguments itself (None under the interpreter or where none binds)."""
    values = call.ordered_values()
    io = values[0] if values else None
    device = io.get_device() if isinstance(io, torch.Tensor) else -1
    if values is None or device < 0:
        call.run()
        return None
    info = _PARAMS.get(id(call.kernel))
    if info is None:
        info = _PARAMS[id(call.kernel)] = (tuple(p.is_constexpr for p in call.kernel.params),
                                           frozenset(p.name for p in call.kernel.params))
    constexprs, params = info
    options = tuple((k, v) for k, v in call.kwargs.items() if k not in params)
    key = (id(call.kernel), device, options, knobs.runtime.debug,
           knobs.compilation.instrumentation_mode, *extra_key,
           specialization(constexprs, values))
    direct = _COMPILED.get(key)
    if direct is None:
        with torch.cuda.device(device):
            compiled = call.run()
        if key not in _COMPILED:
            if len(_COMPILED) >= MAX_ADDRESSES:
                _COMPILED.clear()
            _COMPILED[key] = DirectLaunch.bind(compiled, (None,) * io_count, values[io_count:])
        return _COMPILED[key]
    direct.on_stream((*call.grid, 1, 1)[:3], device, tuple(values[:io_count]),
                     values[io_count:])
    return direct
