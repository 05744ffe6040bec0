"""Which attention kernel a profiled forward ran: CUDA kernel names classified by
:data:`ATTENTION_KERNELS` and checked against the row's implementation
(:data:`EXPECTED_KERNEL`)."""

from __future__ import annotations

from typing import Any

ATTENTION_KERNELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("flashrepro-ws", ("attn_fwd_gluon_ws_kernel",)),
    ("flashrepro-gluon", ("attn_fwd_gluon_kernel",)),
    ("flashrepro-triton", ("attn_fwd_kernel",)),
    ("flashrepro-article", ("article_fwd_kernel",)),
    ("fa4", ("flash_attncute", "flash_attn.cute", "flashattentionforwardsm", "flash_attn_cute")),
    ("cudnn", ("cudnn", "sm90_flash", "sm100_flash", "fort_native_sdpa", "fmha_fprop")),
    ("flash", ("pytorch_flash", "flash_fwd")),
    ("efficient", ("fmha_cutlass", "efficient_attention", "attentionkernel")),
    ("math", ("softmax",)),
)
"""The attention-kernel classifier: (label, substrings of the lower-cased CUDA kernel name), the
first label with a matching substring wins, so the order matters (FA4's CuTe names contain
"flash_fwd", flashrepro's Gluon names contain neither). Sources of the names: flashrepro's own
kernels (``attn_fwd_gluon_ws_kernel`` in kernels/fwd_gluon_ws.py, ``attn_fwd_gluon_kernel``
in kernels/fwd_gluon.py, ``attn_fwd_kernel`` in kernels/fwd.py, ``article_fwd_kernel`` in
kernels/article.py); FA4's CuTe DSL kernels are named after the module and class
(``..._flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_...``); cuDNN's runtime-compiled
SDPA kernels (``cudnn_generated_fort_native_sdpa_sm90_...``, ``sm90_flash_fprop_wgmma_...``);
torch's FlashAttention-2 (``pytorch_flash::flash_fwd_kernel<...>``); the mem-efficient
backend's xFormers kernels (``fmha_cutlassF_bf16_aligned_64x128_rf_sm80``,
``attention_kernel_batched_impl<AttentionKernel<...>>``); the math backend is seen by its
softmax (``softmax_warp_forward``, ``cunn_SoftMaxForward``, inductor's
``triton_..._safe_softmax...``), the model having no other softmax: its bmm kernels are
GEMMs like the projections' and are not attributed, so a math row's attention µs are its
softmax's alone."""

INDUCTOR_PREFIX = "triton_"
"""How inductor's generated kernels are named (``triton_{poi,per,red,tem}_fused_...``, from
torch/_inductor/codegen/triton.py); flashrepro's own kernels are named ``attn_fwd_*``."""

EXPECTED_KERNEL = {"frepro": "flashrepro", "sdpa-cudnn": "cudnn", "sdpa-flash": "flash",
                   "fa4": "fa4"}
"""The label each implementation's attention must have (frepro: any ``flashrepro-*``)."""


def attention_label(name: str) -> str | None:
    """The :data:`ATTENTION_KERNELS` label of a CUDA kernel name, None when it is not an
    attention kernel (a GEMM, a norm, an elementwise kernel)."""
    low = name.lower()
    for label, needles in ATTENTION_KERNELS:
        if any(n in low for n in needles):
            return label
    return None


def kernel_summary(kernels: list[tuple[str, float]], impl: str, top: int = 5) -> dict[str, Any]:
    """Which attention kernels one profiled forward ran, and its ``top`` kernels by GPU time.

    Args:
        kernels: (CUDA kernel name, GPU µs) per kernel launch of one forward
            (:func:`kernel_events`).
        impl: the row's implementation (:data:`EXPECTED_KERNEL`).
        top: how many of the heaviest kernels to list.

    Returns:
        ``attention_kernel``: the labels seen, heaviest first, joined by "+" ("none" when no
        kernel matched); ``attention_kernels``: per kernel name matched, its label, ``us``
        (GPU µs in the forward) and ``calls``; ``attention_us``; ``gpu_us`` (every kernel);
        ``top_kernels``: name, µs, calls; ``backend_mismatch``: True when the labels seen are
        not exactly the expected one (for frepro: not only ``flashrepro-*`` labels);
        ``inductor_launches``: launches of kernels inductor generated (its names start with
        ``triton_``: ``triton_poi_``, ``triton_per_``, ``triton_red_``, ``triton_tem_``), 0 in
        a forward that ran no compiled code.

    Raises:
        ValueError: ``impl`` not in :data:`EXPECTED_KERNEL`.
    """
    if impl not in EXPECTED_KERNEL:
        raise ValueError(f"impl: expected one of {', '.join(EXPECTED_KERNEL)}, got {impl!r}")
    by_name: dict[str, list[float]] = {}
    for name, us in kernels:
        by_name.setdefault(name, []).append(us)
    totals = sorted(((n, sum(v), len(v)) for n, v in by_name.items()), key=lambda t: -t[1])
    attention = [{"label": label, "name": n, "us": us, "calls": c} for n, us, c in totals
                 if (label := attention_label(n)) is not None]
    label_us: dict[str, float] = {}
    for a in attention:
        label_us[a["label"]] = label_us.get(a["label"], 0.0) + a["us"]
    labels = sorted(label_us, key=lambda k: -label_us[k])
    expected = EXPECTED_KERNEL[impl]
    ok = bool(labels) and all(lab == expected or lab.startswith(expected + "-")
                              for lab in labels)
    return {"attention_kernel": "+".join(labels) or "none", "attention_kernels": attention,
            "attention_us": sum(label_us.values()), "gpu_us": sum(t[1] for t in totals),
            "top_kernels": [{"name": n, "us": us, "calls": c} for n, us, c in totals[:top]],
            "backend_mismatch": not ok,
            "inductor_launches": sum(c for n, _, c in totals if n.startswith(INDUCTOR_PREFIX))}


def kernel_events(events: Any) -> list[tuple[str, float]]:
    """(name, GPU µs) of the CUDA-side events of a profile (``prof.events()``: FunctionEvents
    whose ``device_type`` is CUDA are kernels, memcpys and memsets; their
    ``device_time_total`` is the µs the GPU spent in them)."""
    from torch.autograd import DeviceType

    return [(e.name, float(e.device_time_total)) for e in events
            if e.device_type == DeviceType.CUDA]
