"""Parity of every rung of the memory ladder (:mod:`flashrepro_harness.bench.ladder_kernels`).

Same rule as ``tests/test_parity.py``: on fresh random inputs, a rung's max error
against a high-precision reference is at most 2x torch SDPA's plus a small floor; the output is
poisoned with NaN before each launch and every element is compared. Without a GPU the kernels
run under Triton's interpreter on small shapes in fp16 against a float64 reference; on a GPU,
fp16 and bf16 at realistic lengths against a float32 reference.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

from flashrepro import ARTICLE, KernelConfig
from flashrepro_harness.bench import ladder_rungs as ladder
from flashrepro_harness.bench.ladder_kernels import KERNEL_NAMES, VARIANTS
from tests.conftest import HAS_GPU
from tests.reference import FLOOR, poisoned_like, random_qkv, reference_attention

LADDER_ONLY = ("v1", "v2_kcol", "v2_kt", "v2_kcol_fma", "v2_kt_fma")


def check_ladder_parity(variant: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                        causal: bool, config: KernelConfig | None) -> None:
    ref_dtype = torch.float32 if q.is_cuda else torch.float64
    ref, _ = reference_attention(q, k, v, causal=causal, dtype=ref_dtype)
    peer = sdpa(q, k, v, is_causal=causal).to(ref_dtype)
    out = poisoned_like(q)
    o = ladder.launch(variant, q, k, v, causal=causal, config=config, out=out)
    assert o.data_ptr() == out.data_ptr()
    assert torch.isfinite(o).all(), "unwritten (NaN) or non-finite output elements"
    err = (o.to(ref_dtype) - ref).abs().max().item()
    peer_err = (peer - ref).abs().max().item()
    bound = 2 * peer_err + FLOOR[q.dtype]
    assert err <= bound, (f"{variant}: max |o - ref| = {err:.3g} > 2 x SDPA's {peer_err:.3g} "
                          "+ floor")


# -- interpreter (CPU): small shapes, ragged lengths, every block shape class --
CPU_LENGTHS = [(1, 1), (17, 17), (1, 33), (33, 1), (47, 70), (70, 47), (64, 64)]
CPU_CONFIGS = [KernelConfig(16, 16, 4, 1), KernelConfig(32, 16, 4, 1), KernelConfig(16, 32, 4, 1)]


# The CUDA-core rungs share the v2 kernel's masking and loop code with v2_kcol / v2_kt, so
# they run on one config only.
CPU_CASES = [(variant, cfg) for variant in LADDER_ONLY
             for cfg in (CPU_CONFIGS[1:2] if variant.endswith("_fma") else CPU_CONFIGS)]


@pytest.mark.skipif(HAS_GPU, reason="interpreter matrix; the GPU matrix covers this")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lq,lk", CPU_LENGTHS)
@pytest.mark.parametrize("variant,config", CPU_CASES,
                         ids=[f"{v}-{c.label()}" for v, c in CPU_CASES])
def test_interpreter_parity(variant: str, config: KernelConfig, lq: int, lk: int, causal: bool,
                            device: torch.device) -> None:
    q, k, v = random_qkv(2, 2, lq, lk, 32, torch.float16, device)
    check_ladder_parity(variant, q, k, v, causal=causal, config=config)


@pytest.mark.skipif(HAS_GPU, reason="interpreter matrix; the GPU matrix covers this")
@pytest.mark.parametrize("d", [16, 64])
@pytest.mark.parametrize("variant", VARIANTS)
def test_interpreter_parity_head_dims(variant: str, d: int, device: torch.device) -> None:
    """Every variant, including the article and production rungs, through :func:`launch`."""
    q, k, v = random_qkv(1, 2, 47, 70, d, torch.float16, device)
    check_ladder_parity(variant, q, k, v, causal=True, config=KernelConfig(32, 16, 4, 1))


def test_launch_rejects_bad_input(device: torch.device) -> None:
    q, k, v = random_qkv(1, 1, 8, 8, 32, torch.float16, device)
    with pytest.raises(ValueError, match="variant must be one of"):
        ladder.launch("v3", q, k, v)
    q40, k40, v40 = random_qkv(1, 1, 8, 8, 40, torch.float16, device)
    with pytest.raises(ValueError, match="power-of-two head dim"):
        ladder.launch("v1", q40, k40, v40)
    q0, k0, v0 = random_qkv(1, 1, 8, 0, 32, torch.float16, device)
    with pytest.raises(ValueError, match="Lk >= 1"):
        ladder.launch("v2_kt", q0, k0, v0)
    with pytest.raises(TypeError, match="dtype"):
        ladder.launch("v1", q.float(), k.float(), v.float())


def test_kernel_names_cover_variants() -> None:
    """The profiler filters launches by these names; every variant must have one."""
    assert set(KERNEL_NAMES) == set(VARIANTS)
    for variant, name in KERNEL_NAMES.items():
        assert name.endswith("_kernel"), (variant, name)


# -- GPU matrix: fp16/bf16 x causal x D x realistic and ragged lengths x configs --
GPU_LENGTHS = [(1, 1), (113, 113), (1000, 1000), (1024, 1024), (1025, 1000), (1000, 1025),
               (113, 203), (1, 1024), (1024, 1)]
GPU_CONFIGS = [None, ARTICLE, KernelConfig(32, 32, 4, 3)]
GPU_CASES = [
    (variant, dtype, causal, d, lq, lk, cfg)
    for variant, dtype, causal, d, (lq, lk), cfg in itertools.product(
        LADDER_ONLY, [torch.float16, torch.bfloat16], [False, True], [32, 64, 128],
        GPU_LENGTHS, GPU_CONFIGS)
    if d == 32 or not variant.endswith("_fma")  # CUDA-core rungs spill registers at D > 32
]


def _case_id(case: tuple) -> str:
    variant, dtype, causal, d, lq, lk, cfg = case
    cfg_label = cfg.label() if isinstance(cfg, KernelConfig) else "default"
    name = str(dtype).removeprefix("torch.")
    return f"{variant}-{name}-{'causal' if causal else 'full'}-d{d}-{lq}x{lk}-{cfg_label}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=_case_id)
def test_gpu_parity(case: tuple, device: torch.device) -> None:
    variant, dtype, causal, d, lq, lk, cfg = case
    q, k, v = random_qkv(2, 3, lq, lk, d, dtype, device)
    check_ladder_parity(variant, q, k, v, causal=causal, config=cfg)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_gpu_profile_workloads(variant: str, device: torch.device) -> None:
    """Each rung is correct on the exact problems ``flashrepro profile`` measures."""
    from flashrepro_harness.bench.profile import WORKLOADS

    for w in WORKLOADS.values():
        if variant not in w.variants:
            continue
        q, k, v = random_qkv(w.batch, w.heads, w.seqlen, w.seqlen, w.head_dim,
                             getattr(torch, w.dtype), device)
        check_ladder_parity(variant, q, k, v, causal=w.causal, config=w.config)
