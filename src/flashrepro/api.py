"""The public, torch-style entry points: input validation, then the kernel launch.

:func:`attention` mirrors ``torch.nn.functional.scaled_dot_product_attention`` (same layout,
same meaning of ``is_causal``/``causal``, ``scale`` and ``enable_gqa``) for the cases a
FlashAttention forward kernel covers: no dropout, no arbitrary ``attn_mask``.
"""

from __future__ import annotations

import math
import os
from typing import Literal

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from flashrepro.configs import ARTICLE, NAMED, KernelConfig, default_config
from flashrepro.kernels.article import article_fwd_kernel
from flashrepro.kernels.fwd import attn_fwd_kernel

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256
MAX_PROGRAMS = 2**31 - 1  # CUDA's limit on gridDim.x (one program per head and query block)
LOG2_E = 1.4426950408889634

CausalAlignment = Literal["top_left", "bottom_right"]


def interpreter_mode() -> bool:
    """True when Triton's CPU interpreter is on (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _dtype_names() -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)


def validate(q: object, k: object, v: object, *, scale: float | None, enable_gqa: bool,
             causal_alignment: str) -> None:
    """Check SDPA-style inputs; raise with the argument's name and the rule it breaks.

    Raises:
        TypeError: an input is not a ``torch.Tensor``, or has a dtype other than fp16/bf16.
        ValueError: wrong rank; mixed dtypes or devices; a CPU tensor outside interpreter mode;
            mismatched batch, key/value length or head dim; query heads not equal to (or, with
            ``enable_gqa``, not a multiple of) key/value heads; head dim above 256; batch or
            head count above CUDA's grid limit; a negative or non-finite ``scale``; an unknown
            ``causal_alignment``.
    """
    tensors = {"q": q, "k": k, "v": v}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dims (B, H, L, D), got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; supported dtypes: {_dtype_names()}")
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
    assert isinstance(v, torch.Tensor)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, "
                         f"{v.device}")
    if q.device.type != "cuda" and not interpreter_mode():
        raise ValueError(f"q, k and v must be CUDA tensors (got device {q.device}); CPU tensors "
                         "run only under Triton's interpreter, TRITON_INTERPRET=1")
    (b, h, _, d), (bk, hk, lk, dk) = q.shape, k.shape
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
        if hk < 1 or h % hk != 0:
            raise ValueError(f"with enable_gqa, q's heads ({h}) must be a multiple of k/v's "
                             f"heads ({hk})")
    elif hk != h:
        raise ValueError(f"k and v must have q's head count H={h}, got {hk} (pass "
                         "enable_gqa=True for grouped-query attention)")
    if b * h * q.shape[2] > MAX_PROGRAMS * 16:
        raise ValueError(f"B·H·Lq = {b * h * q.shape[2]} query rows exceed the launch limit of "
                         f"{MAX_PROGRAMS} programs of at least 16 rows")
    if scale is not None and not (math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale}")
    if causal_alignment not in ("top_left", "bottom_right"):
        raise ValueError("causal_alignment must be 'top_left' (SDPA's is_causal) or "
                         f"'bottom_right', got {causal_alignment!r}")
    del lk


def _resolve_config(config: KernelConfig | str | None, head_dim: int, causal: bool,
                    seqlen_q: int, device: torch.device) -> KernelConfig:
    if isinstance(config, KernelConfig):
        return config
    if config is None:
        arch = None
        if device.type == "cuda":
            major, minor = torch.cuda.get_device_capability(device)
            arch = 10 * major + minor
            if arch >= 90 and os.environ.get("DISABLE_MMA_V3", "0") not in ("", "0"):
                arch = 80  # Triton then builds the sm_80 (mma.sync) code: take its choice
        return default_config(head_dim, causal, seqlen_q, arch)
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


def _check_out(out: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    if out is None:
        return torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must match q's shape {tuple(q.shape)}, dtype {q.dtype} and device "
                         f"{q.device}; got {tuple(out.shape)}, {out.dtype}, {out.device}")
    return out


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

    Args:
        q: (B, H, Lq, D) fp16 or bf16, any strides, on a CUDA device (or the CPU under
            ``TRITON_INTERPRET=1``).
        k: (B, H_kv, Lk, D), q's dtype and device. H_kv = H unless ``enable_gqa``.
        v: (B, H_kv, Lk, D), like k.
        causal: apply a causal mask. With the default ``causal_alignment='top_left'`` query row
            i sees key j iff j <= i, exactly SDPA's ``is_causal`` (also when Lq != Lk).
        scale: softmax scale (SDPA's ``scale``; often called sm_scale); default 1/sqrt(D).
        enable_gqa: allow H to be a multiple of H_kv (grouped-query attention, as in Qwen3):
            query head h reads key/value head h // (H / H_kv).
        causal_alignment: ``'bottom_right'`` aligns the mask to the last key instead: row i sees
            key j iff j <= i + Lk - Lq (FlashAttention-2's convention and KV-cache decoding,
            ``torch.nn.attention.bias.causal_lower_right``). A row that sees no key gets
            output 0 and LSE -inf.
        return_lse: also return the log-sum-exp of each row's scaled scores (natural log).
        config: a :class:`~flashrepro.configs.KernelConfig`, a name from
            ``flashrepro.configs.NAMED`` (``'article'``), or None for the per-arch default.
        out: optional (B, H, Lq, D) tensor of q's dtype to write the output into.

    Returns:
        o, (B, H, Lq, D) in q's dtype; with ``return_lse``, also lse, (B, H, Lq) float32.

    Raises:
        TypeError, ValueError: bad inputs, see :func:`validate`; an unknown config name or a
            config whose tiles do not fit the GPU's shared memory (ValueError).
    """
    validate(q, k, v, scale=scale, enable_gqa=enable_gqa, causal_alignment=causal_alignment)
    b, h, lq, d = q.shape
    lk = k.shape[2]
    o = _check_out(out, q)
    lse = torch.empty((b, h, lq), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return (o, lse) if return_lse else o
    cfg = _resolve_config(config, d, causal, lq, q.device)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    causal_offset = lk - lq if causal_alignment == "bottom_right" else 0
    if k.stride() != v.stride():  # the kernel reads K and V with one set of tile offsets
        k, v = k.contiguous(), v.contiguous()
    block_d = max(16, triton.next_power_of_2(d))
    use_tma = cfg.tma and _tma_ok(q, k, v, o, lk)
    if use_tma:
        q_arg, o_arg = (TensorDescriptor.from_tensor(t, [1, 1, cfg.block_m, block_d])
                        for t in (q, o))
        k_arg, v_arg = (TensorDescriptor.from_tensor(t, [1, 1, cfg.block_n, block_d])
                        for t in (k, v))
    else:
        q_arg, k_arg, v_arg, o_arg = q, k, v, o
    grid = (b * h * triton.cdiv(lq, cfg.block_m),)
    try:
        attn_fwd_kernel[grid](
            q_arg, k_arg, v_arg, o_arg, lse,
            *q.stride(), *k.stride(), *o.stride(), lse.stride(0), lse.stride(1),
            b, h, h // k.shape[1], _heads_per_group(b * h, lk, d, q), lq, lk, causal_offset,
            sm_scale * LOG2_E,
            HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            CAUSAL=causal, STORE_LSE=return_lse, USE_TMA=use_tma,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )
    except triton.runtime.errors.OutOfResources as exc:
        raise ValueError(f"config {cfg.label()} does not fit this GPU for D={d}: {exc}") from exc
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
            two >= 16, or BLOCK_M not a multiple of BLOCK_N.
    """
    validate(q, k, v, scale=scale, enable_gqa=False, causal_alignment="top_left")
    b, h, lq, d = q.shape
    if d < 16 or d & (d - 1):
        raise ValueError(f"the article kernel needs a power-of-two head dim >= 16, got D={d}")
    if config.block_m % config.block_n:
        raise ValueError(f"the article kernel needs BLOCK_M to be a multiple of BLOCK_N, got "
                         f"{config.block_m}x{config.block_n}")
    o = _check_out(out, q)
    if o.numel() == 0:
        return o
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    grid = (triton.cdiv(lq, config.block_m), b * h)
    article_fwd_kernel[grid](
        q, k, v, o, sm_scale,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        h, lq, k.shape[2],
        HEAD_DIM=d, BLOCK_M=config.block_m, BLOCK_N=config.block_n, CAUSAL=causal,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return o
