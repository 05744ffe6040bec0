"""Input validation for the attention entry points: every rule, with the argument it names.

:func:`validate` checks SDPA-style q, k, v and flags; :func:`check_out` an ``out=`` tensor.
Input that the kernels cannot take raises a ``TypeError`` or ``ValueError`` that names the
argument and the rule; nothing reaches Triton unchecked.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Literal

import torch
from torch.autograd import forward_ad
from triton.runtime.jit import JITFunction

from flashrepro.kernels import LOG2_E
from flashrepro.kernels.fwd import attn_fwd_kernel

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256
MAX_PROGRAMS = 2**31 - 1  # CUDA's limit on gridDim.x (one program per head and query block)
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (the article kernel's B·H)
INT32_LIMIT = 2**31  # Triton passes an int argument below this as int32, else as int64
MAX_SCALE = torch.finfo(torch.float32).max / LOG2_E
"""The largest ``scale``: the kernels take scale·log2(e) as a float32 argument (exp2-based
softmax), which is infinite beyond this (every output then NaN, even for zero scores)."""

CausalAlignment = Literal["top_left", "bottom_right"]


def interpreter_mode() -> bool:
    """True when Triton's CPU interpreter is on (``TRITON_INTERPRET=1``).

    The kernels run on the CPU only if it was set before :mod:`flashrepro` was imported
    (Triton picks the interpreter when a kernel is defined).
    """
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _dtype_names() -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def forward_ad_active() -> bool:
    """Whether a ``torch.autograd.forward_ad.dual_level`` is open, so that an input may carry
    a tangent (the launch plans then take the full checks)."""
    return forward_ad._current_level >= 0


def validate(q: object, k: object, v: object, *, scale: float | None, enable_gqa: bool,
             causal_alignment: str, causal: bool = False) -> None:
    """Check SDPA-style inputs; raise with the argument's name and the rule it breaks.

    The rules, in the order they are checked:

    1. ``causal`` and ``enable_gqa`` are bools (TypeError).
    2. q, k and v are dense (strided), not nested ``torch.Tensor`` (TypeError) with 4 dims
       (B, H, L, D) (ValueError), no lazy negation bit (ValueError) and dtype float16 or bfloat16
       (TypeError); all three share one dtype (TypeError).
    3. q, k and v are on one device (ValueError), and it is a CUDA device, or the CPU when the
       kernels run under Triton's interpreter, see :func:`interpreter_mode`, set before the
       kernels were defined at import (ValueError); on the
       CPU only float16, since the interpreter's bfloat16 ``tl.dot`` is wrong (TypeError).
    4. None of them requires grad while autograd is on, nor carries a forward-mode AD tangent
       (``torch.autograd.forward_ad``): the kernel is forward-only, and an output without a
       gradient or tangent would be a silent wrong result (ValueError).
    5. v has k's shape (B, H_kv, Lk, D); k has q's batch B and head dim D (ValueError).
    6. 1 <= D <= 256 (ValueError).
    7. H_kv == H; with ``enable_gqa``, H is a multiple of H_kv >= 1 (or H = H_kv = 0)
       (ValueError).
    8. B·H·cdiv(Lq, 16) <= 2^31 - 1: one program per head and block of 16 or more query rows
       fits CUDA's gridDim.x, also when Lq < 16 (ValueError).
    9. ``scale`` is None or a real number, not a bool (TypeError), finite and >= 0, and at
       most :data:`MAX_SCALE` (about 2.36e38: scale·log2(e) must be finite in float32, the
       kernels' scale argument) (ValueError).
    10. ``causal_alignment`` is ``'top_left'`` or ``'bottom_right'`` (ValueError).

    Sizes of 0 (B, H, Lq or Lk) are valid; :func:`attention` handles them.

    Raises:
        TypeError, ValueError: as listed above.
    """
    _check_flag("causal", causal)
    _check_flag("enable_gqa", enable_gqa)
    tensors = {"q": q, "k": k, "v": v}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        check_readable(name, t)
        if t.layout != torch.strided:
            raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}; "
                            f"pass {name}.to_dense()")
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dims (B, H, L, D), got shape {tuple(t.shape)}")
        if t.is_neg():
            raise ValueError(f"{name} is a view with torch's lazy negation bit set (e.g. the "
                             "imaginary part of a conjugate), which the kernel cannot read; "
                             f"pass {name}.resolve_neg()")
        if t.dtype not in SUPPORTED_DTYPES:
            where = " (bfloat16 on a GPU only)" if t.device.type == "cpu" else ""
            raise TypeError(f"{name} has dtype {t.dtype}; supported dtypes: {_dtype_names()}"
                            f"{where}")
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
    assert isinstance(v, torch.Tensor)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, "
                         f"{v.device}")
    if q.device.type == "cpu" and not interpreter_mode():
        raise ValueError("q, k and v are CPU tensors, but the kernels run on CUDA devices; for "
                         "Triton's CPU interpreter set TRITON_INTERPRET=1 before importing "
                         "flashrepro")
    if q.device.type == "cpu" and isinstance(attn_fwd_kernel, JITFunction):
        raise ValueError("q, k and v are CPU tensors and TRITON_INTERPRET=1 is set, but it was "
                         "set after flashrepro was imported: the kernels were defined for a GPU "
                         "(Triton would fail with '0 active drivers'); set TRITON_INTERPRET=1 "
                         "before the first import of flashrepro, e.g. TRITON_INTERPRET=1 python "
                         "script.py")
    if q.device.type not in ("cuda", "cpu"):
        raise ValueError(f"q, k and v must be CUDA tensors (or CPU tensors under "
                         f"TRITON_INTERPRET=1), got device {q.device}")
    if q.device.type == "cpu" and q.dtype == torch.bfloat16:
        raise TypeError("q, k and v are bfloat16 CPU tensors: Triton's interpreter computes "
                        "bfloat16 tl.dot wrongly (upstream triton issue 11584); use float16 on "
                        "the CPU, bfloat16 on a GPU")
    if torch.is_grad_enabled():
        for name, t in tensors.items():
            if t.requires_grad:
                raise ValueError(f"{name} requires grad, but flashrepro's attention is "
                                 "forward-only (no autograd); call it under torch.no_grad() "
                                 f"or torch.inference_mode(), or pass {name}.detach()")
    if forward_ad_active():
        for name, t in tensors.items():
            if forward_ad.unpack_dual(t).tangent is not None:
                raise ValueError(f"{name} carries a forward-mode AD tangent "
                                 "(torch.autograd.forward_ad.make_dual), but flashrepro's "
                                 "attention is forward-only (no forward-AD formula); pass "
                                 f"forward_ad.unpack_dual({name}).primal")
    (b, h, _, d), (bk, hk, _, dk) = q.shape, k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"v must have k's shape (B, H_kv, Lk, D) = {tuple(k.shape)}, "
                         f"got {tuple(v.shape)}")
    if bk != b:
        raise ValueError(f"k and v must have q's batch size B={b}, got {bk}")
    if dk != d:
        raise ValueError(f"k and v must have q's head dim D={d}, got {dk}")
    if d > MAX_HEAD_DIM or d < 1:
        raise ValueError(f"head dim D must be in 1..{MAX_HEAD_DIM}, got {d}")
    if enable_gqa:
        if (hk < 1 or h % hk != 0) and h + hk > 0:
            raise ValueError(f"with enable_gqa, q's heads H={h} must be a multiple of k/v's "
                             f"heads H_kv={hk}")
    elif hk != h:
        raise ValueError(f"k and v must have q's head count H={h}, got {hk}" + (
            " (pass enable_gqa=True for grouped-query attention)" if hk and h % hk == 0 else ""))
    programs = b * h * -(-q.shape[2] // 16)  # grid of the smallest query block, 16 rows
    if programs > MAX_PROGRAMS:
        raise ValueError(f"B·H·cdiv(Lq, 16) = {programs} exceeds CUDA's launch limit of "
                         f"{MAX_PROGRAMS} programs (one per head and query block; blocks may "
                         "be as small as 16 rows)")
    check_scale_and_alignment(scale, causal_alignment)


def check_scale_and_alignment(scale: object, causal_alignment: object) -> None:
    """Rules 9 and 10 of :func:`validate`, which need no tensor (also checked while tracing).

    Raises:
        TypeError, ValueError: :func:`check_scale`'s; ValueError: ``causal_alignment`` not
            one of the two.
    """
    check_scale(scale)
    if causal_alignment not in ("top_left", "bottom_right"):
        raise ValueError("causal_alignment must be 'top_left' (SDPA's is_causal) or "
                         f"'bottom_right', got {causal_alignment!r}")


def check_scale(scale: object) -> None:
    """Rule 9 of :func:`validate` (also checked while tracing, on a ``scale`` that
    ``torch.compile`` made symbolic too).

    Raises:
        TypeError: ``scale`` not None or a real number, or a bool.
        ValueError: ``scale`` not finite, below 0 or above :data:`MAX_SCALE`.
    """
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise TypeError(f"scale must be None or a real number, got {type(scale).__name__}")
    if scale is not None:
        # comparisons only (no math.isfinite): dynamo traces them on a scale it made symbolic,
        # and an int beyond float's range compares without overflowing; NaN fails >= 0
        if not scale >= 0 or scale == math.inf:
            raise ValueError(f"scale must be a finite number >= 0, got {scale}")
        if scale > MAX_SCALE:
            raise ValueError(f"scale must be at most {MAX_SCALE:.6g}, so that scale·log2(e) "
                             f"is finite in float32 (the kernels' scale argument), got {scale}")



def check_readable(name: str, t: torch.Tensor) -> None:
    """Refuse a tensor whose elements do not lie at its data pointer as its strides say: a
    nested tensor (``torch.nested``, strided or jagged: its rows have their own lengths, which
    the (B, H, L, D) kernels cannot take), or a ZeroTensor (autograd's storage-less zeros,
    ``torch._efficientzerotensor``: its data pointer is null).

    Raises:
        TypeError: ``t`` is nested; ValueError: ``t`` is a ZeroTensor; naming it as ``name``.
    """
    if t.is_nested:
        raise TypeError(f"{name} must not be a nested tensor (torch.nested, layout "
                        f"{t.layout}): the kernels take dense (B, H, L, D) tensors; pad it, "
                        f"e.g. {name}.to_padded_tensor(0.0)")
    if not torch.compiler.is_compiling() and t._is_zerotensor():
        raise ValueError(f"{name} is a ZeroTensor (autograd's zeros without memory), which the "
                         f"kernels cannot read or write; pass torch.zeros_like({name})")


def _overlaps_itself(t: torch.Tensor) -> bool:
    """True unless t's strides provably give every element its own address.

    A conservative test: with the dims of size > 1 sorted by stride, each stride must exceed
    the largest offset the smaller-stride dims reach (some exotic interleaved layouts that do
    not overlap fail it too).
    """
    if t.numel() == 0:
        return False
    reach = 0
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape, strict=True)
                               if sz > 1):
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def check_out_like(out: object, like: torch.Tensor) -> torch.Tensor:
    """`out` checked for type, shape, dtype and device against q (`like`), and refused where it
    requires grad while autograd is on, or is an inference tensor outside inference mode (as
    torch's own out= ops do): all that can be checked while tracing (``torch.compile`` writes
    ``out`` by a copy of the op's output)."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
    check_readable("out", out)
    if out.layout != torch.strided:
        raise ValueError(f"out must be a dense (strided) tensor, got layout {out.layout}")
    if out.shape != like.shape or out.dtype != like.dtype or out.device != like.device:
        raise ValueError(f"out must match q's shape {tuple(like.shape)}, dtype {like.dtype} "
                         f"and device {like.device}; got {tuple(out.shape)}, {out.dtype}, "
                         f"{out.device}")
    if out.requires_grad and torch.is_grad_enabled():
        raise ValueError("out requires grad, but flashrepro's attention is forward-only and "
                         "writes out in place; pass a tensor that does not require grad")
    if (not torch.compiler.is_compiling()  # dynamo cannot trace is_inference()
            and out.is_inference() and not torch.is_inference_mode_enabled()):
        raise ValueError("out is an inference tensor, written in place outside "
                         "torch.inference_mode(), which torch forbids; call under "
                         "inference_mode or pass another tensor")
    return out


def check_traced_out(out: object, like: torch.Tensor) -> torch.Tensor:
    """:func:`check_out_like`, and outside ``torch.compile`` (where strides may be symbolic)
    :func:`check_out`'s rule that ``out`` not overlap itself: the operator path writes ``out``
    by ``copy_``, which would raise the dispatcher's RuntimeError instead."""
    out = check_out_like(out, like)
    if not torch.compiler.is_compiling():
        _refuse_self_overlap(out)
    return out


def _refuse_self_overlap(out: torch.Tensor) -> None:
    if _overlaps_itself(out):
        raise ValueError(f"out must not overlap itself (each element its own memory), got "
                         f"strides {out.stride()} for shape {tuple(out.shape)}")


def check_out(out: object, like: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
    """`out`, checked against q (`like`) and the inputs it must not share memory with (the
    kernel writes it while other programs still read them); a fresh buffer when None."""
    if out is None:
        return torch.empty(like.shape, dtype=like.dtype, device=like.device)
    out = check_out_like(out, like)
    if out.is_neg():  # under tracing the op's output is copied in, which honours the bit
        raise ValueError("out must not carry torch's lazy negation bit: the kernel writes its "
                         "memory as stored; pass a plain tensor")
    _refuse_self_overlap(out)
    for name, t in inputs.items():
        same_view = (name == "q" and out.data_ptr() == t.data_ptr()
                     and out.stride() == t.stride())
        if not same_view and _byte_ranges_meet(out, t):
            raise ValueError(f"out must not share memory with {name} (other programs may still "
                             f"read it); out=q itself is allowed")
    return out


def byte_span(t: torch.Tensor) -> int:
    """Bytes from ``t``'s first element to one past its last (``t`` not empty)."""
    last = sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True))
    return (last + 1) * t.element_size()


def _byte_ranges_meet(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a and b may share an element (the check of ``out`` against q, k and v).

    Interleaved views of one buffer that share no element (q and out as heads 0 and 3 of one
    (B, L, H, D) tensor, say) pass; their byte spans meet, so a span test would refuse them.
    For views of one element size whose base addresses differ by whole elements the test is
    exact (:func:`_offsets_meet`); otherwise, or where the search would grow too large, it is
    the conservative span test.
    """
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + byte_span(a), b0 + byte_span(b)
    if not (a0 < b1 and b0 < a1):
        return False
    size = a.element_size()
    if b.element_size() != size or (b0 - a0) % size:
        return True
    meet = _offsets_meet((b0 - a0) // size, list(zip(a.stride(), a.shape, strict=True)),
                         list(zip(b.stride(), b.shape, strict=True)))
    return True if meet is None else meet


def _offsets_meet(delta: int, dims_a: list[tuple[int, int]], dims_b: list[tuple[int, int]],
                  budget: int = 4096) -> bool | None:
    """Whether sum(i·s over dims_a) == delta + sum(j·s over dims_b) has a solution with every
    index inside its dim; None when the search would take more than ``budget`` steps.

    Both index sets are folded into one per distinct stride s: the difference i - j ranges
    over [-(n_b - 1), n_a - 1]. From the largest stride down, each difference c must leave a
    remainder that the smaller strides can still reach; typical layouts leave one or two c
    per stride.
    """
    ranges: dict[int, list[int]] = {}  # stride -> [lowest, highest] difference (torch strides >= 0)
    for s, n in dims_a:
        if n > 1:
            ranges.setdefault(s, [0, 0])[1] += n - 1
    for s, n in dims_b:
        if n > 1:
            ranges.setdefault(s, [0, 0])[0] -= n - 1
    dims = sorted(ranges.items(), reverse=True)
    reach = [0] * (len(dims) + 1)  # reach[k]: max |sum| of dims k.. (smaller strides)
    for k in range(len(dims) - 1, -1, -1):
        s, (lo, hi) = dims[k]
        reach[k] = reach[k + 1] + s * max(-lo, hi)
    steps = 0

    def search(k: int, rest: int) -> bool | None:
        nonlocal steps
        steps += 1
        if steps > budget:
            return None
        if k == len(dims):
            return rest == 0
        s, (lo, hi) = dims[k]
        if s == 0:
            return search(k + 1, rest)
        first = max(lo, -((reach[k + 1] - rest) // s))  # ceil((rest - reach) / s)
        last = min(hi, (rest + reach[k + 1]) // s)
        for c in range(first, last + 1):
            found = search(k + 1, rest - c * s)
            if found is None or found:
                return found
        return False

    return search(0, delta)

