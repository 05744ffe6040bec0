"""The public, torch-style entry points.

:func:`attention` mirrors ``torch.nn.functional.scaled_dot_product_attention`` (same layout,
same meaning of ``is_causal``/``causal``, ``scale`` and ``enable_gqa``) for the cases a
FlashAttention forward kernel covers: no dropout, no arbitrary ``attn_mask``, no autograd.
Input that the kernel cannot take raises a ``TypeError`` or ``ValueError`` that names the
argument and the rule (:func:`flashrepro.validation.validate`); nothing reaches Triton
unchecked. Eager calls launch through :func:`flashrepro.launch.forward` (a cached launch plan
per call signature); under ``torch.compile`` and ``torch.export`` the call goes through the
``torch.ops.flashrepro`` operators (:mod:`flashrepro.ops`).
"""

from __future__ import annotations

import torch

from flashrepro import ops
from flashrepro.configs import ARTICLE, KernelConfig
from flashrepro.launch import _on_device, check_config, forward
from flashrepro.select import article_call
from flashrepro.validation import (
    MAX_GRID_Y,
    CausalAlignment,
    _check_flag,
    check_out,
    check_readable,
    check_scale_and_alignment,
    check_traced_out,
    interpreter_mode,
    validate,
)

__all__ = ["article_attention", "attention", "interpreter_mode", "validate"]


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
            Must be finite, >= 0 and at most ``validation.MAX_SCALE`` (about 2.36e38: the
            kernels take scale·log2(e) in float32); 0 gives the plain mean of the visible
            values.
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
            element are accepted. Its version counter is bumped, as by torch's out= ops.

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
          rounding, and float16 P can overflow (lab/2026-11-30-conditional-rescaling-overflow/).
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
    if isinstance(q, torch.Tensor) and needs_operator(q, k, v, out):
        return _traced(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
                       causal_alignment=causal_alignment, return_lse=return_lse,
                       config=config, out=out)
    o, lse = forward(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
                     causal_alignment=causal_alignment, return_lse=return_lse, config=config,
                     out=out)
    return (o, lse) if return_lse else o


def needs_operator(q: object, *others: object) -> bool:
    """Whether a call on ``q`` (and the tensors among ``others``: k, v, ``out``) must go
    through the registered operators (:mod:`flashrepro.ops`) rather than the eager launch:
    under dynamo (``torch.compile``, ``torch.export``) or ``torch.jit`` tracing, for a q that
    is anything but a plain tensor or another tensor argument that is a subclass (a wrapper
    subclass, a fake tensor, an FX proxy: no storage the kernel could read), under a torch
    dispatch mode (``make_fx``'s proxy mode, a fake-tensor or flop-counting mode), which must
    see one op rather than Triton's launch, or inside a functorch transform (``torch.vmap``'s
    batched tensors are plain ``torch.Tensor`` without storage; the op gets vmap's per-slice
    fallback). ``others`` that are not tensors (None, a bad argument) leave the choice to q,
    so the eager path's validation names them. A CUDA-graph capture is none of these: the
    eager launch goes into the capturing stream like any kernel. On a 2-core CPU host
    (timeit, 2·10^5 calls) 0.82 µs with k, v and ``out``, 0.80 µs for q
    alone."""
    tensor = torch.Tensor
    for t in others:
        if t.__class__ is not tensor and isinstance(t, tensor):
            return True
    return (torch.compiler.is_compiling() or type(q) is not tensor
            or torch.jit.is_tracing() or torch._C._len_torch_dispatch_stack() > 0
            or torch._C._functorch.peek_interpreter_stack() is not None)


def _traced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
            scale: float | None, enable_gqa: bool, causal_alignment: str, return_lse: bool,
            config: KernelConfig | str | None,
            out: torch.Tensor | None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention` where :func:`needs_operator`: through the registered operators
    (:mod:`flashrepro.ops`), whose fake implementation a tracer sees; ``out`` is then written by
    a copy of the op's output."""
    for name, flag in (("causal", causal), ("enable_gqa", enable_gqa),
                       ("return_lse", return_lse)):
        _check_flag(name, flag)  # the op's schema would coerce 1 to True
    check_scale_and_alignment(scale, causal_alignment)
    check_config(config)  # eager's rule: a label string is no config here either
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_traced_input(name, t)
    if isinstance(config, KernelConfig):
        config = config.label()
    op = ops.attention_lse if return_lse else ops.attention
    result = op(q, k, v, causal, scale, enable_gqa, causal_alignment, config)
    o, lse = result if return_lse else (result, None)
    if out is not None:
        o = check_traced_out(out, q).copy_(o)
    return (o, lse) if return_lse else o


def check_traced_input(name: str, t: object) -> None:
    """What the operator's schema would not refuse by name: a non-tensor (the dispatcher's
    RuntimeError), a nested tensor (it has no nested kernel), an input a ``torch.func``
    transform differentiates.

    Raises:
        TypeError: ``t`` not a torch.Tensor.
        ValueError: nested, or differentiated; naming the input.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_readable(name, t)
    if not torch.compiler.is_compiling():  # dynamo cannot trace functorch's queries
        _check_not_differentiated(name, t)


def _check_not_differentiated(name: str, t: torch.Tensor) -> None:
    """Refuse an input that a ``torch.func`` transform differentiates (grad, vjp, jacrev,
    jvp, jacfwd: a grad-tracking wrapper at some level, possibly under vmap's batched one,
    that requires grad or carries a tangent).
    The ops have no autograd or forward-AD formula, and torch's fallback for such ops gives a
    zero gradient or tangent without an error; eager calls refuse inputs that require grad
    (:func:`validate`), but a batched or forward-AD wrapper does not report it.

    Raises:
        ValueError: naming the input.
    """
    functorch = torch._C._functorch
    while functorch.is_functorch_wrapped_tensor(t):
        if functorch.is_gradtrackingtensor(t) and (
                (t.requires_grad and torch.is_grad_enabled())
                or torch.autograd.forward_ad.unpack_dual(t).tangent is not None):
            raise ValueError(f"{name} is differentiated by a torch.func transform (grad, vjp, "
                             "jvp, jacrev, jacfwd), but flashrepro's attention is forward-only "
                             "(no autograd or forward-AD formula); apply the transform to "
                             "other code, or torch.no_grad() around this call")
        t = functorch.get_unwrapped(t)


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
    b, h, _, d = q.shape
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
    o = check_out(out, q, q=q, k=k, v=v)
    if o.numel() == 0:
        return o
    with _on_device(q.device):
        article_call(q, k, v, o, causal=causal, scale=scale, config=config).run()
    return o
