"""One kernel launch as data: :func:`flashrepro.select.select` builds it, :mod:`flashrepro.launch`
runs it and repeats it on new tensors without Triton's argument binding (one per call
signature), and the offline SASS compile compiles it.

The forward kernels :func:`~flashrepro.select.select` chooses take the same five leading
arguments: Q, K, V, O and LSE, each a tensor or a TMA descriptor over one. Everything after
them (strides, sizes, scale, constexprs) depends only on the call's shapes, strides, dtype and
flags. (The article kernel's call, :func:`~flashrepro.select.article_call`, has the scale fifth
and is never rebound.)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from triton.compiler import CompiledKernel
from triton.runtime.jit import JITFunction

IO_ARGS = 5
"""The leading arguments every forward kernel takes: Q, K, V, O, LSE."""
STREAM_COUNTER = "tile_counter"
"""The keyword of a kernel argument that is an int32 at 0 at launch and that the kernel leaves
at 0 (the ws kernel's dynamic schedule): whoever repeats the call passes its stream's
(:func:`flashrepro.counters.stream_counters`), as two launches at once must not share one."""
SCRATCH = "partials"
"""The keyword of a float32 kernel argument that the kernel writes before it reads (the ws
kernel's split tail), within one launch: whoever repeats the call passes its stream's
(:func:`flashrepro.counters.stream_scratch`), of ``KernelCall.scratch`` elements."""


@dataclass(frozen=True)
class KernelCall:
    """``kernel[grid](*args, **kwargs)``, recorded.

    Attributes:
        kernel: the ``@triton.jit`` / ``@gluon.jit`` function.
        grid: the launch grid, 1 to 3 ints.
        args: positional arguments; ``args[:5]`` are Q, K, V, O, LSE (tensors, or TMA
            descriptors whose ``base`` is one).
        kwargs: keyword arguments: constexprs and launch options (num_warps, num_stages,
            maxnreg).
        scratch: float32 elements of the :data:`SCRATCH` argument, 0 where the kernel takes
            none.
        counters: int32 counters at 0 that the :data:`STREAM_COUNTER` argument must hold (the
            launcher asks :func:`flashrepro.counters.stream_counters` for this many: a CUDA-graph
            capture gets exactly that many), 0 where the kernel takes none.
    """

    kernel: Any
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    scratch: int = 0
    counters: int = 0

    def run(self) -> CompiledKernel | None:
        """Launch through Triton's JIT path (compiling on first use); returns its result, the
        compiled kernel on a GPU (None under the interpreter).

        Raises:
            ValueError: the kernel takes a :data:`STREAM_COUNTER` and the call still holds the
                empty placeholder (its atomics would write address 0) or fewer than
                :attr:`counters`, or a :data:`SCRATCH` that is empty or smaller than
                :attr:`scratch`.
        """
        counter = self.kwargs.get(STREAM_COUNTER)
        if isinstance(counter, torch.Tensor) and counter.numel() == 0:
            raise ValueError(f"{STREAM_COUNTER} is an empty placeholder: pass counters at 0 "
                             "with with_counter(flashrepro.counters.stream_counters(device, "
                             f"{max(self.counters, 1)}))")
        if isinstance(counter, torch.Tensor) and counter.numel() < self.counters:
            raise ValueError(f"{STREAM_COUNTER} holds {counter.numel()} counters, the launch "
                             f"needs {self.counters}: pass them with with_counter()")
        scratch = self.kwargs.get(SCRATCH)
        if isinstance(scratch, torch.Tensor) and scratch.numel() < max(self.scratch, 1):
            raise ValueError(f"{SCRATCH} holds {scratch.numel()} elements, the launch needs "
                             f"{self.scratch}: pass them with with_scratch()")
        return self.kernel[self.grid](*self.args, **self.kwargs)

    def with_io(self, io: tuple[Any, ...]) -> KernelCall:
        """The same call with Q, K, V, O, LSE replaced by ``io`` (as :func:`rebind_io` builds,
        or :func:`io_templates`)."""
        return replace(self, args=io + self.args[IO_ARGS:])

    def with_counter(self, counter: torch.Tensor) -> KernelCall:
        """The same call with ``counter`` as its :data:`STREAM_COUNTER` argument, if it takes
        one."""
        if STREAM_COUNTER not in self.kwargs:
            return self
        return replace(self, kwargs={**self.kwargs, STREAM_COUNTER: counter})

    def with_scratch(self, scratch: torch.Tensor) -> KernelCall:
        """The same call with ``scratch`` (float32, at least :attr:`scratch` elements) as its
        :data:`SCRATCH` argument, if it takes one."""
        if SCRATCH not in self.kwargs:
            return self
        return replace(self, kwargs={**self.kwargs, SCRATCH: scratch})

    def counter_slot(self) -> int | None:
        """The index of the :data:`STREAM_COUNTER` argument among :meth:`ordered_values`, or
        None."""
        return self._slot(STREAM_COUNTER)

    def scratch_slot(self) -> int | None:
        """The index of the :data:`SCRATCH` argument among :meth:`ordered_values`, or None."""
        return self._slot(SCRATCH)

    def _slot(self, name: str) -> int | None:
        if name not in self.kwargs or not isinstance(self.kernel, JITFunction):
            return None
        return [p.name for p in self.kernel.params].index(name)

    def ordered_values(self) -> list[Any] | None:
        """Every parameter of the kernel in signature order, constexprs included (what
        ``CompiledKernel.run`` takes after its launch arguments); None when ``kernel`` is no
        JITFunction or an argument is missing."""
        if not isinstance(self.kernel, JITFunction):
            return None
        values = list(self.args)
        for param in self.kernel.params[len(self.args):]:
            if param.name in self.kwargs:
                values.append(self.kwargs[param.name])
            elif param.has_default:
                values.append(param.default)
            else:
                return None
        return values


def io_templates(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The Q, K, V, O, LSE slots of ``args`` with no tensor kept: None for a tensor slot, a
    shallow copy of a TMA descriptor with ``base=None`` (so a stored plan pins no memory)."""
    return tuple(None if isinstance(slot, torch.Tensor) else with_base(slot, None)
                 for slot in args[:IO_ARGS])


def with_base(desc: Any, base: torch.Tensor | None) -> Any:
    """A shallow copy of a TMA descriptor with another base, past its constructor's checks."""
    copy = object.__new__(type(desc))
    copy.__dict__.update(desc.__dict__)
    copy.base = base
    return copy


def rebind_io(templates: tuple[Any, ...], tensors: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
    """Q, K, V, O, LSE arguments for new ``tensors`` from :func:`io_templates`' slots.

    A tensor slot (None) takes the new tensor; a descriptor slot a copy of the template (shape,
    strides, block and layout are the template's) with the new tensor as its base. The caller
    guarantees the new tensor's dtype, shape, strides and 16-byte alignment are the first
    call's.
    """
    return tuple(tensor if slot is None else with_base(slot, tensor)
                 for slot, tensor in zip(templates, tensors, strict=True))
