"""The public, torch-style entry points: input validation, then the kernel launch.

:func:`attention` mirrors ``torch.nn.functional.scaled_dot_product_attention`` (same layout,
same meaning of ``is_causal``/``causal``, ``scale`` and ``enable_gqa``) for the cases a
FlashAttention forward kernel covers: no dropout, no arbitrary ``attn_mask``, no autograd.
Input that the kernel cannot take raises a ``TypeError`` or ``ValueError`` that names the
argument and the rule (:func:`validate`); nothing reaches Triton unchecked.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
from typing import Literal

import torch
import triton
from triton.runtime.jit import JITFunction
from triton.tools.tensor_descriptor import TensorDescriptor

from flashrepro.configs import (
    ARTICLE,
    NAMED,
    TRITON_FALLBACK,
    KernelConfig,
    default_config,
    launch_arch,
)
from flashrepro.kernels import fwd_gluon, fwd_gluon_ws
from flashrepro.kernels.article import article_fwd_kernel
from flashrepro.kernels.fwd import attn_fwd_kernel

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256
MAX_PROGRAMS = 2**31 - 1  # CUDA's limit on gridDim.x (one program per head and query block)
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (the article kernel's B·H)
INT32_LIMIT = 2**31  # Triton passes an int argument below this as int32, else as int64
LOG2_E = 1.4426950408889634

CausalAlignment = Literal["top_left", "bottom_right"]


def interpreter_mode() -> bool:
    """True when Triton's CPU interpreter is on (``TRITON_INTERPRET=1``).

    The kernels run on the CPU only if it was set before :mod:`flashrepro` was imported
    (Triton picks the interpreter when a kernel is defined); the SASS tool sets it around a
    recorded launch of JIT kernels (:mod:`flashrepro.analysis.offline_compile`), with
    :data:`RECORD_LAUNCH_ENV` set.
    """
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


RECORD_LAUNCH_ENV = "FLASHREPRO_RECORD_LAUNCH"
"""Set to 1 by the SASS tool while it records a launch of JIT kernels on CPU tensors."""


def _dtype_names() -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def validate(q: object, k: object, v: object, *, scale: float | None, enable_gqa: bool,
             causal_alignment: str, causal: bool = False) -> None:
    """Check SDPA-style inputs; raise with the argument's name and the rule it breaks.

    The rules, in the order they are checked:

    1. ``causal`` and ``enable_gqa`` are bools (TypeError).
    2. q, k and v are ``torch.Tensor`` (TypeError) with 4 dims (B, H, L, D) (ValueError) and
       dtype float16 or bfloat16 (TypeError); all three share one dtype (TypeError).
    3. q, k and v are on one device (ValueError), and it is a CUDA device, or the CPU when the
       kernels run under Triton's interpreter, see :func:`interpreter_mode`, set before the
       kernels were defined at import (ValueError); on the
       CPU only float16, since the interpreter's bfloat16 ``tl.dot`` is wrong (TypeError).
    4. None of them requires grad while autograd is on: the kernel is forward-only, and an
       output without a gradient would be a silent wrong result in training (ValueError).
    5. v has k's shape (B, H_kv, Lk, D); k has q's batch B and head dim D (ValueError).
    6. 1 <= D <= 256 (ValueError).
    7. H_kv == H; with ``enable_gqa``, H is a multiple of H_kv >= 1 (or H = H_kv = 0)
       (ValueError).
    8. B·H·cdiv(Lq, 16) <= 2^31 - 1: one program per head and block of 16 or more query rows
       fits CUDA's gridDim.x, also when Lq < 16 (ValueError).
    9. ``scale`` is None or a real number, not a bool (TypeError), finite and >= 0
       (ValueError).
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
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dims (B, H, L, D), got shape {tuple(t.shape)}")
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
    if (q.device.type == "cpu" and isinstance(attn_fwd_kernel, JITFunction)
            and os.environ.get(RECORD_LAUNCH_ENV) != "1"):
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
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise TypeError(f"scale must be None or a real number, got {type(scale).__name__}")
    if scale is not None and not (math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale}")
    if causal_alignment not in ("top_left", "bottom_right"):
        raise ValueError("causal_alignment must be 'top_left' (SDPA's is_causal) or "
                         f"'bottom_right', got {causal_alignment!r}")


def _resolve_config(config: KernelConfig | str | None, head_dim: int, causal: bool,
                    seqlen_q: int, device: torch.device) -> KernelConfig:
    if isinstance(config, KernelConfig):
        return config
    if config is None:
        return default_config(head_dim, causal, seqlen_q, launch_arch(device))
    if not isinstance(config, str):
        raise TypeError(f"config must be a KernelConfig, a name from {sorted(NAMED)} or None, "
                        f"got {type(config).__name__}")
    if config in NAMED:
        return NAMED[config]
    raise ValueError(f"config must be a KernelConfig or one of {sorted(NAMED)}, got {config!r}")


def _tma_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
            lk: int) -> bool:
    """Whether Hopper's TMA can address all four tensors: sm_90+ (or the interpreter), a
    contiguous last dim, 16-byte aligned base and strides, no zero strides, Lk >= 1."""
    if lk < 1:
        return False
    if q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] < 9:
        return False
    for t in (q, k, v, o):
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any(s == 0 or (s * t.element_size()) % 16 for s in t.stride()[:-1]):
            return False
    return True


def _overlap_ok(q: torch.Tensor, d: int, causal: bool, causal_offset: int) -> bool:
    """Whether the Gluon kernel (``KernelConfig.overlap``) applies, given TMA does: sm_90's
    wgmma code path, fp16/bf16, D 64 or 128, and no query row without keys (its running max
    must leave -inf at the first key block)."""
    return (q.device.type == "cuda" and launch_arch(q.device) == 90
            and q.dtype in (torch.float16, torch.bfloat16) and d in (64, 128)
            and (not causal or causal_offset >= 0))


def _heads_per_group(bh: int, lk: int, d: int, q: torch.Tensor) -> int:
    """(Batch, head) pairs per scheduling group: as many as have K and V in half of L2.

    The kernel runs a group's query blocks heaviest first across its heads; see the program
    order comment in :mod:`flashrepro.kernels.fwd`. Off a GPU (interpreter) L2 is taken as
    50 MiB, the H100/H200 figure's order of magnitude.
    """
    l2_bytes = (torch.cuda.get_device_properties(q.device).L2_cache_size
                if q.device.type == "cuda" else 50 * 2**20)
    kv_bytes_per_head = 2 * max(lk, 1) * d * q.element_size()
    return max(1, min(bh, (l2_bytes // 2) // kv_bytes_per_head))


def _num_sms(q: torch.Tensor) -> int:
    """SMs of ``q``'s GPU: the persistent kernel's grid (one program per SM). Off a GPU (the
    offline compile records a launch without running it) the H100/H200 figure, 132."""
    return (torch.cuda.get_device_properties(q.device).multi_processor_count
            if q.device.type == "cuda" else 132)


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


def _check_out(out: object, like: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
    """`out`, checked against q (`like`) and the inputs it must not share memory with."""
    if out is None:
        return torch.empty(like.shape, dtype=like.dtype, device=like.device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
    if out.shape != like.shape or out.dtype != like.dtype or out.device != like.device:
        raise ValueError(f"out must match q's shape {tuple(like.shape)}, dtype {like.dtype} "
                         f"and device {like.device}; got {tuple(out.shape)}, {out.dtype}, "
                         f"{out.device}")
    if _overlaps_itself(out):
        raise ValueError(f"out must not overlap itself (each element its own memory), got "
                         f"strides {out.stride()} for shape {tuple(out.shape)}")
    for name, t in inputs.items():
        same_view = (name == "q" and out.data_ptr() == t.data_ptr()
                     and out.stride() == t.stride())
        if not same_view and _byte_ranges_meet(out, t):
            raise ValueError(f"out must not share memory with {name} (other programs may still "
                             f"read it); out=q itself is allowed")
    return out


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
    def span(t: torch.Tensor) -> tuple[int, int]:
        last = sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()
    (a0, a1), (b0, b1) = span(a), span(b)
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


def _fits_int32(t: torch.Tensor, *dim_blocks: tuple[int, int]) -> bool:
    """True if offset·stride stays below 2^31 for each (dim, block) of t.

    The kernel forms the row offsets of q and o in int64, but the head-dim offsets
    (< BLOCK_D) of every tensor and the key/value row offsets (<= BLOCK_N) as index·stride
    in int32; a stride of 2^31 or more arrives as int64 and is safe. Dims of size <= 1 are
    never stepped along.
    """
    return all(t.shape[dim] <= 1 or t.stride(dim) >= INT32_LIMIT
               or t.stride(dim) * block < INT32_LIMIT for dim, block in dim_blocks)


def _on_device(device: torch.device) -> contextlib.AbstractContextManager:
    """Launch on the tensors' GPU, not on torch's current one (Triton uses the current one)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    causal_alignment: CausalAlignment = "top_left",
    return_lse: bool = False,
    config: KernelConfig | str | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, forward only: ``softmax(q·kᵀ·scale + mask)·v``.

    Same answer as ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=scale, enable_gqa=enable_gqa)`` (its math backend, in float32
    or better), or a clear error; the points where SDPA itself is ill-defined are stated below.

    Args:
        q: (B, H, Lq, D) float16 or bfloat16, on a CUDA device (or the CPU when the kernels
            run under Triton's interpreter, ``TRITON_INTERPRET=1`` set before import). Any
            strides: transposed views such as a (B, L, H, D) tensor's ``transpose(1, 2)``,
            slices with a head-dim stride != 1, broadcast (stride 0) dims. 1 <= D <= 256;
            D need not be a power of two (the kernel pads it to one and masks).
        k: (B, H_kv, Lk, D), q's dtype and device, any strides. H_kv = H unless
            ``enable_gqa``.
        v: (B, H_kv, Lk, D), like k.
        causal: apply a causal mask. With the default ``causal_alignment='top_left'`` query row
            i sees key j iff j <= i, exactly SDPA's ``is_causal`` (also when Lq != Lk).
        scale: softmax scale (SDPA's ``scale``; often called sm_scale); default 1/sqrt(D).
            Must be finite and >= 0; 0 gives the plain mean of the visible values.
        enable_gqa: allow H to be a multiple of H_kv (grouped-query attention, as in Qwen3):
            query head h reads key/value head h // (H / H_kv), as SDPA's ``enable_gqa``.
        causal_alignment: ``'bottom_right'`` aligns the mask to the last key instead: row i sees
            key j iff j <= i + Lk - Lq (FlashAttention-2's convention and KV-cache decoding,
            ``torch.nn.attention.bias.causal_lower_right``). A row that sees no key (i <
            Lq - Lk) gets output 0 and LSE -inf, never NaN.
        return_lse: also return the log-sum-exp of each row's scaled, masked scores (natural
            log), float32.
        config: a :class:`~flashrepro.configs.KernelConfig`, a name from
            ``flashrepro.configs.NAMED`` (``'article'``, ``'p-in-registers'``,
            ``'fa3-overlap'``, ``'fa3-ws'``, ``'fa3-ws3'``), or None for the per-arch default
            (:func:`~flashrepro.configs.default_config`). A given Gluon config
            (``overlap=True``) that cannot run the call runs the Triton kernel at its tiles;
            a default that is one, or a 192-row tile (``'fa3-ws3'``: D = 64 only), runs it
            at :data:`~flashrepro.configs.TRITON_FALLBACK`.
        out: optional (B, H, Lq, D) tensor of q's dtype and device to write the output into;
            any strides whose elements do not overlap. It must share no element with k, v or
            q (``out = q`` itself is allowed); interleaved views of one buffer that share no
            element are accepted.

    Returns:
        o, (B, H, Lq, D) in q's dtype (``out`` when given); with ``return_lse``, also lse,
        (B, H, Lq) float32.

    Edge cases:
        * Sizes of 0: B, H or Lq = 0 gives an empty o (and lse); Lk = 0 gives o = 0 and
          lse = -inf, as SDPA's zeros.
        * Non-finite inputs propagate as in SDPA's math backend for every row that sees them:
          a NaN or inf in q row i makes row i NaN; a NaN in k row j makes every row that sees
          key j NaN; an inf in k row j gives each such row a score of +-inf (+inf: NaN row,
          -inf: key j gets weight 0); a NaN/inf in v row j makes the column NaN/inf in every
          row that sees key j. Without a causal mask every row sees every key, so o matches
          SDPA's math backend element for element (NaN and inf positions). Under a causal mask
          the math backend also turns rows that do *not* see key j into NaN (it adds the mask
          as a -inf bias to a NaN score, and multiplies a masked probability 0 by an inf/NaN
          value); here such rows keep their finite, correct value, except that a non-finite
          value row can still make the rows of its BLOCK_M x BLOCK_N diagonal tile NaN
          (0·inf in the tile's P·V product). A row that sees keys whose scores are all -inf
          is NaN, as SDPA's softmax; one known difference: a row whose first unmasked
          BLOCK_N keys all score -inf (BLOCK_N infinite key rows) is NaN even if later keys
          are finite. The lse of a row with a NaN or +inf score is NaN.
        * Large magnitudes: scores are accumulated and scaled in float32, so scores beyond the
          float16 range (e.g. q, k ~ 100 at D = 64) stay finite. Not without bound in the
          Gluon kernels (sm_90): from scaled scores of about 2^28 (|q·k| ~ 2·10^9 at
          D = 128) float32's spacing there lets an unmasked block's P exceed 1 by its
          rounding, and float16 P can overflow (reproduce/NOTES.md, experiment 22's review).
        * Strides: k and v of different strides are read through contiguous copies (the
          kernel shares one set of tile offsets). Tensors of more than 2^31 elements are
          addressed with int64 offsets; an input whose head-dim stride (or key/value row
          stride) times the block size would overflow int32 is copied to a contiguous layout
          first, and an ``out`` like that is written through a contiguous buffer.

    Raises:
        TypeError, ValueError: bad inputs, see :func:`validate`; ``return_lse`` not a bool
            (TypeError); ``out`` not a tensor (TypeError), of another shape, dtype or device
            than q, or overlapping itself (ValueError); ``config`` not a KernelConfig, str or
            None (TypeError), an unknown config name, or a config whose tiles do not fit the
            GPU's shared memory (ValueError).
    """
    validate(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
             causal_alignment=causal_alignment)
    _check_flag("return_lse", return_lse)
    b, h, lq, d = q.shape
    lk = k.shape[2]
    o = _check_out(out, q, q=q, k=k, v=v)
    cfg = _resolve_config(config, d, causal, lq, q.device)
    lse = torch.empty((b, h, lq), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return (o, lse) if return_lse else o
    if lk == 0:  # no keys: SDPA's zeros; the kernel needs Lk >= 1
        o.zero_()
        lse.fill_(float("-inf"))
        return (o, lse) if return_lse else o
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    causal_offset = lk - lq if causal_alignment == "bottom_right" else 0
    block_d = max(16, triton.next_power_of_2(d))
    if not _fits_int32(q, (3, block_d)):
        q = q.contiguous()
    # The kernel reads K and V with one set of tile offsets, formed in int32.
    if k.stride() != v.stride() or not all(_fits_int32(t, (2, cfg.block_n), (3, block_d))
                                           for t in (k, v)):
        k, v = k.contiguous(), v.contiguous()
    o_kernel = o
    if not _fits_int32(o, (3, block_d)):
        o_kernel = torch.empty(o.shape, dtype=o.dtype, device=o.device)
    use_tma = cfg.tma and _tma_ok(q, k, v, o_kernel, lk)
    use_gluon = use_tma and cfg.overlap and _overlap_ok(q, d, causal, causal_offset)
    if use_gluon and cfg.three_consumers and d != 64:  # its registers hold D = 64 only
        use_gluon = False
    if cfg.overlap and not use_gluon and (config is None or cfg.three_consumers):
        # The table's tiles are the Gluon kernel's, and a 192-row tile only the ws kernel's
        # (see TRITON_FALLBACK).
        cfg = TRITON_FALLBACK
    if use_tma and not use_gluon:
        q_arg, o_arg = (TensorDescriptor.from_tensor(t, [1, 1, cfg.block_m, block_d])
                        for t in (q, o_kernel))
        k_arg, v_arg = (TensorDescriptor.from_tensor(t, [1, 1, cfg.block_n, block_d])
                        for t in (k, v))
    else:
        q_arg, k_arg, v_arg, o_arg = q, k, v, o_kernel
    grid = (b * h * triton.cdiv(lq, cfg.block_m),)
    heads_per_group = _heads_per_group(b * h, lk, d, q)
    try:
        with _on_device(q.device):
            if use_gluon and cfg.warp_specialize:
                fwd_gluon_ws.launch(
                    q, k, v, o_kernel, lse, causal=causal, qk_scale=sm_scale * LOG2_E,
                    causal_offset=causal_offset, heads_per_group=heads_per_group,
                    store_lse=return_lse, block_n=cfg.block_n, num_stages=cfg.num_stages,
                    num_programs=None if cfg.tile_grid else _num_sms(q),
                    num_consumers=cfg.consumers)
            elif use_gluon:
                fwd_gluon.launch(q, k, v, o_kernel, lse, causal=causal,
                                 qk_scale=sm_scale * LOG2_E, causal_offset=causal_offset,
                                 heads_per_group=heads_per_group, store_lse=return_lse,
                                 block_m=cfg.block_m, block_n=cfg.block_n,
                                 num_stages=cfg.num_stages, num_warps=cfg.num_warps)
            else:
                attn_fwd_kernel[grid](
                    q_arg, k_arg, v_arg, o_arg, lse,
                    *q.stride(), *k.stride(), *o_kernel.stride(), lse.stride(0), lse.stride(1),
                    b, h, h // k.shape[1], heads_per_group, lq, lk,
                    causal_offset, sm_scale * LOG2_E,
                    HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                    CAUSAL=causal, STORE_LSE=return_lse, USE_TMA=use_tma,
                    num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                )
    except triton.runtime.errors.OutOfResources as exc:
        raise ValueError(f"config {cfg.label()} does not fit this GPU for D={d}: {exc}") from exc
    if o_kernel is not o:
        o.copy_(o_kernel)
    return (o, lse) if return_lse else o


def article_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    config: KernelConfig = ARTICLE,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The frozen article kernel (:mod:`flashrepro.kernels.article`), for reproduction.

    Args:
        q: (B, H, Lq, D) fp16 or bf16, D a power of two in 16..256.
        k, v: (B, H, Lk, D), same dtype and device as q.
        causal: top-left causal mask, as SDPA's ``is_causal``.
        scale: softmax scale, default 1/sqrt(D).
        config: launch configuration; BLOCK_M must be a multiple of BLOCK_N (the article's
            off-band loop assumes it). Defaults to the article's 64x64, 4 warps.
        out: optional output tensor, as in :func:`attention`.

    Returns:
        o, (B, H, Lq, D) in q's dtype.

    Raises:
        TypeError, ValueError: as :func:`attention`; also for a head dim that is not a power of
            two >= 16, a config that is not a KernelConfig (TypeError), BLOCK_M not a
            multiple of BLOCK_N, or B·H above 65535 (its grid puts B·H on gridDim.y).
    """
    validate(q, k, v, causal=causal, scale=scale, enable_gqa=False,
             causal_alignment="top_left")
    b, h, lq, d = q.shape
    if d < 16 or d & (d - 1):
        raise ValueError(f"the article kernel needs a power-of-two head dim >= 16, got D={d}")
    if b * h > MAX_GRID_Y:
        raise ValueError(f"the article kernel needs B·H <= {MAX_GRID_Y} (CUDA's gridDim.y), "
                         f"got {b * h}")
    if not isinstance(config, KernelConfig):
        raise TypeError(f"config must be a KernelConfig, got {type(config).__name__}")
    if config.block_m % config.block_n:
        raise ValueError(f"the article kernel needs BLOCK_M to be a multiple of BLOCK_N, got "
                         f"{config.block_m}x{config.block_n}")
    o = _check_out(out, q, q=q, k=k, v=v)
    if o.numel() == 0:
        return o
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    grid = (triton.cdiv(lq, config.block_m), b * h)
    with _on_device(q.device):
        article_fwd_kernel[grid](
            q, k, v, o, sm_scale,
            *q.stride(), *k.stride(), *v.stride(), *o.stride(),
            h, lq, k.shape[2],
            HEAD_DIM=d, BLOCK_M=config.block_m, BLOCK_N=config.block_n, CAUSAL=causal,
            num_warps=config.num_warps, num_stages=config.num_stages,
        )
    return o
