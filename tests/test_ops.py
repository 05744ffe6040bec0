"""The torch operators (:mod:`flashrepro.ops`): opcheck, and ``flashrepro.attention`` under
``torch.compile(fullgraph=True)``, ``mode="reduce-overhead"`` (CUDA graphs) and
``torch.export``, each with no graph break and the eager answer on fresh inputs.

On the CPU (Triton's interpreter) the compile tests use the ``aot_eager`` backend: the op is
opaque, so what they check (tracing without a break, the fake implementation) is the same.
"""

from __future__ import annotations

import pytest
import torch

import flashrepro
from flashrepro import ops
from tests.conftest import HAS_GPU, ON_EACH_MACHINE
from tests.reference import assert_parity, random_qkv

BACKEND = "inductor" if HAS_GPU else "aot_eager"


@pytest.fixture(params=ON_EACH_MACHINE)
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)


def _qkv(device: torch.device, lq: int = 48, d: int = 32, h: int = 4, h_kv: int = 2):
    return random_qkv(2, h, lq, lq, d, torch.float16, device, h_kv=h_kv)


@pytest.mark.parametrize("op", [ops.attention, ops.attention_lse], ids=["o", "o+lse"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_opcheck(op, causal: bool, device: torch.device) -> None:
    """torch.library.opcheck: schema, fake vs real (shapes, dtypes, strides), dispatch."""
    q, k, v = _qkv(device)
    torch.library.opcheck(op, (q, k, v, causal, None, True, "top_left", None))
    torch.library.opcheck(op, (q, k, v, causal, 0.2, True, "bottom_right", "article"))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_bshd_writes_the_sequence_major_layout(causal: bool,
                                                         device: torch.device) -> None:
    """``attention_bshd``: opcheck (fake and real agree on its strides), its output's memory is
    (B, Lq, H, D) (``transpose(1, 2)`` contiguous, no copy), every element right."""
    q, k, v = _qkv(device)
    torch.library.opcheck(ops.attention_bshd, (q, k, v, causal, None, True, "top_left", None))
    for _ in range(2):  # the second call launches from the plan
        q, k, v = _qkv(device)
        torch.full((2, 48, 4, 32), float("nan"), dtype=q.dtype, device=device)  # poison
        o = ops.attention_bshd(q, k, v, causal, None, True, "top_left", None)
        assert o.shape == q.shape and o.transpose(1, 2).is_contiguous()
        assert_parity(o, None, q, k, v, causal=causal)


def test_fake_implementation_refuses_bad_input(device: torch.device) -> None:
    """The fake implementation runs the same checks, so tracing refuses what eager refuses."""
    q, k, v = _qkv(device)
    with torch._subclasses.FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        with pytest.raises(ValueError, match="enable_gqa"):
            ops.attention(fq, fk, fv, False, None, False, "top_left", None)
        assert ops.attention(fq, fk, fv, False, None, True, "top_left", None).shape == q.shape


@pytest.mark.parametrize("return_lse", [False, True], ids=["o", "o+lse"])
def test_compile_fullgraph(return_lse: bool, device: torch.device) -> None:
    """torch.compile(fullgraph=True) of a function calling flashrepro.attention: no graph
    break (fullgraph raises on one), right on fresh inputs, out= written through a copy."""
    torch._dynamo.reset()

    def f(q, k, v):
        return flashrepro.attention(q * 1.0, k, v, causal=True, enable_gqa=True,
                                    return_lse=return_lse)

    compiled = torch.compile(f, fullgraph=True, backend=BACKEND)
    for _ in range(2):
        q, k, v = _qkv(device)
        result = compiled(q, k, v)
        o, lse = result if return_lse else (result, None)
        assert_parity(o, lse, q, k, v, causal=True)

    def g(q, k, v, out):
        return flashrepro.attention(q, k, v, config="article", out=out)

    q, k, v = random_qkv(1, 2, 40, 40, 16, torch.float16, device)
    out = torch.full_like(q, float("nan"))
    assert torch.compile(g, fullgraph=True, backend=BACKEND)(q, k, v, out) is out
    assert_parity(out, None, q, k, v, causal=False)


def test_export(device: torch.device) -> None:
    """torch.export of a module calling flashrepro.attention holds the flashrepro op, and the
    exported program gives the eager answer on fresh inputs."""

    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            return flashrepro.attention(q, k, v, causal=True, enable_gqa=True)

    q, k, v = _qkv(device)
    program = torch.export.export(Attention(), (q, k, v))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "flashrepro.attention.default" in targets, targets
    q, k, v = _qkv(device)
    assert_parity(program.module()(q, k, v), None, q, k, v, causal=True)



@pytest.mark.parametrize("mode", ["real", "fake"])
def test_make_fx_records_the_op(mode: str, device: torch.device) -> None:
    """Under make_fx's proxy dispatch mode (real tensors too) flashrepro.attention is one
    flashrepro op in the graph, not an untraced launch, and the graph gives the eager answer
    on fresh inputs."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, k, v):
        return flashrepro.attention(q, k, v, causal=True, enable_gqa=True)

    graph = make_fx(f, tracing_mode=mode)(*_qkv(device))
    targets = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    assert targets == ["flashrepro.attention.default"], targets
    q, k, v = _qkv(device)
    assert_parity(graph(q, k, v), None, q, k, v, causal=True)

@pytest.mark.gpu
def test_compile_reduce_overhead() -> None:
    """mode="reduce-overhead" (CUDA graphs): replays on new inputs give the right answer."""
    torch._dynamo.reset()
    device = torch.device("cuda")

    def f(q, k, v):
        return flashrepro.attention(q, k, v, causal=True, enable_gqa=True) * 2.0

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):  # warm-up, record, replays
        q, k, v = random_qkv(2, 16, 512, 512, 128, torch.float16, device, h_kv=8)
        o = compiled(q, k, v).clone()
        assert_parity(o / 2.0, None, q, k, v, causal=True)


def test_eager_op_call_matches_attention(device: torch.device) -> None:
    """torch.ops.flashrepro.attention called eagerly is flashrepro.attention."""
    q, k, v = _qkv(device)
    o = torch.ops.flashrepro.attention(q, k, v, True, None, True, "top_left", None)
    assert torch.equal(o, flashrepro.attention(q, k, v, causal=True, enable_gqa=True))
