"""One test per error path of flashrepro's public API.

Each bad input must raise a TypeError or ValueError whose message names the argument and the
rule it breaks, before anything reaches Triton. The rules are listed in
:func:`flashrepro.validation.validate` and :func:`flashrepro.attention`'s docstring.
"""

from __future__ import annotations

import pytest
import torch

import flashrepro
import flashrepro.api
import flashrepro.validation
from flashrepro import KernelConfig
from tests.reference import assert_parity, random_qkv


@pytest.fixture
def qkv(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Valid small inputs: (B, H, L, D) = (2, 4, 8, 16), float16."""
    return random_qkv(2, 4, 8, 8, 16, torch.float16, device)


# -- flags --

@pytest.mark.parametrize("flag", ["causal", "enable_gqa", "return_lse"])
def test_flag_not_bool(qkv, flag: str) -> None:
    with pytest.raises(TypeError, match=rf"^{flag} must be a bool, got str 'yes'"):
        flashrepro.attention(*qkv, **{flag: "yes"})


# -- q, k, v: type, rank, dtype --

def test_input_not_a_tensor(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(TypeError, match=r"^v must be a torch.Tensor, got ndarray"):
        flashrepro.attention(q, k, v.numpy(force=True))


def test_wrong_rank(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^k must have 4 dims \(B, H, L, D\), got shape "
                                         r"\(2, 4, 8\)"):
        flashrepro.attention(q, k[:, :, :, 0], v)


def test_unsupported_dtype(qkv) -> None:
    """The rule, and on the CPU (Triton's interpreter) that bfloat16 needs a GPU."""
    q, k, v = qkv
    where = r" \(bfloat16 on a GPU only\)" if q.device.type == "cpu" else ""
    with pytest.raises(TypeError, match=r"^q has dtype torch.float32; supported dtypes: "
                                        rf"float16, bfloat16{where}$"):
        flashrepro.attention(q.float(), k, v)


def test_mixed_dtypes(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(TypeError, match=r"^q, k and v must share one dtype, got torch.float16, "
                                        r"torch.bfloat16, torch.float16$"):
        flashrepro.attention(q, k.bfloat16(), v)


# -- devices --

def test_mixed_devices(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^q, k and v must be on one device, got .*meta"):
        flashrepro.attention(q, k.to("meta"), v)


def test_cpu_tensors_outside_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flashrepro.validation, "interpreter_mode", lambda: False)
    q, k, v = random_qkv(1, 2, 8, 8, 16, torch.float16, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"^q, k and v are CPU tensors, but the kernels run on "
                                         r"CUDA devices; .*TRITON_INTERPRET=1"):
        flashrepro.attention(q, k, v)


def test_unsupported_device() -> None:
    q = torch.empty(1, 2, 8, 16, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match=r"^q, k and v must be CUDA tensors \(or CPU tensors "
                                         r"under TRITON_INTERPRET=1\), got device meta"):
        flashrepro.attention(q, q, q)


# -- autograd --

def test_requires_grad(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^k requires grad, but flashrepro's attention is "
                                         r"forward-only \(no autograd\); .*torch.no_grad\(\)"):
        flashrepro.attention(q, k.requires_grad_(), v)


# -- shapes --

def test_v_shape_differs_from_k(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^v must have k's shape \(B, H_kv, Lk, D\) = "
                                         r"\(2, 4, 8, 16\), got \(2, 4, 7, 16\)"):
        flashrepro.attention(q, k, v[:, :, :7])


def test_batch_mismatch(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^k and v must have q's batch size B=1, got 2"):
        flashrepro.attention(q[:1], k, v)


def test_head_dim_mismatch(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^k and v must have q's head dim D=8, got 16"):
        flashrepro.attention(q[..., :8], k, v)


@pytest.mark.parametrize("d", [0, 257])
def test_head_dim_out_of_range(d: int, device: torch.device) -> None:
    q, k, v = random_qkv(1, 1, 4, 4, d, torch.float16, device)
    with pytest.raises(ValueError, match=rf"^head dim D must be in 1..256, got {d}$"):
        flashrepro.attention(q, k, v)


def test_heads_mismatch_without_gqa(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^k and v must have q's head count H=4, got 2 "
                                         r"\(pass enable_gqa=True"):
        flashrepro.attention(q, k[:, :2], v[:, :2])


@pytest.mark.parametrize("h_q", [2, 3])
def test_heads_mismatch_not_a_group_does_not_suggest_gqa(qkv, h_q: int) -> None:
    """k/v with 4 heads and q with 2 (or 3): enable_gqa=True would fail too (H must be a
    multiple of H_kv), so the message must not suggest it."""
    q, k, v = qkv
    with pytest.raises(ValueError, match=rf"^k and v must have q's head count H={h_q}, "
                                         r"got 4$"):
        flashrepro.attention(q[:, :h_q], k, v)


@pytest.mark.parametrize("h_kv", [3, 0])
def test_heads_not_a_multiple_with_gqa(qkv, h_kv: int) -> None:
    q, k, v = qkv
    k, v = k[:, :1].expand(-1, h_kv, -1, -1), v[:, :1].expand(-1, h_kv, -1, -1)
    with pytest.raises(ValueError, match=rf"^with enable_gqa, q's heads H=4 must be a multiple "
                                         rf"of k/v's heads H_kv={h_kv}$"):
        flashrepro.attention(q, k, v, enable_gqa=True)


def test_too_many_query_rows(device: torch.device) -> None:
    # a broadcast view: 2^20 x 2^10 x 2^15 rows of one stored element
    q = torch.randn(1, 1, 1, 16, device=device).half().expand(2**20, 2**10, 2**15 + 1, 16)
    with pytest.raises(ValueError, match=r"^B·H·cdiv\(Lq, 16\) = 2200096997376 exceeds CUDA's "
                                         r"launch limit of 2147483647 programs \(one per head "
                                         r"and query block; blocks may be as small as 16 "
                                         r"rows\)$"):
        flashrepro.attention(q, q, q)


def test_too_many_heads_for_short_queries(device: torch.device) -> None:
    """Lq = 1: B·H·Lq = 2^32 rows is below 16 x the grid limit, but every (batch, head) needs
    a program of its own, and 2^32 of them exceed CUDA's gridDim.x (Triton's launcher failed
    with an OverflowError)."""
    q = torch.randn(1, 1, 1, 16, device=device).half().expand(2**16, 2**16, 1, 16)
    with pytest.raises(ValueError, match=r"^B·H·cdiv\(Lq, 16\) = 4294967296 exceeds CUDA's "):
        flashrepro.attention(q, q, q)


# -- scale, causal_alignment --

@pytest.mark.parametrize("scale", ["0.5", True, torch.tensor(0.5)], ids=["str", "bool", "tensor"])
def test_scale_not_a_number(qkv, scale: object) -> None:
    with pytest.raises(TypeError, match=r"^scale must be None or a real number, got "):
        flashrepro.attention(*qkv, scale=scale)


@pytest.mark.parametrize("scale", [-0.1, float("nan"), float("inf"), -float("inf")])
def test_scale_negative_or_not_finite(qkv, scale: float) -> None:
    with pytest.raises(ValueError, match=rf"^scale must be a finite number >= 0, got {scale}$"):
        flashrepro.attention(*qkv, scale=scale)


def test_bad_causal_alignment(qkv) -> None:
    with pytest.raises(ValueError, match=r"^causal_alignment must be 'top_left' .* or "
                                         r"'bottom_right', got 'lower_right'$"):
        flashrepro.attention(*qkv, causal=True, causal_alignment="lower_right")


# -- out --

def test_out_not_a_tensor(qkv) -> None:
    with pytest.raises(TypeError, match=r"^out must be a torch.Tensor or None, got list$"):
        flashrepro.attention(*qkv, out=[])


@pytest.mark.parametrize("change", ["shape", "dtype", "device"])
def test_out_mismatch(qkv, change: str) -> None:
    q = qkv[0]
    out = {"shape": lambda: torch.empty_like(q[:, :, :7]),
           "dtype": lambda: torch.empty_like(q, dtype=torch.bfloat16),
           "device": lambda: torch.empty_like(q, device="meta")}[change]()
    with pytest.raises(ValueError, match=r"^out must match q's shape \(2, 4, 8, 16\), dtype "
                                         r"torch.float16 and device"):
        flashrepro.attention(*qkv, out=out)


def test_out_overlaps_itself(qkv) -> None:
    q = qkv[0]
    out = torch.empty_like(q[:, :1]).expand(q.shape)  # stride 0 over the heads
    with pytest.raises(ValueError, match=r"^out must not overlap itself .*got strides "
                                         r"\(128, 0, 16, 1\)"):
        flashrepro.attention(*qkv, out=out)


# -- config --

def test_config_wrong_type(qkv) -> None:
    with pytest.raises(TypeError, match=r"^config must be a KernelConfig, a name from "
                                        r"\['article', 'fa3-overlap', 'fa3-ws', 'fa3-ws3', "
                                        r"'p-in-registers'\] or None, got dict$"):
        flashrepro.attention(*qkv, config={"block_m": 64})


def test_config_unknown_name(qkv) -> None:
    with pytest.raises(ValueError, match=r"^config must be a KernelConfig or one of "
                                         r"\['article', 'fa3-overlap', 'fa3-ws', 'fa3-ws3', "
                                         r"'p-in-registers'\], got 'fast'$"):
        flashrepro.attention(*qkv, config="fast")


@pytest.mark.parametrize("fields,message", [
    ((48, 64, 4, 3), r"^block_m must be one of \(16, 32, 64, 128, 256\) \(or 192 with 12 warps, "
                     r"the ws kernel's three consumers\), got 48$"),
    ((64, 8, 4, 3), r"^block_n must be one of \(16, 32, 64, 128, 256\), got 8$"),
    ((64, 64, 3, 3), r"^num_warps must be a power of two in 1..16, got 3 \(12 only with "
                     r"block_m 192, the ws kernel's three consumers\)$"),
    ((64, 64, 4, 0), r"^num_stages must be in 1..8, got 0$"),
], ids=["block_m", "block_n", "num_warps", "num_stages"])
def test_bad_kernel_config(fields: tuple[int, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KernelConfig(*fields)


@pytest.mark.gpu
def test_config_too_big_for_the_gpu(device: torch.device) -> None:
    """8 stages of 64-row K and V tiles at D=256 need 544 KiB of shared memory (more than any
    GPU has); Triton compiles it in seconds and refuses it at launch. (A 256x256, 1-warp
    config compiled for more than 4 minutes and held up the GPU suite:
    lab/2026-11-29-gpu-suite-wall-time/.)"""
    q, k, v = random_qkv(1, 1, 256, 256, 256, torch.float16, device)
    with pytest.raises(ValueError, match=r"^config 64x64 w4 s8 does not fit this GPU for "
                                         r"D=256: "):
        flashrepro.attention(q, k, v, config=KernelConfig(64, 64, 4, 8))


# -- the article kernel's own rules --

def test_article_head_dim_not_a_power_of_two(device: torch.device) -> None:
    q, k, v = random_qkv(1, 1, 8, 8, 40, torch.float16, device)
    with pytest.raises(ValueError, match=r"^the article kernel needs a power-of-two head dim "
                                         r">= 16, got D=40$"):
        flashrepro.article_attention(q, k, v)


def test_article_block_m_not_a_multiple_of_block_n(qkv) -> None:
    with pytest.raises(ValueError, match=r"^the article kernel needs BLOCK_M to be a multiple "
                                         r"of BLOCK_N, got 32x64$"):
        flashrepro.article_attention(*qkv, config=KernelConfig(32, 64, 4, 1))


def test_article_too_many_heads(device: torch.device) -> None:
    q = torch.randn(1, 1, 1, 16, device=device).half().expand(2, 32768, 4, 16)
    with pytest.raises(ValueError, match=r"^the article kernel needs B·H <= 65535 \(CUDA's "
                                         r"gridDim.y\), got 65536$"):
        flashrepro.article_attention(q, q, q)


def test_article_config_wrong_type(qkv) -> None:
    with pytest.raises(TypeError, match=r"^config must be a KernelConfig, got str$"):
        flashrepro.article_attention(*qkv, config="article")


# -- review findings: bf16 under the interpreter, out sharing memory with an input --

@pytest.mark.interpreter
def test_bfloat16_on_cpu_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flashrepro.validation, "interpreter_mode", lambda: True)
    q, k, v = random_qkv(1, 2, 8, 8, 16, torch.bfloat16, torch.device("cpu"))
    with pytest.raises(TypeError, match=r"bfloat16 CPU tensors: .*triton issue 11584"):
        flashrepro.attention(q, k, v)


def test_out_shares_memory_with_k(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^out must not share memory with k"):
        flashrepro.attention(q, k, v, out=k)


def test_out_interleaved_with_q_and_sharing_one_element(device: torch.device) -> None:
    """q and out as interleaved views of one buffer that share one column are refused."""
    buf = torch.randn(2, 8, 3 * 16, device=device).half()
    q = buf[:, :, :16].unsqueeze(1)            # (2, 1, 8, 16), row stride 48
    out = buf.flatten()[15:].as_strided(q.shape, q.stride())  # starts on q's last column
    _, k, v = random_qkv(2, 1, 8, 8, 16, torch.float16, device)
    with pytest.raises(ValueError, match=r"^out must not share memory with q"):
        flashrepro.attention(q, k, v, out=out)


def test_out_interleaved_with_q_and_disjoint_is_accepted(device: torch.device) -> None:
    """Heads of one (B, L, H, D) buffer: q, k, v and out interleave but share no element (the
    layout of the > 2^31-element test in test_semantics.py, at a small size)."""
    buf = torch.randn(1, 40, 4, 16, device=device).half()
    q, k, v, out = (buf[:, :, i : i + 1].transpose(1, 2) for i in range(4))
    out.fill_(float("nan"))
    o = flashrepro.attention(q, k, v, out=out)
    assert o is out
    assert_parity(o, None, q, k, v, causal=False)


def test_out_partly_overlaps_q(device: torch.device) -> None:
    buf = torch.randn(2 * 4 * 8 * 16 + 16, device=device).half()
    q = buf[:2 * 4 * 8 * 16].view(2, 4, 8, 16)
    out = buf[16:].view(2, 4, 8, 16)
    _, k, v = random_qkv(2, 4, 8, 8, 16, torch.float16, device)
    with pytest.raises(ValueError, match=r"^out must not share memory with q"):
        flashrepro.attention(q, k, v, out=out)


@pytest.mark.parametrize("consumers,d", [(1, 64), (4, 64), (3, 128)])
def test_ws_launch_refuses_consumer_counts_it_has_no_registers_for(consumers: int, d: int) -> None:
    """The warp-specialized kernel runs 2 consumer warpgroups, or 3 at D = 64 (FA3's 192-row
    tile: 160 registers each would spill at D = 128); anything else is refused, by rule,
    before any launch."""
    from flashrepro.kernels import fwd_gluon_ws

    q = torch.randn(1, 2, 64, d)
    with pytest.raises(ValueError, match=rf"num_consumers must be 2, or 3 with D = 64; got "
                                         rf"{consumers} with D = {d}"):
        fwd_gluon_ws.kernel_call(q, q, q, q, torch.empty(1, 2, 64), causal=False,
                                 qk_scale=1.0, causal_offset=0, heads_per_group=1,
                                 store_lse=False, block_n=128, num_stages=2, num_programs=None,
                                 num_consumers=consumers)
