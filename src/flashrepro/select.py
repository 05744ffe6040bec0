"""Which kernel a forward call runs, and its launch: a pure function of the inputs' metadata and
of the GPU.

:func:`select` reads the shapes, strides, dtypes and 16-byte alignment of q, k, v, o and lse,
never their data, so meta tensors serve (Triton 3.6's TMA descriptors read only their base's
``data_ptr()`` and dtype), the call's flags and config, and four facts of the GPU that the
caller passes in: :func:`flashrepro.launch.forward` reads them from the device, the offline
SASS compile (``flashrepro_harness.analysis.offline_compile``) takes them from its target. It
launches nothing, queries no device and allocates no device memory; equal arguments give equal
selections.

The rules, in the order applied:

1. Config: the caller's :class:`~flashrepro.configs.KernelConfig`, a name in
   ``configs.NAMED``, or :func:`~flashrepro.configs.default_config` for the arch Triton builds
   code for (the tuned table, else per-arch rules).
2. Copies: the kernels form head-dim offsets (and K/V row offsets) as index·stride in int32
   (:func:`fits_int32`); q is read through a contiguous copy where that would overflow, k and
   v where it would or where their strides differ (one set of K/V tile offsets), and O is
   written through a contiguous buffer under q's rule.
3. TMA (``config.tma``): sm_90 or later, or the interpreter; every tensor read has a unit last
   stride, a 16-byte aligned base and 16-byte multiple strides, none zero (the rules of
   Triton's ``TensorDescriptor`` and of Hopper's tensor maps); Lk >= 1.
4. Gluon (``config.overlap``, with TMA): Triton builds sm_90's wgmma code (sm_90 without
   ``DISABLE_MMA_V3``), fp16 or bf16, D 64 or 128, every query row sees a key (causal offset
   >= 0); the 192-row tile (three consumers) at D = 64 only. ``warp_specialize`` picks
   :mod:`~flashrepro.kernels.fwd_gluon_ws`, else :mod:`~flashrepro.kernels.fwd_gluon`.
5. Fallback: a Gluon config that cannot run the call runs the Triton kernel
   (:mod:`~flashrepro.kernels.fwd`) at its own tiles when the caller passed it, at
   :data:`~flashrepro.configs.TRITON_FALLBACK` when it came from the table or is the 192-row
   tile.
6. Program order: (batch, head) pairs whose K and V fit in half of L2 form a group, the
   groups of equal size except on the ws kernel's static persistent grid under a causal mask
   (:func:`heads_per_group`; lab/2026-11-29-l2-head-groups/,
   lab/2026-12-02-d64-long-causal-groups/).
7. Grid: one program per tile, except the ws kernel's persistent grid of one program per SM
   unless ``config.tile_grid``; there ``config.dynamic_schedule`` has the programs claim
   their tiles from a counter that the launcher passes (its stream's,
   :mod:`flashrepro.counters`). A table config (``config`` None) keeps its dynamic schedule
   only with at least :data:`MIN_DYNAMIC_TILES_PER_PROGRAM` tiles per program; below, the
   static snake order, which pairs each program's heavy causal tile with a light one
   (lab/2026-12-03-dynamic-schedule-tile-count/). ``config.split_tail`` (no causal mask)
   has the static grid share its last two rounds out as runs of key blocks; a table config
   keeps it only with at least :data:`MIN_SPLIT_TILES_PER_PROGRAM` tiles per program and
   Lk >= Lq, where it was measured (lab/2026-12-03-split-tail/). The table is tuned at
   B·L = 16384: 15.5 tiles of 128 rows per program on 132 SMs, 10.4-11.6 of 192 rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from flashrepro.configs import (
    MMA_V3_ARCHS,
    NAMED,
    TRITON_FALLBACK,
    KernelConfig,
    block_dim,
    default_config,
)
from flashrepro.kernels import LOG2_E, fwd_gluon, fwd_gluon_ws
from flashrepro.kernels.article import article_fwd_kernel
from flashrepro.kernels.call import IO_ARGS, KernelCall, io_templates, rebind_io
from flashrepro.kernels.fwd import attn_fwd_kernel

INT32_LIMIT = 2**31  # Triton passes an int argument below this as int32, else as int64
STAND_IN_NUM_SMS = 132
"""SMs assumed where no GPU is at hand (the interpreter, the offline compile): the H100/H200's."""
STAND_IN_L2_BYTES = 50 * 2**20
"""L2 bytes assumed where no GPU is at hand: the H100's 50 MiB (the H200 has 60)."""
MIN_DYNAMIC_TILES_PER_PROGRAM = 3
"""Tiles per persistent program from which a table config keeps its dynamic schedule (rule 7)."""
MIN_SPLIT_TILES_PER_PROGRAM = 10
"""Tiles per persistent program from which a table config keeps its split tail (rule 7): the
fewest it was measured at is 10.4 (lab/2026-12-03-split-tail/). It was measured at Lk = Lq
only and loses on short tiles, so it is kept only where Lk >= Lq as well."""


@dataclass(frozen=True)
class Selection:
    """What :func:`select` chose for one call.

    Attributes:
        call: the launch. Its Q, K, V, O, LSE slots hold no tensor
            (:func:`~flashrepro.kernels.call.io_templates`); :meth:`bind` fills them.
        config: the config that runs, after the fallback (rule 5 of the module docstring).
        contiguous_q: the kernel reads ``q.contiguous()``.
        contiguous_kv: the kernel reads ``k.contiguous()`` and ``v.contiguous()``.
        o_buffer: the kernel writes a new contiguous (B, H, Lq, D) buffer, which the caller
            copies into o.
    """

    call: KernelCall
    config: KernelConfig
    contiguous_q: bool
    contiguous_kv: bool
    o_buffer: bool

    def operands(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                 lse: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The Q, K, V, O, LSE tensors the kernel reads and writes for inputs of the selection's
        metadata: copies and the O buffer where chosen, the inputs themselves elsewhere."""
        if self.contiguous_q:
            q = q.contiguous()
        if self.contiguous_kv:
            k, v = k.contiguous(), v.contiguous()
        if self.o_buffer:
            o = torch.empty(o.shape, dtype=o.dtype, device=o.device)
        return q, k, v, o, lse

    def bind(self, io: tuple[torch.Tensor, ...]) -> KernelCall:
        """The call on ``io``, the tensors :meth:`operands` returns."""
        return self.call.with_io(rebind_io(self.call.args[:IO_ARGS], io))


def check_config(config: object) -> None:
    """The ``config`` rule of :func:`flashrepro.attention`, eager or traced.

    Raises:
        TypeError: not a KernelConfig, a str or None.
        ValueError: a str that is not a name in ``configs.NAMED``.
    """
    if config is None or isinstance(config, KernelConfig):
        return
    if not isinstance(config, str):
        raise TypeError(f"config must be a KernelConfig, a name from {sorted(NAMED)} or None, "
                        f"got {type(config).__name__}")
    if config not in NAMED:
        raise ValueError(f"config must be a KernelConfig or one of {sorted(NAMED)}, got "
                         f"{config!r}")


def code_arch(arch: int | None, mma_v3: bool) -> int | None:
    """The arch whose code Triton builds: ``arch``, or 80 on Hopper without wgmma
    (``DISABLE_MMA_V3=1``; :func:`flashrepro.configs.launch_arch` without the device query)."""
    return 80 if arch is not None and arch in MMA_V3_ARCHS and not mma_v3 else arch


def fits_int32(t: torch.Tensor, *dim_blocks: tuple[int, int]) -> bool:
    """True if offset·stride stays below 2^31 for each (dim, block) of t.

    The kernels form the row offsets of q and o in int64, but the head-dim offsets
    (< BLOCK_D) of every tensor and the key/value row offsets (<= BLOCK_N) as index·stride
    in int32; a stride of 2^31 or more arrives as int64 and is safe. Dims of size <= 1 are
    never stepped along.
    """
    return all(t.shape[dim] <= 1 or t.stride(dim) >= INT32_LIMIT
               or t.stride(dim) * block < INT32_LIMIT for dim, block in dim_blocks)


def heads_per_group(bh: int, lk: int, d: int, element_size: int, l2_bytes: int,
                    balanced: bool = True) -> int:
    """(Batch, head) pairs per scheduling group: at most as many as have K and V in half of
    L2, and with ``balanced`` groups of equal size where a divisor of ``bh`` allows it.

    The kernels run a group's query blocks heaviest first across its heads; see the program
    order in :mod:`flashrepro.kernels.fwd`. A last group smaller than the others starts its
    heaviest tiles late, and the launch ends on them: at D=64 causal on the H200, groups at
    the L2 bound with a smaller last one took 1.03-1.09x the time of the largest equal groups
    under it (L=4096, 8192, 16384; lab/2026-12-02-d64-long-causal-groups). So the size is the
    largest divisor of ``bh`` up to the L2 bound, unless that divisor is below half the bound
    (a prime ``bh``); then the largest size up to the bound whose last group is at least half
    a group.

    Not ``balanced``: the L2 bound itself. The static persistent grid under a causal mask
    deals tiles round by round in snake order, which balances the work only while the weights
    fall steadily; more, smaller groups repeat the heaviest-first sawtooth more often, and
    there equal groups measured 1.06-1.47x slower (same lab). ``element_size``: bytes per
    element of K and V.
    """
    kv_bytes_per_head = 2 * max(lk, 1) * d * element_size
    bound = max(1, min(bh, (l2_bytes // 2) // kv_bytes_per_head))
    if not balanced:
        return bound
    divisor = next(g for g in range(bound, 0, -1) if bh % g == 0)
    if 2 * divisor >= bound:
        return divisor
    return next(g for g in range(bound, 0, -1) if 2 * (bh % g) >= g)


def table_schedule(cfg: KernelConfig, batch_heads: int, seqlen_q: int, num_sms: int,
                   seqlen_k: int | None = None) -> KernelConfig:
    """A table config's schedule for a launch over ``batch_heads`` (batch, query head) pairs of
    ``seqlen_q`` rows on ``num_sms`` SMs (rule 7 of the module docstring): ``cfg``, without its
    dynamic schedule below :data:`MIN_DYNAMIC_TILES_PER_PROGRAM` tiles per program, without
    its split tail below :data:`MIN_SPLIT_TILES_PER_PROGRAM` or with ``seqlen_k`` (None: as
    ``seqlen_q``) shorter than ``seqlen_q``."""
    num_tiles = batch_heads * triton.cdiv(seqlen_q, cfg.block_m)
    if cfg.dynamic_schedule and num_tiles < MIN_DYNAMIC_TILES_PER_PROGRAM * num_sms:
        return replace(cfg, dynamic_schedule=False)
    short_keys = seqlen_k is not None and seqlen_k < seqlen_q
    if cfg.split_tail and (num_tiles < MIN_SPLIT_TILES_PER_PROGRAM * num_sms or short_keys):
        return replace(cfg, split_tail=False)
    return cfg


def default_launch(head_dim: int, causal: bool, seqlen_q: int, arch: int | None,
                   batch_heads: int, num_sms: int, seqlen_k: int | None = None) -> KernelConfig:
    """The config :func:`select` starts from without ``config``: the tuned table's entry
    (:func:`~flashrepro.configs.default_config` for the code arch ``arch``) with its schedule
    for the launch (:func:`table_schedule`). Where the Gluon kernel cannot run, :func:`select`
    then falls back to :data:`~flashrepro.configs.TRITON_FALLBACK`."""
    return table_schedule(default_config(head_dim, causal, seqlen_q, arch), batch_heads,
                          seqlen_q, num_sms, seqlen_k)


def _tma_ok(tensors: tuple[torch.Tensor, ...], lk: int, arch: int | None) -> bool:
    """Rule 3 of the module docstring."""
    if lk < 1 or (arch is not None and arch < 90):
        return False
    for t in tensors:
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any(s == 0 or (s * t.element_size()) % 16 for s in t.stride()[:-1]):
            return False
    return True


def _gluon_ok(arch: int | None, dtype: torch.dtype, d: int, causal: bool,
              causal_offset: int) -> bool:
    """Rule 4 of the module docstring, given TMA (``arch``: the code arch): the Gluon kernels'
    running max must leave -inf at the first key block, so no row may be without keys."""
    return (arch == 90 and dtype in (torch.float16, torch.bfloat16) and d in (64, 128)
            and (not causal or causal_offset >= 0))


def _read(t: torch.Tensor, copy: bool) -> torch.Tensor:
    """What the kernel reads for ``t``: itself, or a meta stand-in for its contiguous copy
    (``contiguous()`` returns ``t`` itself when it already is)."""
    if not copy or t.is_contiguous():
        return t
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def select(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
           lse: torch.Tensor, *, causal: bool, scale: float | None, causal_alignment: str,
           return_lse: bool, config: KernelConfig | str | None, arch: int | None,
           mma_v3: bool, num_sms: int, l2_bytes: int) -> Selection:
    """The kernel and launch for a forward call (rules in the module docstring).

    Args:
        q, k, v: the inputs as :func:`flashrepro.validation.validate` accepts them (it is not
            called here): q (B, H, Lq, D), k and v (B, H_kv, Lk, D), fp16 or bf16, any strides;
            on any device, meta included. B, H, Lq, Lk >= 1.
        o: (B, H, Lq, D) in q's dtype, any strides that do not overlap: the output.
        lse: fp32 with strides (H·Lq, Lq, ...): (B, H, Lq), or a (1, 1, 1) view with those
            strides when ``return_lse`` is False (never written then).
        causal, scale, causal_alignment, return_lse, config: as :func:`flashrepro.attention`.
        arch: compute capability as an int (90 for sm_90); None for Triton's interpreter.
        mma_v3: False where ``DISABLE_MMA_V3=1`` turns Triton's wgmma into mma.sync on Hopper.
        num_sms: SMs of the GPU (the persistent grid); :data:`STAND_IN_NUM_SMS` without one.
        l2_bytes: L2 cache bytes of the GPU; :data:`STAND_IN_L2_BYTES` without one.

    Returns:
        A :class:`Selection`; equal arguments (metadata, flags, GPU facts) give equal ones.

    Raises:
        TypeError, ValueError: ``config`` breaks :func:`check_config`'s rule; an empty call
            (no output element or Lk = 0: the launch handles it without a kernel); a
            ``split_tail`` config with ``causal`` (its tiles must be equal).
    """
    check_config(config)
    b, h, lq, d = q.shape
    lk = k.shape[2]
    if o.numel() == 0 or lk == 0:
        raise ValueError(f"select needs B, H, Lq and Lk >= 1, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    built = code_arch(arch, mma_v3)
    if isinstance(config, KernelConfig):
        cfg = config
    elif config is None:
        cfg = default_launch(d, causal, lq, built, b * h, num_sms, lk)
    else:
        cfg = NAMED[config]
    if cfg.split_tail and causal:
        raise ValueError(f"config {cfg.label()!r}: split_tail needs causal=False (it splits "
                         "equal tiles), got causal=True")
    causal_offset = lk - lq if causal_alignment == "bottom_right" else 0
    block_d = block_dim(d)
    contiguous_q = not fits_int32(q, (3, block_d))
    contiguous_kv = k.stride() != v.stride() or not all(
        fits_int32(t, (2, cfg.block_n), (3, block_d)) for t in (k, v))
    o_buffer = not fits_int32(o, (3, block_d))
    q, o = _read(q, contiguous_q), _read(o, o_buffer)
    k, v = _read(k, contiguous_kv), _read(v, contiguous_kv)
    use_tma = cfg.tma and _tma_ok((q, k, v, o), lk, arch)
    use_gluon = (use_tma and cfg.overlap and _gluon_ok(built, q.dtype, d, causal, causal_offset)
                 and (d == 64 or not cfg.three_consumers))  # its registers hold D = 64 only
    if cfg.overlap and not use_gluon and (config is None or cfg.three_consumers):
        cfg = TRITON_FALLBACK  # the table's tiles are the Gluon kernel's
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    snake = (causal and use_gluon and cfg.warp_specialize and not cfg.tile_grid
             and not cfg.dynamic_schedule)  # the static persistent order under a causal mask
    shared = dict(causal=causal, qk_scale=sm_scale * LOG2_E, causal_offset=causal_offset,
                  heads_per_group=heads_per_group(b * h, lk, d, q.element_size(), l2_bytes,
                                                  balanced=not snake),
                  store_lse=return_lse, block_n=cfg.block_n, num_stages=cfg.num_stages)
    if use_gluon and cfg.warp_specialize:
        call = fwd_gluon_ws.kernel_call(
            q, k, v, o, lse, **shared, num_programs=None if cfg.tile_grid else num_sms,
            num_consumers=cfg.consumers, dynamic_schedule=cfg.dynamic_schedule,
            split_tail=cfg.split_tail)
    elif use_gluon:
        call = fwd_gluon.kernel_call(q, k, v, o, lse, **shared, block_m=cfg.block_m,
                                     num_warps=cfg.num_warps)
    else:
        call = _triton_call(q, k, v, o, lse, cfg, use_tma, block_d, **shared)
    return Selection(call.with_io(io_templates(call.args)), cfg, contiguous_q, contiguous_kv,
                     o_buffer)


def _triton_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                 lse: torch.Tensor, cfg: KernelConfig, use_tma: bool, block_d: int, *,
                 causal: bool, qk_scale: float, causal_offset: int, heads_per_group: int,
                 store_lse: bool, block_n: int, num_stages: int) -> KernelCall:
    """The launch of :func:`~flashrepro.kernels.fwd.attn_fwd_kernel` on these tensors, TMA
    descriptors over them with ``use_tma``."""
    b, h, lq, d = q.shape
    if use_tma:
        q_arg, o_arg = (TensorDescriptor.from_tensor(t, [1, 1, cfg.block_m, block_d])
                        for t in (q, o))
        k_arg, v_arg = (TensorDescriptor.from_tensor(t, [1, 1, block_n, block_d])
                        for t in (k, v))
    else:
        q_arg, k_arg, v_arg, o_arg = q, k, v, o
    return KernelCall(attn_fwd_kernel, (b * h * triton.cdiv(lq, cfg.block_m),), (
        q_arg, k_arg, v_arg, o_arg, lse,
        *q.stride(), *k.stride(), *o.stride(), lse.stride(0), lse.stride(1),
        b, h, h // k.shape[1], heads_per_group, lq, k.shape[2], causal_offset, qk_scale,
    ), dict(HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=cfg.block_m, BLOCK_N=block_n, CAUSAL=causal,
            STORE_LSE=store_lse, USE_TMA=use_tma, num_warps=cfg.num_warps,
            num_stages=num_stages))


def article_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, *,
                 causal: bool, scale: float | None, config: KernelConfig) -> KernelCall:
    """The launch of the article's kernel (:mod:`flashrepro.kernels.article`) on these
    tensors, as data: the one kernel :func:`flashrepro.article_attention` runs.

    Args:
        q, k, v, o: (B, H, L, D) as :func:`flashrepro.article_attention` checks them (not
            checked here), any device, meta included; not empty.
        causal, scale, config: as :func:`flashrepro.article_attention`.

    Returns:
        A :class:`~flashrepro.kernels.call.KernelCall` over these tensors; its fifth argument
        is the scale (the article's kernel writes no LSE), so it is never rebound.
    """
    b, h, lq, d = q.shape
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    return KernelCall(article_fwd_kernel, (triton.cdiv(lq, config.block_m), b * h), (
        q, k, v, o, sm_scale,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        h, lq, k.shape[2],
    ), dict(HEAD_DIM=d, BLOCK_M=config.block_m, BLOCK_N=config.block_n, CAUSAL=causal,
            num_warps=config.num_warps, num_stages=config.num_stages))
