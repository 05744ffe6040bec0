"""Lengths as data: the input rules and launches of the KV-cache (decode) and packed-sequence
(varlen) kernels, :mod:`flashrepro.kernels.decode` and :mod:`flashrepro.kernels.varlen`.

Nothing here reads the values of a length tensor (``seqused_k``, ``cu_seqlens_*``): the
kernels read them on the device and clamp them into the tensors' bounds. So a call needs no
host sync, can be captured in a CUDA graph, and a new length runs the same compiled kernel
(the kernels take every length and head count as a runtime, unspecialized int). What is
chosen on the host, the grid and the number of key splits, depends on shapes only.

A call whose arguments passed the checks before, lengths apart, skips them, and the kernels
relaunch their compiled code directly (:func:`flashrepro.direct.launch`).
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.graph import increment_version

from flashrepro.configs import KernelConfig, block_dim
from flashrepro.counters import stream_buffers
from flashrepro.direct import DirectLaunch, launch
from flashrepro.kernels import LOG2_E
from flashrepro.kernels.call import KernelCall
from flashrepro.kernels.decode import decode_fwd_kernel
from flashrepro.kernels.varlen import varlen_fwd_kernel
from flashrepro.launch import MAX_PLANS, _gpu_facts, _mma_v3_switch
from flashrepro.select import INT32_LIMIT, fits_int32
from flashrepro.validation import (
    _byte_ranges_meet,
    _check_flag,
    check_out,
    check_readable,
    forward_ad_active,
    interpreter_mode,
    validate,
)

_STRIDED = torch.strided

MAX_GRID_YZ = 65535
"""CUDA's limit on gridDim.y and gridDim.z (row blocks and key splits of a decode launch, query
blocks of a varlen launch)."""
DECODE_MAX_BLOCK_M = 64
"""The largest decode tile: G·Lq packed rows beyond it take more row blocks."""
LONG_CACHE_KEYS = 4096
"""From this many keys in the cache a grid of programs with steps of at most 64 keys, fewer
than 1.5 per SM, splits the keys in two (:func:`num_kv_splits`)."""
MAX_SPLITS = 128
"""The most key splits :func:`num_kv_splits` picks."""
MERGE_BLOCK_S = 16
"""Splits the decode kernel's merge reads per step."""
MERGE_ELEMENTS = 4096
"""Part elements the merge reads per step (rows x splits x head dim): 32 float32 registers per
thread of a 4-warp program."""


@dataclass(frozen=True)
class DecodeConfig:
    """The decode kernel's launch apart from its packed rows (BLOCK_M) and splits.

    Attributes:
        block_n: key rows per inner-loop step, a power of two >= 16.
        num_warps: warps per program.
        num_stages: software-pipelining depth of the K/V loads.
    """

    block_n: int
    num_warps: int
    num_stages: int


DEEP_DECODE = DecodeConfig(128, 4, 3)
"""cuDNN's decode launch shape at one program per (batch, kv head): 128-key steps, 3 stages."""


def pipeline_bytes(cfg: DecodeConfig, block_d: int) -> int:
    """Shared memory a decode launch takes at 16 rows in fp16/bf16, from above: the K and V
    tiles of ``num_stages - 1`` steps in flight (Triton's software pipeline) plus 8 KiB, at
    most 4 KiB more than Triton 3.6 allocates for the tiles :func:`decode_config` picks, on
    sm_86 and sm_90 alike (lab/2026-12-03-decode-tma-tiles/resources-*.txt)."""
    return 2 * (cfg.num_stages - 1) * cfg.block_n * block_d * 2 + 8192


def decode_config(head_dim: int, block_m: int, programs: int, num_sms: int,
                  max_shared: int) -> DecodeConfig:
    """The decode launch for a head dim, a tile of ``block_m`` packed rows and a grid of
    ``programs`` (B·H_kv·row blocks, before splits) on ``num_sms`` SMs whose blocks may take
    ``max_shared`` bytes of shared memory. Up to D = 128:

    * two programs per SM or more: 128-key steps with 2 stages;
    * at most one program per SM, a tile of at most 16 rows (decode, L_q·G <= 16) and room for
      it (136 KiB at D = 128: the H100/H200 and A100, not sm_86/89's 99 KiB):
      :data:`DEEP_DECODE`. Measured on the H200 at D = 128 only; at 32 and 64 rows the
      128-key tile spills (lab/2026-12-03-decode-tma-tiles/resources-sm_90.txt) and is not
      timed;
    * otherwise 64-key steps with 3 stages (two (64, 128) K and V tiles per stage, 70 KiB at
      D = 128 in bf16).

    Above D = 128, 32 keys and 2 stages. Chosen from sweeps of tiles and split counts on the
    H200 (lab/2026-12-02-split-kv-decode/, lab/2026-12-03-decode-tma-tiles/)."""
    if head_dim > 128:
        return DecodeConfig(32, 4, 2)
    if programs >= 2 * num_sms:
        return DecodeConfig(128, 4, 2)
    if (programs <= num_sms and block_m <= 16
            and pipeline_bytes(DEEP_DECODE, block_dim(head_dim)) <= max_shared):
        return DEEP_DECODE
    return DecodeConfig(64, 4, 3)


def varlen_config(head_dim: int) -> KernelConfig:
    """The varlen launch: the production Triton kernel's fallback tiles without TMA (64x64,
    4 warps, 3 stages up to D = 128; 64x32, 2 stages above), one config for every length, so
    a new ``max_seqlen_q`` never compiles anew."""
    if head_dim <= 128:
        return KernelConfig(64, 64, 4, 3)
    return KernelConfig(64, 32, 4, 2)


def _cdiv(a: int, b: int) -> int:
    """``triton.cdiv`` without its cost: Triton 3.6 makes it (and ``triton.next_power_of_2``,
    whose place :func:`~flashrepro.configs.block_dim` takes) a ``ConstexprFunction``, whose
    call takes about 2.5 µs of host time."""
    return -(-a // b)


def num_kv_splits(programs: int, seqlen_k: int, block_n: int, num_sms: int) -> int:
    """Key splits of a decode launch, from shapes only (never from ``seqused_k``'s values,
    which would be a host sync).

    ``programs`` is B·H_kv·(row blocks), the grid without splits; ``seqlen_k`` the cache's
    L_max. One program per SM: num_SMs // programs splits, at most :data:`MAX_SPLITS` and
    cdiv(L_max, block_n). With steps of at most 64 keys, a grid of fewer than 1.5 programs per
    SM over at least :data:`LONG_CACHE_KEYS` keys takes two. On the H200 at D = 128, two
    splits were 1-30 % slower with 128-key steps (B=10, 12, 16 at H_kv=8) and 12-19 % slower
    at 1.9 programs per SM (B=32), 0-1 % faster at 1.45 (B=24); the 1.5 lies between those
    two measured grids. Fewer splits than FlashAttention's wave rule
    (``num_splits_heuristic`` in FA2/FA3's ``flash_api.cpp``): on the H200 each split's merge
    and cold start cost more than a wave's tail (lab/2026-12-02-split-kv-decode/,
    lab/2026-12-03-decode-tma-tiles/). The kernel divides each sequence's own key blocks
    between the splits.
    """
    limit = _split_limit(programs, seqlen_k >= LONG_CACHE_KEYS, block_n, num_sms)
    return max(1, min(limit, _cdiv(seqlen_k, block_n)))


def _split_limit(programs: int, long_cache: bool, block_n: int, num_sms: int) -> int:
    """:func:`num_kv_splits` before the cap of one split per key block (any count for an
    empty grid, which never launches)."""
    splits = max(1, num_sms // max(programs, 1))
    if splits == 1 and block_n <= 64 and 2 * programs < 3 * num_sms and long_cache:
        splits = 2
    return min(splits, MAX_SPLITS)


@functools.cache
def _num_sms(device: torch.device) -> int:
    """The SM count :func:`num_kv_splits` divides (the stand-in off a GPU)."""
    return _gpu_facts(device)["num_sms"]


STAND_IN_MAX_SHARED = 227 * 1024
"""Shared memory per block off a GPU (the interpreter): the H100's and H200's."""


@functools.cache
def _max_shared(device: torch.device) -> int:
    """The shared memory a block of ``device`` may opt into (:func:`decode_config`): 227 KiB on
    the H100/H200, 163 on the A100, 99 on sm_86/89 (torch's ``shared_memory_per_block_optin``,
    the documented 48 KiB where a torch build lacks it)."""
    if device.type != "cuda":
        return STAND_IN_MAX_SHARED
    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "shared_memory_per_block_optin", 48 * 1024))


# -- input rules --

def check_lengths(name: str, t: object, size: int | None, shape: str,
                  device: torch.device) -> None:
    """A length or offset tensor: a dense torch.Tensor (TypeError), dtype int32 (TypeError),
    1-D of ``size`` elements, or of at least one where ``size`` is None (ValueError;
    ``shape`` names it, e.g. ``"(B,)"``), on ``device`` (ValueError), without the lazy
    negation bit (ValueError). Its values are not read (that would be a host sync).

    Raises:
        TypeError, ValueError: naming ``name`` and the rule.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be an int32 torch.Tensor of shape {shape} on q's device, "
                        f"got {type(t).__name__}")
    check_readable(name, t)
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must have dtype int32 (the kernels read it as int32), got "
                        f"{t.dtype}; pass {name}.to(torch.int32)")
    if t.dim() != 1 or (t.shape[0] < 1 if size is None else t.shape[0] != size):
        want = "with B >= 0" if size is None else f"= ({size},)"
        raise ValueError(f"{name} must have shape {shape} {want}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on q's device {device}, got {t.device}")
    if t.is_neg():  # .contiguous() keeps the bit: the kernel would read the stored values
        raise ValueError(f"{name} must not carry torch's lazy negation bit (the kernels read "
                         f"its memory as stored); pass {name}.resolve_neg()")


def check_max_seqlen(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def check_num_splits(num_splits: object) -> None:
    if num_splits is None:
        return
    if isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise TypeError(f"num_splits must be None or an int, got {type(num_splits).__name__}")
    if not 1 <= num_splits <= MAX_GRID_YZ:
        raise ValueError(f"num_splits must be in 1..{MAX_GRID_YZ} (CUDA's gridDim.z), got "
                         f"{num_splits}")


def validate_kvcache(q: object, k: object, v: object, seqused_k: object, *, causal: bool,
                     scale: float | None, enable_gqa: bool, num_splits: object,
                     return_lse: object) -> None:
    """The rules of :func:`flashrepro.attention_kvcache`, in order: q, k, v, ``causal``,
    ``enable_gqa`` and ``scale`` as :func:`flashrepro.validation.validate` (k and v are the
    caches, (B, H_kv, L_max, D)); ``return_lse`` a bool (TypeError); ``seqused_k`` None or
    as :func:`check_lengths`, shape (B,); ``num_splits`` None or an int (TypeError) in
    1..65535 (ValueError); cdiv(G·Lq, 64) <= 65535 row blocks, G = H / H_kv (ValueError).

    Raises:
        TypeError, ValueError: naming the argument and the rule.
    """
    validate(q, k, v, scale=scale, enable_gqa=enable_gqa, causal_alignment="bottom_right",
             causal=causal)
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
    _check_flag("return_lse", return_lse)
    if seqused_k is not None:
        check_lengths("seqused_k", seqused_k, q.shape[0], "(B,)", q.device)
    check_num_splits(num_splits)
    h, lq, h_kv = q.shape[1], q.shape[2], k.shape[1]
    rows = (h // h_kv if h_kv else 0) * lq
    if _cdiv(rows, DECODE_MAX_BLOCK_M) > MAX_GRID_YZ:
        raise ValueError(f"(H / H_kv)·Lq = {rows} query rows per key/value head exceed "
                         f"{MAX_GRID_YZ * DECODE_MAX_BLOCK_M} ({MAX_GRID_YZ} row blocks of "
                         f"{DECODE_MAX_BLOCK_M}, CUDA's gridDim.y); use flashrepro.attention")


def _check_packed(name: str, t: object) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_readable(name, t)
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if t.dim() != 3:
        raise ValueError(f"{name} must have 3 dims (total tokens, heads, D), got shape "
                         f"{tuple(t.shape)}")


def validate_varlen(q: object, k: object, v: object, cu_seqlens_q: object,
                    cu_seqlens_k: object, max_seqlen_q: object, max_seqlen_k: object, *,
                    causal: bool, scale: float | None, return_lse: object,
                    seqused_k: object) -> None:
    """The rules of :func:`flashrepro.attention_varlen`, in order:

    1. q, k and v are dense tensors (TypeError) with 3 dims (ValueError): q (total_q, H, D),
       k and v (total_k, H_kv, D); v has k's shape; D is q's; H is a multiple of H_kv
       (ValueError).
    2. Dtype, device, grad, head dim, ``causal`` and ``scale`` as
       :func:`flashrepro.validation.validate` (on the (1, H, total, D) views).
    3. ``return_lse`` is a bool (TypeError).
    4. ``cu_seqlens_q`` and ``cu_seqlens_k`` as :func:`check_lengths`, 1-D int32 on q's device
       with B + 1 >= 1 elements, the same count for both; ``seqused_k`` None or (B,) likewise.
    5. ``max_seqlen_q`` and ``max_seqlen_k`` are ints (TypeError) >= 0 (ValueError);
       cdiv(max_seqlen_q, BLOCK_M) <= 65535 query blocks (ValueError).
    6. B·H <= 2^31 - 1 programs per query block (ValueError).

    Raises:
        TypeError, ValueError: naming the argument and the rule.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_packed(name, t)
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
    assert isinstance(v, torch.Tensor)
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"v must have k's shape (total_k, H_kv, D) = {tuple(k.shape)}, got "
                         f"{tuple(v.shape)}")
    (_, h, d), (_, h_kv, d_k) = q.shape, k.shape
    if d_k != d:
        raise ValueError(f"k and v must have q's head dim D={d}, got {d_k}")
    if (h_kv < 1 or h % h_kv) and h + h_kv > 0:
        raise ValueError(f"q's heads H={h} must be a multiple of k/v's heads H_kv={h_kv}")
    validate(*(t.unsqueeze(0).transpose(1, 2) for t in (q, k, v)), scale=scale,
             enable_gqa=True, causal_alignment="bottom_right", causal=causal)
    _check_flag("return_lse", return_lse)
    check_lengths("cu_seqlens_q", cu_seqlens_q, None, "(B + 1,)", q.device)
    assert isinstance(cu_seqlens_q, torch.Tensor)
    batch = cu_seqlens_q.shape[0] - 1
    check_lengths("cu_seqlens_k", cu_seqlens_k, batch + 1, "(B + 1,)", q.device)
    if seqused_k is not None:
        check_lengths("seqused_k", seqused_k, batch, "(B,)", q.device)
    check_max_seqlen("max_seqlen_q", max_seqlen_q)
    check_max_seqlen("max_seqlen_k", max_seqlen_k)
    block_m = varlen_config(d).block_m
    if _cdiv(max_seqlen_q, block_m) > MAX_GRID_YZ:
        raise ValueError(f"max_seqlen_q = {max_seqlen_q} needs more than {MAX_GRID_YZ} query "
                         f"blocks of {block_m} rows (CUDA's gridDim.y)")
    if batch * h > 2**31 - 1:
        raise ValueError(f"B·H = {batch * h} exceeds CUDA's gridDim.x limit of 2^31 - 1")


# -- launches --

def _lse_dummy(device: torch.device) -> torch.Tensor:
    """The LSE argument of a launch that stores none (the kernels never touch it)."""
    return torch.empty(1, dtype=torch.float32, device=device)


def _kvcache_signature(q: Any, k: Any, v: Any, seqused_k: Any, causal: Any, scale: Any,
                       enable_gqa: Any, num_splits: Any, return_lse: Any, out: Any,
                       bshd: bool = False) -> tuple[Any, ...] | None:
    """The key of a checked :func:`kvcache_forward` call: every property of its arguments that
    :func:`validate_kvcache` and :func:`~flashrepro.validation.check_out` read, except the
    caches' length L_max (so a cache that grows by a token per call keeps its key; only
    whether k's and v's agree) and the out's memory against q, k and v (checked per call);
    None where the call must take the full
    checks (arguments of other types, tensors that require grad, are not dense, carry a
    negation bit, are ZeroTensors or have no sizes)."""
    tensor = torch.Tensor
    if not (type(q) is tensor and type(k) is tensor and type(v) is tensor
            and (seqused_k is None or type(seqused_k) is tensor) and causal.__class__ is bool
            and enable_gqa.__class__ is bool and return_lse.__class__ is bool
            and (scale is None or scale.__class__ in (float, int))
            and (num_splits is None or num_splits.__class__ is int)
            and (out is None or type(out) is tensor)):
        return None
    if not (q.is_cuda or (q.device.type == "cpu" and interpreter_mode())):
        return None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (out is not None and out.requires_grad)):
        return None
    if forward_ad_active():  # an input may carry a tangent: the full checks refuse it
        return None
    if (q.layout is not _STRIDED or k.layout is not _STRIDED or v.layout is not _STRIDED
            or q.is_neg() or k.is_neg() or v.is_neg()
            or q._is_zerotensor() or k._is_zerotensor() or v._is_zerotensor()):
        return None
    if seqused_k is not None and (seqused_k.layout is not _STRIDED or seqused_k.is_neg()
                                  or seqused_k._is_zerotensor()):
        return None
    try:
        used = None if seqused_k is None else (seqused_k.shape, seqused_k.dtype,
                                               seqused_k.device)
        # unpacked, not sliced: a slice of a torch.Size costs a new Size per call
        kb, kh, kl, kd = k.shape
        vb, vh, vl, vd = v.shape
        key = (q.shape, q.stride(), q.dtype, q.device, kb, kh, kd, k.dtype, k.device, vb, vh,
               vd, kl == vl, v.dtype, v.device, used, causal, scale, scale.__class__,
               enable_gqa, num_splits, return_lse, bshd, _mma_v3_switch())
        if out is None:
            return key
        if (out.layout is not _STRIDED or out.is_neg() or out._is_zerotensor()
                or (out.is_inference() and not torch.is_inference_mode_enabled())):
            return None
        return (*key, out.shape, out.stride(), out.dtype, out.device)
    except (RuntimeError, ValueError):  # no sizes (a nested tensor), or k or v not 4-D:
        return None  # validation names the rule


@dataclass(frozen=True)
class _DecodeShape:
    """What a checked kvcache signature fixes: the packed-row tiling and the launch config,
    and the signature's launch plans."""

    kv_group: int
    block_m: int
    row_blocks: int
    block_d: int
    config: DecodeConfig
    programs: int
    """B·H_kv·row_blocks: the grid before splits."""
    num_sms: int
    split_limits: tuple[int, int]
    """The most key splits below :data:`LONG_CACHE_KEYS` keys and from it
    (:func:`num_kv_splits`)."""
    plans: dict[tuple[Any, ...], _DecodePlan] = field(default_factory=dict, compare=False)
    """The signature's :class:`_DecodePlan` per split count, Triton specialization of the
    caches' strides and L_max, and 16-byte alignment of each tensor (:func:`kvcache_forward`)."""

    def splits(self, seqlen_k: int) -> int:
        """:func:`num_kv_splits` for a cache of ``seqlen_k`` >= 1 keys."""
        limit = self.split_limits[seqlen_k >= LONG_CACHE_KEYS]
        return limit if limit == 1 else min(limit, -(-seqlen_k // self.config.block_n))


class _DecodePlan:
    """The launch of a checked signature at one split count, one specialization of the
    caches' strides and length, and one 16-byte alignment of each tensor (see
    :func:`kvcache_forward`): the decode kernel's tail from its first call, whose key/value
    strides and L_max each call replaces. The tail is passed on every launch: a DirectLaunch
    serves every call of its specialization, whose bound tail is its first call's.

    Attributes:
        decode: the decode kernel's launch.
        grid: its grid.
        tail: its first call's arguments after the tensors.
        parts: float32 scratch elements of a split launch
            (:func:`~flashrepro.counters.stream_scratch`; 0 without splits).
        locks: split counters the launch uses (:func:`~flashrepro.counters.stream_counters`).
        before, between, after: ``tail`` before the caches' strides, between them and L_max,
            after L_max; a launch's tail is ``(*before, *strides, *between, l_max, *after)``.
    """

    __slots__ = ("after", "before", "between", "decode", "grid", "locks", "parts", "tail")

    def __init__(self, decode: DirectLaunch, grid: tuple[int, int, int], tail: tuple[Any, ...],
                 parts: int, locks: int) -> None:
        self.decode, self.grid, self.tail, self.parts, self.locks = (decode, grid, tail, parts,
                                                                     locks)
        self.before = tail[:_K_STRIDES.start]
        self.between = tail[_K_STRIDES.stop:_L_MAX]
        self.after = tail[_L_MAX + 1:]


_CHECKED_KVCACHE: dict[tuple[Any, ...], _DecodeShape] = {}
"""Signatures (:func:`_kvcache_signature`) of calls that passed every check, with what they
fix."""
_PARAMS = list(inspect.signature(decode_fwd_kernel.fn).parameters)
_IO = _PARAMS.index("stride_qb")
"""The decode kernel's tensor arguments, before its tail."""
_K_STRIDES = slice(_PARAMS.index("stride_kb") - _IO, _PARAMS.index("stride_kd") - _IO + 1)
"""Where the caches' strides and L_max sit in the decode kernel's tail."""
_L_MAX = _PARAMS.index("max_seqlen_k") - _IO


def _span4(t: torch.Tensor) -> int:
    """:func:`~flashrepro.validation.byte_span` of a non-empty 4-D tensor, unrolled (a decode
    call checks four per call)."""
    (n0, n1, n2, n3), (s0, s1, s2, s3) = t.shape, t.stride()
    return ((n0 - 1) * s0 + (n1 - 1) * s1 + (n2 - 1) * s2 + (n3 - 1) * s3 + 1) * t.element_size()


def _disjoint(out: torch.Tensor, *tensors: torch.Tensor) -> bool:
    """Whether the byte span of ``out`` (4-D, not empty) meets none of ``tensors``' (4-D);
    where they meet, the exact check decides."""
    o0 = out.data_ptr()
    o1 = o0 + _span4(out)
    for t in tensors:
        t0 = t.data_ptr()
        if t0 < o1 and (not t.numel() or o0 < t0 + _span4(t)):
            return False
    return True


def _decode_shape(q: torch.Tensor, k: torch.Tensor, config: DecodeConfig | None = None, *,
                  num_sms: int | None = None, max_shared: int | None = None) -> _DecodeShape:
    """The packed-row tiling of a kvcache call and its launch config (``config``, else
    :func:`decode_config`'s for ``num_sms`` SMs of ``max_shared`` bytes per block; None:
    q's device's, :func:`_num_sms` and :func:`_max_shared`)."""
    if num_sms is None:
        num_sms = _num_sms(q.device)
    if max_shared is None:
        max_shared = _max_shared(q.device)
    b, h, lq, d = q.shape
    h_kv = k.shape[1]
    kv_group = h // h_kv
    rows = kv_group * lq
    block_m = min(DECODE_MAX_BLOCK_M, block_dim(rows))
    row_blocks = _cdiv(rows, block_m)
    programs = b * h_kv * row_blocks
    cfg = config or decode_config(d, block_m, programs, num_sms, max_shared)
    limits = (_split_limit(programs, False, cfg.block_n, num_sms),
              _split_limit(programs, True, cfg.block_n, num_sms))
    return _DecodeShape(kv_group, block_m, row_blocks, block_dim(d), cfg, programs, num_sms,
                        limits)


def _plan_key(splits: int, l_max: int, kst: tuple[int, ...], vst: tuple[int, ...],
              q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out_aligned: bool,
              seqused_k: torch.Tensor | None) -> tuple[Any, ...]:
    """A :class:`_DecodePlan`'s key within its signature: the split count, what Triton
    specializes of L_max and k's strides ``kst`` (int_class: below 2^31, 1, a multiple of 16;
    all are ints in [0, 2^63)), whether v's strides ``vst`` equal them, each tensor's 16-byte
    alignment (the output's is ``out_aligned``) and seqused_k's layout (the kernel gets a
    contiguous copy of a strided one). Unrolled: a decode step calls this once per layer."""
    s0, s1, s2, s3 = kst
    return (splits, l_max < INT32_LIMIT, l_max == 1, l_max % 16 == 0,
            s0 < INT32_LIMIT, s0 == 1, s0 % 16 == 0, s1 < INT32_LIMIT, s1 == 1,
            s1 % 16 == 0, s2 < INT32_LIMIT, s2 == 1, s2 % 16 == 0, s3 < INT32_LIMIT,
            s3 == 1, s3 % 16 == 0, kst == vst,
            q.data_ptr() & 15 == 0, k.data_ptr() & 15 == 0, v.data_ptr() & 15 == 0,
            out_aligned, None if seqused_k is None else (
                seqused_k.is_contiguous(), seqused_k.data_ptr() & 15 == 0))


def kvcache_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    seqused_k: torch.Tensor | None, *, causal: bool, scale: float | None,
                    enable_gqa: bool, num_splits: int | None, return_lse: bool,
                    out: torch.Tensor | None = None, config: DecodeConfig | None = None,
                    bshd: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`flashrepro.attention_kvcache`'s eager call: validate, launch the decode kernel
    (one launch: with more than one split it merges the parts itself), return (o, lse or
    None). ``config`` replaces :func:`decode_config`'s choice (for tuning). ``bshd`` (with
    ``out`` None): o is returned as a new contiguous (B, Lq, H, D) tensor, the layout
    transformers' attention functions return, without the checks an ``out`` takes.

    Host cost (a decode step calls this once per layer). A call whose
    :func:`_kvcache_signature` passed the checks before skips them (only ``out``'s memory is
    checked again). Its kernels then launch from one of the signature's plans
    (:class:`_DecodePlan`), keyed by the split count and the Triton specialization of the
    caches' strides and L_max and of each tensor's alignment: the kernel's arguments are the
    plan's with this call's strides and L_max put in, so a cache that grows by a token per call
    (transformers' DynamicCache: new shape and strides each time) still launches from its plan.
    Other calls launch through :func:`flashrepro.direct.launch`, which makes the plan."""
    key = _kvcache_signature(q, k, v, seqused_k, causal, scale, enable_gqa, num_splits,
                             return_lse, out, bshd)
    shape = _CHECKED_KVCACHE.get(key) if key is not None else None
    checked = shape is not None and (out is None or not out.numel() or (
        _disjoint(out, q, k, v)
        and (seqused_k is None or not _byte_ranges_meet(out, seqused_k))))
    if not checked:
        validate_kvcache(q, k, v, seqused_k, causal=causal, scale=scale, enable_gqa=enable_gqa,
                         num_splits=num_splits, return_lse=return_lse)
    b, h, lq, d = q.shape
    l_max = k.shape[2]
    o: torch.Tensor | None  # (B, H, Lq, D): made for the full launch only where bshd
    if not checked:
        lengths = {} if seqused_k is None else {"seqused_k": seqused_k}
        result = (check_out(out, q, q=q, k=k, v=v, **lengths) if out is not None or not bshd
                  else q.new_empty((b, lq, h, d)))
        if key is not None and config is None and k.shape[1] and lq:
            if len(_CHECKED_KVCACHE) >= MAX_PLANS:
                _CHECKED_KVCACHE.clear()
            shape = _CHECKED_KVCACHE[key] = _decode_shape(q, k)  # the plan below joins it
        o = result.transpose(1, 2) if bshd and out is None else result
    elif out is not None:
        o = result = out
    elif bshd:
        o, result = None, q.new_empty((b, lq, h, d))
    else:
        o = result = q.new_empty((b, h, lq, d))
    if out is not None:
        increment_version(out)
    lse = q.new_empty((b, h, lq), dtype=torch.float32) if return_lse else None
    if not (b and h and lq and d) or l_max == 0:  # nothing to compute, or no key for any row
        result.zero_()
        if lse is not None:
            lse.fill_(float("-inf"))
        return result, lse
    if shape is None or config is not None:
        shape = _decode_shape(q, k, config)
    cfg, block_d = shape.config, shape.block_d
    splits = num_splits or shape.splits(l_max)
    kst = k.stride()
    plan_key = None
    if key is not None and config is None:
        s2, s3 = kst[2], kst[3]
        plan_key = _plan_key(splits, l_max, kst, v.stride(), q, k, v,
                             result.data_ptr() & 15 == 0, seqused_k)
        plan = shape.plans.get(plan_key)
        # fits_int32(k, (2, block_n), (3, block_d)), unrolled
        if plan is not None and (l_max <= 1 or s2 >= INT32_LIMIT
                                 or s2 * cfg.block_n < INT32_LIMIT) and (
                d <= 1 or s3 >= INT32_LIMIT or s3 * block_d < INT32_LIMIT):
            _launch_plan(plan, q, k, v, seqused_k, result, lse, kst, l_max)
            return result, lse
    if o is None:
        o = result.transpose(1, 2)
    # Head-dim offsets are int32, and K and V share one set of int32 tile offsets.
    q_kernel = q if fits_int32(q, (3, block_d)) else q.contiguous()
    o_kernel = (o if fits_int32(o, (3, block_d))
                else torch.empty(o.shape, dtype=o.dtype, device=o.device))
    if k.stride() != v.stride() or not all(
            fits_int32(t, (2, cfg.block_n), (3, block_d)) for t in (k, v)):
        k, v = k.contiguous(), v.contiguous()
        plan_key = None
    if q_kernel is not q or o_kernel is not o:
        plan_key = None
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    seqused = seqused_k.contiguous() if seqused_k is not None else q_kernel  # never touched
    h_kv = k.shape[1]
    grid = (b * h_kv, shape.row_blocks, splits)
    parts_numel = b * h * lq * splits * (d + 1) if splits > 1 else 0
    if parts_numel:
        locks, parts = stream_buffers(q.device, grid[0] * grid[1], parts_numel)
    else:
        parts, locks = q_kernel, seqused  # never touched without splits
    decode_call = KernelCall(decode_fwd_kernel, grid, (
        q_kernel, k, v, o_kernel, lse if lse is not None else q_kernel, seqused, parts, locks,
        *q_kernel.stride(), *k.stride(), *o_kernel.stride(),
        *(lse.stride() if lse is not None else (0, 0, 0)),
        h_kv, shape.kv_group, lq, l_max, splits, sm_scale * LOG2_E), dict(
        HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=shape.block_m, BLOCK_N=cfg.block_n,
        CAUSAL=causal, SPLIT=splits > 1, STORE_LSE=lse is not None,
        HAS_SEQUSED=seqused_k is not None, MERGE_S=MERGE_BLOCK_S,
        MERGE_R=max(1, MERGE_ELEMENTS // (MERGE_BLOCK_S * block_d)),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    decode = launch(decode_call, _IO, (_mma_v3_switch(),))
    if o_kernel is not o:
        o.copy_(o_kernel)
    if plan_key is not None and decode is not None:
        if len(shape.plans) >= MAX_PLANS:
            shape.plans.clear()
        values = decode_call.ordered_values()
        assert values is not None
        shape.plans[plan_key] = _DecodePlan(decode, grid, tuple(values[_IO:]), parts_numel,
                                            grid[0] * grid[1])
    return result, lse


def _launch_plan(plan: _DecodePlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 seqused_k: torch.Tensor | None, o: torch.Tensor, lse: torch.Tensor | None,
                 kst: tuple[int, ...], l_max: int) -> None:
    """Run ``plan`` on a call of its key (checked by :func:`kvcache_forward`). Only the
    tensors' addresses go in: ``o`` may be any tensor at the output's address (the (B, Lq, H,
    D) tensor of a ``bshd`` call)."""
    seqused_k = seqused_k.contiguous() if seqused_k is not None else q  # never touched
    if plan.parts:
        locks, parts = stream_buffers(q.device, plan.locks, plan.parts)
    else:
        parts, locks = q, seqused_k  # never touched without splits
    plan.decode.on_stream(plan.grid, q.get_device(), (
        q, k, v, o, lse if lse is not None else q, seqused_k, parts, locks), (
        *plan.before, *kst, *plan.between, l_max, *plan.after))


def varlen_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                   max_seqlen_q: int, max_seqlen_k: int, *, causal: bool,
                   scale: float | None, return_lse: bool, seqused_k: torch.Tensor | None,
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`flashrepro.attention_varlen`'s eager call: validate, launch, return (o, lse or
    None); o (total_q, H, D) in q's dtype, lse (H, total_q) float32."""
    validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    causal=causal, scale=scale, return_lse=return_lse, seqused_k=seqused_k)
    total_q, h, d = q.shape
    total_k, h_kv = k.shape[0], k.shape[1]
    batch = cu_seqlens_q.shape[0] - 1
    o = torch.empty((total_q, h, d), dtype=q.dtype, device=q.device)
    lse = (torch.empty((h, total_q), dtype=torch.float32, device=q.device) if return_lse
           else None)
    if o.numel() == 0 or batch == 0 or max_seqlen_q == 0:
        return o, lse
    if total_k == 0:  # no key for any row
        o.zero_()
        if lse is not None:
            lse.fill_(float("-inf"))
        return o, lse
    cfg = varlen_config(d)
    block_d = block_dim(d)
    if not fits_int32(q, (2, block_d)):
        q = q.contiguous()
    if k.stride() != v.stride() or not all(
            fits_int32(t, (0, cfg.block_n), (2, block_d)) for t in (k, v)):
        k, v = k.contiguous(), v.contiguous()
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    lse_arg = lse if lse is not None else _lse_dummy(q.device)
    used = seqused_k.contiguous() if seqused_k is not None else cu_seqlens_k
    # B·H on gridDim.x: y and z stop at 65535
    launch(KernelCall(varlen_fwd_kernel, (batch * h, _cdiv(max_seqlen_q, cfg.block_m)), (
        q, k, v, o, lse_arg, cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(), used,
        *q.stride(), *k.stride(), *o.stride(), lse_arg.stride(0),
        h, h // h_kv, total_q, total_k, sm_scale * LOG2_E), dict(
        HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=causal,
        STORE_LSE=lse is not None, HAS_SEQUSED_K=seqused_k is not None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)), 8, (_mma_v3_switch(),))
    return o, lse
