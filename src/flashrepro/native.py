"""Plan hits in C++ (``csrc/plan_launch.cpp`` and its headers) for the two calls a model
makes per layer where the call's Python is what a step waits on: transformers' eager decode,
and the equal-length forward with a new output (``torch.ops.flashrepro.attention``,
``attention_lse`` and ``attention_bshd`` in a compiled graph, transformers' eager prefill).

A DynamicCache decode step calls the decode kernel once per layer with a new cache length.
The Python plan hit (:func:`flashrepro.launch_varlen.kvcache_forward`) costs several µs of
interpreter time per call, more inside a model than in a loop
(lab/2026-12-06-decode-call-cpu-breakdown/); SDPA's call is one C++ dispatch. Under
``torch.compile`` the attention op is the one call of a layer's graph whose body is Python.
The extension keeps what a Python call checked and planned (:func:`remember`,
:func:`remember_forward`) and serves later calls that match it in every fact the Python plan
hit checks (its registries return None for any other call, which then takes the Python path).

Opt-in: ``FLASHREPRO_NATIVE=1`` (read once, at the first call that asks) builds the extension
on first use with ``torch.utils.cpp_extension.load`` (a C++17 compiler and ninja; 30-40 s on
a CPU host and on an H100's, then cached in ``TORCH_EXTENSIONS_DIR``). Where it does not
build, a warning names why and the Python path runs.
"""

from __future__ import annotations

import hashlib
import os
import struct
import warnings
from pathlib import Path
from typing import Any

import torch

try:  # Triton 3.6's NVIDIA launcher's table; absent elsewhere (then nothing registers)
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
except ImportError:  # pragma: no cover - other backends
    TMA_DTYPE_DEVICE_TO_HOST = {}

from flashrepro import launch, launch_varlen
from flashrepro.counters import stream_buffers
from flashrepro.direct import hooks_idle
from flashrepro.kernels.call import IO_ARGS
from flashrepro.launch_varlen import _CHECKED_KVCACHE, _IO, _PARAMS, _kvcache_signature, _plan_key

SWITCH = "FLASHREPRO_NATIVE"
"""The environment variable that enables the extension ("1")."""
SOURCE = Path(__file__).parent / "csrc" / "plan_launch.cpp"
"""The extension's one translation unit; the headers beside it hold the registries."""
HEADERS = tuple(sorted(SOURCE.parent.glob("*.h")))

_UNTRIED = object()
_REGISTRY: Any = _UNTRIED
_FORWARD: Any = None
"""The built extension's ``ForwardRegistry`` (None until :func:`registry` built it)."""
_SOURCES: dict[str, int] = {}
"""The extension's per-call value sources by kernel parameter name (its ``SOURCES``)."""
_FORWARD_SOURCES: dict[str, int] = {}
"""The forward's per-call value sources (its ``FORWARD_SOURCES``): q, k, v, o, lse, counters,
scratch."""

MAX_SLOTS = 64
"""Parameter slots a registered plan may take (the extension's ``kMaxSlots``)."""
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


def forward_registry() -> Any | None:
    """The extension's ``ForwardRegistry``, built with :func:`registry`; None where that is."""
    return _FORWARD if registry() is not None else None


def _load() -> Any | None:
    """Build (or load the cached build of) the extension; None, with a warning, on failure."""
    try:
        import triton.backends.nvidia as nvidia
        from torch.utils.cpp_extension import load
        from triton import knobs

        global _FORWARD
        # torch's build cache hashes the sources alone: the headers' digest in a flag
        digest = hashlib.sha256(b"".join(h.read_bytes() for h in HEADERS)).hexdigest()[:16]
        module = load(name="flashrepro_plan_launch", sources=[str(SOURCE)],
                      extra_include_paths=[str(Path(nvidia.__file__).parent / "include")],
                      extra_cflags=["-O3", f"-DFLASHREPRO_HEADERS_{digest}"], verbose=False)
        _SOURCES.update(module.SOURCES)
        _FORWARD_SOURCES.update(module.FORWARD_SOURCES)
        _FORWARD = module.ForwardRegistry(knobs.runtime)
        from flashrepro import ops  # imported by every caller: the ops' Python kernels

        module.install_op(_FORWARD, {"attention": ops._attention,
                                     "attention_lse": ops._attention_lse,
                                     "attention_bshd": ops._attention_bshd})
        decode = module.DecodeRegistry(knobs.runtime)
        launch.CLEAR_HOOKS["native"] = _clear_both(decode, _FORWARD)
        return decode
    except Exception as error:  # a missing compiler or header: the Python path still runs
        warnings.warn(f"flashrepro: {SWITCH}=1 but the native launch did not build "
                      f"({type(error).__name__}: {error}); every call takes the Python path",
                      RuntimeWarning, stacklevel=3)
        return None


def _clear_both(decode: Any, forward: Any) -> Any:
    """A hook for :data:`flashrepro.launch.CLEAR_HOOKS` that empties both registries."""
    def clear() -> None:
        decode.clear()
        forward.clear()
    return clear


def _registrable(q: torch.Tensor) -> bool:
    """Whether a plan of a call on ``q`` may be registered now: on a GPU, outside a CUDA-graph
    capture, with no Triton launch hook (the extension hands every other call back)."""
    return q.is_cuda and not torch.cuda.is_current_stream_capturing() and hooks_idle()


def _launchable(direct: Any) -> bool:
    """Whether the extension can launch ``direct``'s kernel (a DirectLaunch): one CTA per
    cluster and a function handle."""
    return getattr(direct.compiled.metadata, "num_ctas", 1) == 1 and bool(direct.function)


def remember(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
             scale: float | None) -> bool:
    """Register with :func:`registry` the plan that a Python call of these arguments
    (``kvcache_forward(q, k, v, None, causal=causal, scale=scale, enable_gqa=True,
    num_splits=None, return_lse=False, bshd=True)``) launched; whether one was registered.
    Calls whose plan the extension cannot serve (a kernel with scratch memory or clusters, a
    CUDA-graph capture, a Triton launch hook, types its packing lacks) register nothing."""
    native = registry()
    if native is None or not _registrable(q):
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
    if not _launchable(direct):
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


def remember_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                     scale: float | None, enable_gqa: bool, causal_alignment: str,
                     return_lse: bool, bshd: bool = True) -> bool:
    """Register with :func:`forward_registry` the plan that a Python call of these arguments
    (``launch.forward(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
    causal_alignment=causal_alignment, return_lse=return_lse, config=None, out=None,
    bshd=bshd)``) made; whether one was registered. Plans the extension cannot serve (inputs
    read through contiguous copies, a kernel with scratch memory or clusters, a CUDA-graph
    capture, a Triton launch hook, parameters its packing lacks) register nothing."""
    native = forward_registry()
    if native is None or not _registrable(q) or scale.__class__ not in (float, type(None)):
        return False
    key = launch._signature(q, k, v, causal, scale, enable_gqa, causal_alignment, return_lse,
                            None, None, bshd)
    plan = launch._PLANS.get(key) if key is not None else None
    if plan is None or plan.direct is None or plan.contiguous_q or plan.contiguous_kv:
        return False
    direct = plan.direct
    compiled = direct.compiled
    if not _launchable(direct):
        return False
    sources = {i: _FORWARD_SOURCES[name] for i, name in enumerate(("q", "k", "v", "o", "lse"))}
    counters = scratch = None
    if plan.counter_slot is not None:
        counters, scratch = stream_buffers(q.device, plan.call.counters, plan.call.scratch)
        sources[IO_ARGS + plan.counter_slot] = _FORWARD_SOURCES["counters"]
        if plan.scratch_slot is not None:
            sources[IO_ARGS + plan.scratch_slot] = _FORWARD_SOURCES["scratch"]
    values = [*direct.io_templates, *direct.tail]
    packing = pack_forward(compiled.src.signature, values,
                           getattr(compiled.metadata, "tensordesc_meta", None), sources)
    if packing is None:
        return False
    packed, pointers, descriptors = packing
    if len(packed) > MAX_SLOTS:
        return False
    native.add(q, k, v, causal, scale, enable_gqa, causal_alignment, return_lse, bshd,
               list(plan.out_shape), list(plan.out_stride), list(plan.lse_shape),
               plan.lse_dummy, direct.function, list(plan.grid), compiled.metadata.num_warps,
               compiled.metadata.shared, direct.pdl, direct.cooperative, packed, pointers,
               descriptors, torch._C._cuda_getCurrentRawStream(q.get_device()), counters,
               scratch, direct)
    return True


def pack_forward(signature: dict[str, str], values: list[Any],
                 metas: list[dict[str, Any]] | None, sources: dict[int, int]
                 ) -> tuple[list[int], list[tuple[int, int]], list[tuple[Any, ...]]] | None:
    """A forward kernel's parameters as Triton 3.6's launcher passes them (``make_launcher``,
    ``wrap_handle_tensordesc``): ``values`` one per entry of ``signature`` (the compiled
    kernel's ``src.signature``, in parameter order; a TMA descriptor slot holds its template,
    whose base is bound per call), ``metas`` the compiled kernel's ``tensordesc_meta``,
    ``sources`` the per-call source (``FORWARD_SOURCES``) of each value index that is a
    pointer or a descriptor's base.

    Returns (slots, pointers, descriptors): one 8-byte slot per passed parameter (constexprs
    are not passed; a descriptor is its tensor map, then its shape as i32 and strides as i64),
    then the global and profile scratch pointers (null); (slot, source) per pointer; per
    descriptor (slot, source, then :func:`tensor_map_arguments`). None where a parameter has
    no storage here (an unlowered descriptor, a pointer without a source, another type)."""
    if len(signature) != len(values):
        return None
    metas_left = iter(metas or [])
    packed: list[int] = []
    pointers: list[tuple[int, int]] = []
    descriptors: list[tuple[Any, ...]] = []
    for index, ((_, ty), value) in enumerate(zip(signature.items(), values, strict=True)):
        if not isinstance(ty, str):  # a tuple parameter, flattened by Triton's launcher
            return None
        if ty == "constexpr":
            continue
        if ty.startswith("tensordesc"):
            meta = next(metas_left, None)
            encoded = None if meta is None else tensor_map_arguments(value, meta)
            if encoded is None or index not in sources:
                return None
            descriptors.append((len(packed), sources[index], *encoded))
            packed.append(0)
            packed.extend(_slot("i32", n) for n in value.shape)
            packed.extend(_slot("i64", n) for n in value.strides)
        elif ty.startswith("*"):
            if index not in sources:
                return None
            pointers.append((len(packed), sources[index]))
            packed.append(0)
        elif ty in _PACK and value.__class__ in (int, float, bool):
            packed.append(_slot(ty, value))
        else:
            return None
    return [*packed, 0, 0], pointers, descriptors


def tensor_map_arguments(template: Any, meta: dict[str, Any]
                         ) -> tuple[int, list[int], list[int], list[int], int, int] | None:
    """``cuTensorMapEncodeTiled``'s arguments for ``template`` (a TMA descriptor) but its base,
    as Triton 3.6's ``fill_tma_descriptor`` computes them (driver.c): (data type, dims
    innermost first, the byte strides of dims 1 .. rank - 1, the box innermost first, swizzle,
    OOB fill: 1 (NaN) for ``padding="nan"``). None for fp4-padded descriptors and a last
    stride other than 1, which it does not encode."""
    shape, strides = list(template.shape), list(template.strides)
    block = list(meta["block_size"])
    if meta["fp4_padded"] or strides[-1] != 1 or not len(shape) == len(block) == len(strides):
        return None
    size = meta["elem_size"]
    return (TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]], shape[::-1],
            [size * n for n in strides[:-1]][::-1], block[::-1], meta["swizzle"],
            int(template.padding == "nan"))


def _slot(ty: str, value: Any) -> int:
    """``value`` in a parameter slot of type ``ty``: its storage (``_PACK``), little-endian."""
    return int.from_bytes(struct.pack(_PACK[ty], value).ljust(8, b"\0"), "little")


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
            packed[slot] = _slot(ty, values[name])
        else:
            return None
    return [*packed, 0, 0], patches


_IO_SOURCES = {"Q": "q", "K": "k", "V": "v", "O": "o", "LSE": "q", "SEQUSED_K": "q",
               "PARTS": "parts", "LOCKS": "locks"}
"""Each pointer parameter's source in a call without the LSE and seqused_k (the kernel never
touches those two then, and takes q's address)."""
