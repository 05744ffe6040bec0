"""The decode call's plan hit in C++ (``csrc/decode_launch.cpp``), for transformers' eager
decode, where the call's Python is what a step waits on.

A DynamicCache decode step calls the decode kernel once per layer with a new cache length.
The Python plan hit (:func:`flashrepro.launch_varlen.kvcache_forward`) costs several µs of
interpreter time per call, more inside a model than in a loop
(lab/2026-12-06-decode-call-cpu-breakdown/); SDPA's call is one C++ dispatch. The extension
keeps what a Python call checked and planned (:func:`remember`) and serves later calls that
match it in every fact the Python plan hit checks (:meth:`DecodeRegistry.decode` returns
None for any other call, which then takes the Python path).

Opt-in: ``FLASHREPRO_NATIVE=1`` (read once, at the first decode call) builds the extension
on first use with ``torch.utils.cpp_extension.load`` (a C++17 compiler and ninja; 30-40 s on
a CPU host and on an H100's, then cached in ``TORCH_EXTENSIONS_DIR``). Where it does not
build, a warning names why and the Python path runs.
"""

from __future__ import annotations

import os
import struct
import warnings
from pathlib import Path
from typing import Any

import torch

from flashrepro import launch_varlen
from flashrepro.counters import stream_buffers
from flashrepro.direct import hooks_idle
from flashrepro.launch_varlen import _CHECKED_KVCACHE, _IO, _PARAMS, _kvcache_signature, _plan_key

SWITCH = "FLASHREPRO_NATIVE"
"""The environment variable that enables the extension ("1")."""
SOURCE = Path(__file__).parent / "csrc" / "decode_launch.cpp"

_UNTRIED = object()
_REGISTRY: Any = _UNTRIED
_SOURCES: dict[str, int] = {}
"""The extension's per-call value sources by kernel parameter name (its ``SOURCES``)."""

_PACK = {"i1": "<b", "i8": "<b", "i16": "<h", "i32": "<i", "i64": "<q", "u1": "<B",
         "u8": "<B", "u16": "<H", "u32": "<I", "u64": "<Q", "fp32": "<f", "f32": "<f",
         "fp64": "<d"}
"""Triton 3.6's launcher storage of a scalar parameter of each type (``ty_to_cpp`` and
``FLOAT_STORAGE_TYPE``: fp32 as its 4 bytes)."""


def registry() -> Any | None:
    """The extension's ``DecodeRegistry``, built on first use where :data:`SWITCH` is "1";
    None where it is off or did not build."""
    global _REGISTRY
    if _REGISTRY is _UNTRIED:
        _REGISTRY = _load() if os.environ.get(SWITCH) == "1" else None
    return _REGISTRY


def _load() -> Any | None:
    """Build (or load the cached build of) the extension; None, with a warning, on failure."""
    try:
        import triton.backends.nvidia as nvidia
        from torch.utils.cpp_extension import load
        from triton import knobs

        module = load(name="flashrepro_decode_launch", sources=[str(SOURCE)],
                      extra_include_paths=[str(Path(nvidia.__file__).parent / "include")],
                      extra_cflags=["-O3"], verbose=False)
        _SOURCES.update(module.SOURCES)
        return module.DecodeRegistry(knobs.runtime)
    except Exception as error:  # a missing compiler or header: the Python path still runs
        warnings.warn(f"flashrepro: {SWITCH}=1 but the native decode launch did not build "
                      f"({type(error).__name__}: {error}); decode calls take the Python path",
                      RuntimeWarning, stacklevel=3)
        return None


def remember(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
             scale: float | None) -> bool:
    """Register with :func:`registry` the plan that a Python call of these arguments
    (``kvcache_forward(q, k, v, None, causal=causal, scale=scale, enable_gqa=True,
    num_splits=None, return_lse=False, bshd=True)``) launched; whether one was registered.
    Calls whose plan the extension cannot serve (a kernel with scratch memory or clusters, a
    CUDA-graph capture, a Triton launch hook, types its packing lacks) register nothing."""
    native = registry()
    if (native is None or not q.is_cuda or torch.cuda.is_current_stream_capturing()
            or not hooks_idle()):  # the extension hands every such call back: no use
        return False
    key = _kvcache_signature(q, k, v, None, causal, scale, True, None, False, None, True)
    shape = _CHECKED_KVCACHE.get(key) if key is not None else None
    l_max = k.shape[2] if k.dim() == 4 else 0
    if shape is None or l_max < 1:
        return False
    splits = shape.splits(l_max)
    plan = shape.plans.get(_plan_key(splits, l_max, k.stride(), v.stride(), q, k, v, True,
                                     None))
    if plan is None:
        return False
    direct = plan.decode
    compiled = direct.compiled
    if getattr(compiled.metadata, "num_ctas", 1) != 1 or not direct.function:
        return False
    tail = (*plan.before, *k.stride(), *plan.between, l_max, *plan.after)
    packing = pack_parameters(compiled.src.signature, dict(zip(_PARAMS[_IO:], tail,
                                                               strict=False)), _SOURCES)
    if packing is None:
        return False
    packed, patches = packing
    parts = locks = None
    if plan.parts:
        locks, parts = stream_buffers(q.device, plan.locks, plan.parts)
    native.add(q, k, v, causal, scale, list(shape.split_limits),
               launch_varlen.LONG_CACHE_KEYS,
               shape.config.block_n, shape.block_d, splits, direct.function, list(plan.grid),
               compiled.metadata.num_warps, compiled.metadata.shared, direct.pdl,
               direct.cooperative, packed, patches,
               torch._C._cuda_getCurrentRawStream(q.get_device()), parts, locks, direct)
    return True


def pack_parameters(signature: dict[str, str], values: dict[str, Any], sources: dict[str, int]
                    ) -> tuple[list[int], list[tuple[int, int, int]]] | None:
    """The decode kernel's parameters as Triton 3.6's launcher passes them: one 8-byte slot
    per parameter whose type in ``signature`` (the compiled kernel's ``src.signature``, in
    parameter order) is not "constexpr" (constexprs and ints specialized as 1 are not
    passed), then the global and profile scratch pointers (null: DirectLaunch binds no kernel
    with scratch). Returns (slots, patches): a scalar's slot holds ``values[name]`` in its
    type's storage (``_PACK``), little-endian; a pointer, k's strides and L_max get a patch
    (slot, source, bytes) that the extension fills per call from ``sources`` (its
    ``SOURCES``). None where a type has no storage here."""
    packed: list[int] = []
    patches: list[tuple[int, int, int]] = []
    for name, ty in signature.items():
        if ty == "constexpr":
            continue
        slot = len(packed)
        packed.append(0)
        if ty.startswith("*"):
            patches.append((slot, sources[_IO_SOURCES[name]], 8))
        elif name in sources:  # k's strides and L_max: this call's, per call
            if ty not in ("i32", "i64", "u64"):
                return None
            patches.append((slot, sources[name], 4 if ty == "i32" else 8))
        elif ty in _PACK:
            raw = struct.pack(_PACK[ty], values[name])
            packed[slot] = int.from_bytes(raw.ljust(8, b"\0"), "little")
        else:
            return None
    return [*packed, 0, 0], patches


_IO_SOURCES = {"Q": "q", "K": "k", "V": "v", "O": "o", "LSE": "q", "SEQUSED_K": "q",
               "PARTS": "parts", "LOCKS": "locks"}
"""Each pointer parameter's source in a call without the LSE and seqused_k (the kernel never
touches those two then, and takes q's address)."""
