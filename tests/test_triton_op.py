"""``torch.ops.flashrepro.attention_triton``, the forward as a ``torch.library.triton_op``:
opcheck, eager answers in both output layouts, compile (fullgraph) and export; inductor's code
launching the Triton kernel itself (on the CPU: generated for sm_90 without a GPU,
:mod:`tests.offline_inductor`; on the GPU: compiled and run, through
``flashrepro.attention`` with ``ops.INLINE_TRITON`` on); the opaque op where the selection is
a Gluon or TMA kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import flashrepro
from flashrepro import ops
from flashrepro.configs import FA3_WS, P_IN_REGISTERS, TRITON_FALLBACK, KernelConfig
from tests.conftest import HAS_GPU, ON_EACH_MACHINE
from tests.reference import assert_parity, random_qkv, relayout

ROOT = Path(__file__).resolve().parent.parent
BACKEND = "inductor" if HAS_GPU else "aot_eager"


@pytest.fixture(params=ON_EACH_MACHINE)
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)


def _qkv(device: torch.device, lq: int = 48, lk: int = 48, d: int = 32):
    return random_qkv(2, 4, lq, lk, d, torch.float16, device, h_kv=2)


def _poison(q: torch.Tensor) -> None:
    """NaN-filled memory of o's size freed just before a call, which the caching allocator
    (GPU) then tends to hand to the op's own output: an element it never writes stays NaN."""
    torch.full_like(q, float("nan"))


@pytest.mark.parametrize("bshd", [False, True], ids=["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_opcheck(causal: bool, bshd: bool, device: torch.device) -> None:
    """torch.library.opcheck: schema, fake against real (shapes, dtypes, strides), dispatch,
    AOT dispatch with dynamic shapes."""
    q, k, v = _qkv(device)
    torch.library.opcheck(ops.attention_triton,
                          (q, k, v, causal, None, True, "top_left", None, bshd))
    torch.library.opcheck(ops.attention_triton,
                          (q, k, v, causal, 0.2, True, "bottom_right", "article", bshd))


@pytest.mark.parametrize("bshd", [False, True], ids=["bhsd", "bshd"])
@pytest.mark.parametrize("config", [None, "article"], ids=["default", "article"])
def test_eager_answer_and_layout(config: str | None, bshd: bool, device: torch.device) -> None:
    """Called eagerly: every element of o and lse right on fresh inputs (Lq != Lk, GQA,
    bottom-right causal); o's memory (B, Lq, H, D) with ``bshd``, (B, H, Lq, D) without."""
    for _ in range(2):  # the second call launches from its plan
        q, k, v = _qkv(device, lq=40, lk=72)
        _poison(q)
        o, lse = ops.attention_triton(q, k, v, True, None, True, "bottom_right", config, bshd)
        assert o.shape == q.shape and lse.shape == q.shape[:3]
        assert (o.transpose(1, 2) if bshd else o).is_contiguous()
        assert_parity(o, lse, q, k, v, causal=True, bottom_right=True)


def test_refuses_what_attention_refuses(device: torch.device) -> None:
    """Eager and fake calls name the argument and the rule, as flashrepro.attention."""
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match="enable_gqa"):
        ops.attention_triton(q, k, v, False, None, False, "top_left", None, False)
    with pytest.raises(ValueError, match="config"):
        ops.attention_triton(q, k, v, False, None, True, "top_left", "64x64", False)
    with torch._subclasses.FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        with pytest.raises(ValueError, match="causal_alignment"):
            ops.attention_triton(fq, fk, fv, True, None, True, "left", None, True)


@pytest.mark.parametrize("bshd", [False, True], ids=["bhsd", "bshd"])
def test_compile_fullgraph(bshd: bool, device: torch.device) -> None:
    """torch.compile(fullgraph=True) of the op (inductor on the GPU, aot_eager on the CPU,
    where the traced body calls attention_lse): right on fresh inputs, two calls."""
    torch._dynamo.reset()

    def f(q, k, v):
        o, lse = ops.attention_triton(q * 1.0, k, v, True, None, True, "top_left", None, bshd)
        return o, lse

    compiled = torch.compile(f, fullgraph=True, backend=BACKEND)
    for _ in range(2):
        q, k, v = _qkv(device)
        o, lse = compiled(q, k, v)
        assert_parity(o, lse, q, k, v, causal=True)


def test_export(device: torch.device) -> None:
    """torch.export keeps the op (a triton_op is not decomposed by export), and the exported
    program gives the eager answer on fresh inputs."""

    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            return ops.attention_triton(q, k, v, True, None, True, "top_left", None, True)

    program = torch.export.export(Attention(), _qkv(device))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "flashrepro.attention_triton.default" in targets, targets
    q, k, v = _qkv(device)
    o, lse = program.module()(q, k, v)
    assert_parity(o, lse, q, k, v, causal=True)


@pytest.mark.parametrize(("head_dim", "causal", "arch", "expected"), [
    (128, True, 90, KernelConfig(64, 64, 4, 3)),   # table: fa3-ws -> TRITON_FALLBACK, no TMA
    (64, False, 90, KernelConfig(64, 64, 4, 3)),   # table: fa3-ws3
    (128, True, 80, P_IN_REGISTERS),               # mma.sync rule
    (256, False, None, KernelConfig(64, 32, 4, 2)),  # above D = 128
])
def test_inline_config(head_dim: int, causal: bool, arch: int | None,
                       expected: KernelConfig) -> None:
    """config=None runs the default launch's config without TMA, TRITON_FALLBACK's tiles
    where the default is a Gluon config."""
    cfg = ops.inline_config(head_dim, causal, 1024, arch)
    assert cfg == expected and not (cfg.tma or cfg.overlap)
    assert TRITON_FALLBACK.tma and FA3_WS.overlap  # the rule's premises


def _offline_summaries(*args: str) -> dict[str, dict]:
    """:func:`tests.offline_inductor.main`'s summaries, run in a process without the
    interpreter."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    run = subprocess.run([sys.executable, "-m", "tests.offline_inductor", *args], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return {line["config"]: line["summary"] for line in lines}


def test_inductor_code_launches_the_kernel_itself() -> None:
    """Inductor's code for sm_90 (generated without a GPU): the Triton kernel's launch is in
    the code itself, once, and no flashrepro op is called, for config None (the Qwen3 layer
    shape, whose default launch is the Gluon ws kernel) and P_IN_REGISTERS, o born
    (B, L, H, D); a Gluon or TMA config calls the opaque attention_lse instead of handing
    descriptors to wrap_triton (whose launch inductor would drop: the output never written)."""
    inline = _offline_summaries("--bshd", "--config", "default", "--config", "p-in-registers")
    for label, summary in inline.items():
        assert summary["flashrepro_ops"] == [], label
        assert [k["source"] for k in summary["kernels"].values()] == ["attn_fwd_kernel"], label
        assert [k["runs"] for k in summary["kernels"].values()] == [1], label
        assert summary["copies"] == 0, label
    opaque = _offline_summaries("--config", "fa3-ws", "--config", "fa3-overlap",
                                "--config", "64x64 w4 s3 tma")
    assert set(opaque) == {"fa3-ws", "fa3-overlap", "64x64 w4 s3 tma"}
    for label, summary in opaque.items():
        assert summary["flashrepro_ops"] == ["attention_lse"], label
        assert summary["kernels"] == {}, label


# -- GPU: flashrepro.attention compiled with ops.INLINE_TRITON on --


def _compiled_code(f, *args, **compile_kwargs):
    """(result, inductor's code) of torch.compile(f, fullgraph=True) on ``args``."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    result, codes = run_and_get_code(torch.compile(f, fullgraph=True, **compile_kwargs), *args)
    return result, "\n".join(codes)


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "h", "h_kv", "lq", "lk", "d", "dtype", "layout", "bottom_right"), [
    (1, 16, 8, 1024, 1024, 128, torch.bfloat16, "bshd", False),  # Qwen3-0.6B's layer
    (2, 4, 4, 200, 333, 64, torch.float16, "bhsd", True),
    (1, 6, 2, 130, 97, 96, torch.bfloat16, "bshd", True),        # D not a power of two
    (2, 2, 1, 64, 64, 256, torch.float16, "bhsd", False),
])
def test_compiled_attention_inlines_the_kernel(b, h, h_kv, lq, lk, d, dtype, layout,
                                               bottom_right,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With INLINE_TRITON on, inductor's code launches attn_fwd_kernel itself (no flashrepro
    op), and o and lse are right in every element on fresh inputs; also with out=."""
    monkeypatch.setattr(ops, "INLINE_TRITON", True)
    align = "bottom_right" if bottom_right else "top_left"

    def f(q, k, v):
        return flashrepro.attention(q, k, v, causal=True, enable_gqa=h != h_kv,
                                    causal_alignment=align, return_lse=True)

    order = (0, 2, 1, 3) if layout == "bshd" else (0, 1, 2, 3)
    for step in range(2):
        q, k, v = (relayout(t, order) for t in random_qkv(b, h, lq, lk, d, dtype,
                                                           torch.device("cuda"), h_kv=h_kv))
        _poison(q)
        if step == 0:
            (o, lse), code = _compiled_code(f, q, k, v)
            assert "attn_fwd_kernel" in code and "torch.ops.flashrepro" not in code
            compiled = torch.compile(f, fullgraph=True)
        else:
            o, lse = compiled(q, k, v)
        assert_parity(o, lse, q, k, v, causal=True, bottom_right=bottom_right)

    out = torch.full_like(q, float("nan"))
    g = torch.compile(lambda q, k, v, out: flashrepro.attention(
        q, k, v, causal=True, enable_gqa=h != h_kv, causal_alignment=align, out=out),
        fullgraph=True)
    assert g(q, k, v, out) is out
    assert_parity(out, None, q, k, v, causal=True, bottom_right=bottom_right)


@pytest.mark.gpu
def test_compiled_gluon_config_calls_the_opaque_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config that selects a Gluon kernel (sm_90) or a TMA launch is not handed to
    wrap_triton: the compiled code calls attention_lse, right on fresh inputs."""
    monkeypatch.setattr(ops, "INLINE_TRITON", True)
    major, _ = torch.cuda.get_device_capability()
    for config in ["fa3-ws", "64x64 w4 s3 tma"] if major == 9 else ["64x64 w4 s3 tma"]:
        def f(q, k, v, config=config):
            return flashrepro.attention(q, k, v, causal=True, enable_gqa=True, config=config)

        q, k, v = random_qkv(1, 16, 512, 512, 128, torch.bfloat16, torch.device("cuda"),
                             h_kv=8)
        o, code = _compiled_code(f, q, k, v)
        if major >= 9:
            assert "torch.ops.flashrepro.attention_lse" in code, config
            assert "attn_fwd_kernel" not in code, config
        assert_parity(o, None, q, k, v, causal=True)


@pytest.mark.gpu
def test_compiled_inline_dynamic_and_reduce_overhead(monkeypatch: pytest.MonkeyPatch) -> None:
    """INLINE_TRITON on: dynamic shapes (the body calls the opaque op) and CUDA graphs
    (mode="reduce-overhead", replays on new inputs) give the right answer."""
    monkeypatch.setattr(ops, "INLINE_TRITON", True)
    device = torch.device("cuda")

    def f(q, k, v):
        return flashrepro.attention(q, k, v, causal=True, enable_gqa=True) * 2.0

    torch._dynamo.reset()
    dynamic = torch.compile(f, fullgraph=True, dynamic=True)
    for lq in (96, 160, 224):
        q, k, v = random_qkv(2, 8, lq, lq, 64, torch.float16, device, h_kv=4)
        assert_parity(dynamic(q, k, v) / 2.0, None, q, k, v, causal=True)
    torch._dynamo.reset()
    graphs = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for _ in range(4):  # warm-up, record, replays
        q, k, v = random_qkv(1, 16, 1024, 1024, 128, torch.bfloat16, device, h_kv=8)
        o = graphs(q, k, v).clone()
        assert_parity(o / 2.0, None, q, k, v, causal=True)
