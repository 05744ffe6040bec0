"""flashrepro.attention_varlen: packed sequences of different lengths (FlashAttention's
``flash_attn_varlen_func`` layout; :mod:`flashrepro.kernels.varlen`).

Parity against a float64 reference run on each sequence alone, with SDPA per sequence on the
equivalent boolean mask as the peer (tests/varlen_reference.py); every allocation inside the
call starts as NaN and every row of every sequence is compared. Empty sequences, ragged
tails, GQA, causal (bottom-right per sequence) and not, ``seqused_k``.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import flashrepro
from flashrepro import ops
from flashrepro.kernels.varlen import varlen_fwd_kernel
from tests.conftest import HAS_GPU
from tests.reference import compiled_kernels
from tests.varlen_reference import (
    assert_parity,
    poisoned_allocations,
    varlen_reference,
    varlen_sdpa,
)

BACKEND = "inductor" if HAS_GPU else "aot_eager"


def offsets(lengths: list[int]) -> list[int]:
    """Cumulative offsets from 0: [0, l0, l0 + l1, ...]."""
    return [0, *itertools.accumulate(lengths)]


def packed(lengths_q: list[int], lengths_k: list[int], h: int, h_kv: int, d: int,
           dtype: torch.dtype, device: torch.device, qkv_buffer: bool = False):
    """Fresh standard-normal q (total_q, H, D), k and v (total_k, H_kv, D) and their
    offsets; with ``qkv_buffer`` (equal lengths only) q, k and v are slices of one
    (total, H + 2·H_kv, D) tensor, a fused QKV projection's layout."""
    cu_q, cu_k = offsets(lengths_q), offsets(lengths_k)
    if qkv_buffer:
        assert lengths_q == lengths_k
        qkv = torch.randn(cu_q[-1], h + 2 * h_kv, d, device=device).to(dtype)
        q, k, v = qkv[:, :h], qkv[:, h:h + h_kv], qkv[:, h + h_kv:]
    else:
        q = torch.randn(cu_q[-1], h, d, device=device).to(dtype)
        k, v = (torch.randn(cu_k[-1], h_kv, d, device=device).to(dtype) for _ in range(2))
    return q, k, v, cu_q, cu_k


def check_varlen(q, k, v, cu_q: list[int], cu_k: list[int], *, causal: bool,
                 scale: float | None = None, seqused: list[int] | None = None,
                 max_seqlen_q: int | None = None) -> None:
    """Run attention_varlen with poisoned allocations and assert parity of o and lse."""
    device = q.device
    lengths_q = [b - a for a, b in itertools.pairwise(cu_q)]
    lengths_k = [b - a for a, b in itertools.pairwise(cu_k)]
    with poisoned_allocations():
        o, lse = flashrepro.attention_varlen(
            q, k, v, torch.tensor(cu_q, dtype=torch.int32, device=device),
            torch.tensor(cu_k, dtype=torch.int32, device=device),
            max(lengths_q, default=0) if max_seqlen_q is None else max_seqlen_q,
            max(lengths_k, default=0), causal=causal, scale=scale, return_lse=True,
            seqused_k=None if seqused is None else torch.tensor(seqused, dtype=torch.int32,
                                                                device=device))
    assert o.shape == q.shape and o.is_contiguous()
    ref, ref_lse = varlen_reference(q, k, v, cu_q, cu_k, causal=causal, scale=scale,
                                    seqused=seqused)
    peer = varlen_sdpa(q, k, v, cu_q, cu_k, causal=causal, scale=scale, seqused=seqused)
    assert_parity(o, lse, ref, ref_lse, peer)


# -- interpreter: tiny sizes --

CPU_LENGTHS = {
    "ragged": ([5, 0, 70, 1, 33], [9, 3, 65, 0, 100]),  # empty q, empty k, lq > lk, ragged
    "equal": ([40, 17, 64], [40, 17, 64]),
    "one": ([130], [66]),  # three query blocks, causal rows before the first key
}


@pytest.mark.interpreter
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lengths", CPU_LENGTHS.values(), ids=CPU_LENGTHS.keys())
@pytest.mark.parametrize("h,h_kv,d", [(16, 8, 16), (4, 1, 40), (3, 3, 32)])
def test_interpreter_parity(h: int, h_kv: int, d: int, lengths, causal: bool) -> None:
    q, k, v, cu_q, cu_k = packed(*lengths, h, h_kv, d, torch.float16, torch.device("cpu"))
    check_varlen(q, k, v, cu_q, cu_k, causal=causal)


@pytest.mark.interpreter
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_interpreter_seqused_k(causal: bool) -> None:
    """seqused_k: 0 keys, fewer than the segment's, the whole segment, and more (clamped to
    the segment); keys past it never reach the result."""
    lengths_q, lengths_k = [3, 20, 1, 8], [30, 70, 5, 8]
    q, k, v, cu_q, cu_k = packed(lengths_q, lengths_k, 4, 2, 32, torch.float16,
                                 torch.device("cpu"))
    seqused = [0, 33, 5, 100]
    for b in range(4):  # keys past each sequence's used ones: NaN
        used = min(seqused[b], lengths_k[b])
        k[cu_k[b] + used:cu_k[b + 1]] = float("nan")
        v[cu_k[b] + used:cu_k[b + 1]] = float("nan")
    check_varlen(q, k, v, cu_q, cu_k, causal=causal, seqused=seqused)


@pytest.mark.interpreter
def test_interpreter_fused_qkv_views_and_scale() -> None:
    """q, k and v as slices of one fused QKV tensor (token stride H + 2·H_kv heads), a
    non-default scale, max_seqlen_q above the longest sequence."""
    lengths = [33, 0, 12]
    q, k, v, cu_q, cu_k = packed(lengths, lengths, 4, 2, 32, torch.float16,
                                 torch.device("cpu"), qkv_buffer=True)
    check_varlen(q, k, v, cu_q, cu_k, causal=True, scale=0.25, max_seqlen_q=100)


@pytest.mark.interpreter
@pytest.mark.parametrize("given,clamped", [([0, 6, 9000], [0, 6, 12]),
                                           ([-3, 9000, 5], [0, 12, 12])])
def test_interpreter_offsets_out_of_range_are_clamped(given: list[int],
                                                      clamped: list[int]) -> None:
    """Key offsets clamp into [0, total_k], each end to at least its start: a negative
    start reads from 0, an end past total_k stops there, a decreasing end gives an empty
    key range (o = 0, lse = -inf); nothing reads out of bounds."""
    q, k, v, cu_q, _ = packed([4, 4], [6, 6], 2, 2, 16, torch.float16, torch.device("cpu"))
    o, lse = flashrepro.attention_varlen(
        q, k, v, torch.tensor(cu_q, dtype=torch.int32), torch.tensor(given, dtype=torch.int32),
        4, 6, return_lse=True)
    ref, ref_lse = varlen_reference(q, k, v, cu_q, clamped, causal=False)
    assert_parity(o, lse, ref, ref_lse, varlen_sdpa(q, k, v, cu_q, clamped, causal=False))


@pytest.mark.parametrize("shape", [(0, 0), (3, 0), (0, 5)], ids=["no-tokens", "no-keys",
                                                                  "no-queries"])
def test_empty(shape: tuple[int, int], device: torch.device) -> None:
    """total_q = 0: empty outputs; total_k = 0: every row o = 0, lse = -inf."""
    total_q, total_k = shape
    q = torch.randn(total_q, 2, 16, device=device).half()
    k = torch.randn(total_k, 2, 16, device=device).half()
    cu_q = torch.tensor([0, total_q], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, total_k], dtype=torch.int32, device=device)
    o, lse = flashrepro.attention_varlen(q, k, k, cu_q, cu_k, total_q, total_k, causal=True,
                                         return_lse=True)
    assert o.shape == q.shape and lse.shape == (2, total_q)
    assert (o == 0).all() and (lse == float("-inf")).all()


def test_no_sequences(device: torch.device) -> None:
    """B = 0 (cu_seqlens of one element) launches nothing."""
    q = torch.randn(0, 2, 16, device=device).half()
    cu = torch.zeros(1, dtype=torch.int32, device=device)
    assert flashrepro.attention_varlen(q, q, q, cu, cu, 0, 0).shape == q.shape


# -- input rules --

@pytest.mark.parametrize("bad,error,match", [
    (dict(q="2d"), ValueError, r"q must have 3 dims \(total tokens, heads, D\)"),
    (dict(v="shape"), ValueError, "v must have k's shape"),
    (dict(k="heads", v="heads"), ValueError, "must be a multiple of k/v's heads"),
    (dict(cu_seqlens_q="int64"), TypeError, "cu_seqlens_q must have dtype int32"),
    (dict(cu_seqlens_q="2d"), ValueError, r"cu_seqlens_q must have shape \(B \+ 1,\)"),
    (dict(cu_seqlens_k="short"), ValueError, r"cu_seqlens_k must have shape \(B \+ 1,\)"),
    (dict(cu_seqlens_k=[0, 4]), TypeError, "cu_seqlens_k must be an int32 torch.Tensor"),
    (dict(seqused_k="shape"), ValueError, r"seqused_k must have shape \(B,\)"),
    (dict(seqused_k="meta"), ValueError, "seqused_k must be on q's device"),
    (dict(cu_seqlens_k="neg"), ValueError, "cu_seqlens_k must not carry torch's lazy negation"),
    (dict(max_seqlen_q=-1), ValueError, "max_seqlen_q must be >= 0"),
    (dict(max_seqlen_k=2.0), TypeError, "max_seqlen_k must be an int"),
    (dict(max_seqlen_q=True), TypeError, "max_seqlen_q must be an int"),
    (dict(causal=1), TypeError, "causal must be a bool"),
    (dict(return_lse=None), TypeError, "return_lse must be a bool"),
    (dict(scale=float("inf")), ValueError, "scale must be a finite number"),
    (dict(q="float32"), TypeError, "q has dtype torch.float32"),
])
def test_bad_input_is_refused_by_name(bad: dict, error: type, match: str,
                                      device: torch.device) -> None:
    q, k, v, cu_q, cu_k = packed([4, 6], [5, 5], 4, 2, 16, torch.float16, device)
    i32 = dict(dtype=torch.int32, device=device)
    variants = {
        "q": {"2d": q[:, 0], "float32": q.float()},
        "k": {"heads": k[:, :1].expand(-1, 3, -1)},
        "v": {"shape": v[:-1], "heads": v[:, :1].expand(-1, 3, -1)},
        "cu_seqlens_q": {"int64": torch.tensor(cu_q, device=device),
                         "2d": torch.tensor([cu_q], **i32)},
        "cu_seqlens_k": {"short": torch.tensor(cu_k[:2], **i32),
                         "neg": torch._neg_view(-torch.tensor(cu_k, **i32))},
        "seqused_k": {"shape": torch.tensor([1, 2, 3], **i32),
                      "meta": torch.empty(2, dtype=torch.int32, device="meta")},
    }
    args = dict(q=q, k=k, v=v, cu_seqlens_q=torch.tensor(cu_q, **i32),
                cu_seqlens_k=torch.tensor(cu_k, **i32), max_seqlen_q=6, max_seqlen_k=5,
                causal=True, seqused_k=None, return_lse=False, scale=None)
    for name, value in bad.items():
        args[name] = variants[name][value] if isinstance(value, str) else value
    with pytest.raises(error, match=match):
        flashrepro.attention_varlen(**args)


def test_lengths_are_not_specialized() -> None:
    """The totals and head counts are runtime ints (do_not_specialize): a batch of other
    lengths would otherwise compile anew for a total of 1 or one divisible by 16; the
    offsets are tensors and max_seqlen_q sizes only the grid."""
    names = getattr(varlen_fwd_kernel, "do_not_specialize", None)
    if names is None:  # the interpreter's function keeps the decorator's arguments
        names = varlen_fwd_kernel.kwargs["do_not_specialize"]
    assert {"total_q", "total_k", "num_heads", "kv_group"} <= set(names)


# -- torch ops: opcheck, compile, export --

def _case(device: torch.device, lengths_q=(5, 0, 19), lengths_k=(7, 3, 19)):
    q, k, v, cu_q, cu_k = packed(list(lengths_q), list(lengths_k), 4, 2, 16, torch.float16,
                                 device)
    i32 = dict(dtype=torch.int32, device=device)
    return (q, k, v, torch.tensor(cu_q, **i32), torch.tensor(cu_k, **i32),
            max(lengths_q), max(lengths_k)), (cu_q, cu_k)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_opcheck(causal: bool, device: torch.device) -> None:
    args, _ = _case(device)
    torch.library.opcheck(ops.attention_varlen, (*args, causal, None, None))
    used = torch.tensor([2, 3, 0], dtype=torch.int32, device=device)
    torch.library.opcheck(ops.attention_varlen, (*args, causal, 0.3, used))


def test_fake_refuses_bad_input(device: torch.device) -> None:
    args, _ = _case(device)
    with torch._subclasses.FakeTensorMode() as mode:
        q, k, v, cu_q, cu_k = (mode.from_tensor(t) for t in args[:5])
        with pytest.raises(TypeError, match="cu_seqlens_k must have dtype int32"):
            ops.attention_varlen(q, k, v, cu_q, cu_k.long(), 19, 19, True, None, None)
        o, lse = ops.attention_varlen(q, k, v, cu_q, cu_k, 19, 19, True, None, None)
        assert o.shape == q.shape and lse.shape == (q.shape[1], q.shape[0])


def test_compile_fullgraph(device: torch.device) -> None:
    """torch.compile(fullgraph=True): no graph break; the right answer for a new batch of
    lengths with the same totals (no recompile: offsets are tensor data)."""
    torch._dynamo.reset()
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(gm)
        return torch._dynamo.backends.registry.lookup_backend(BACKEND)(gm, example_inputs)

    def f(q, k, v, cu_q, cu_k):
        return flashrepro.attention_varlen(q * 1.0, k, v, cu_q, cu_k, 24, 24, causal=True,
                                           return_lse=True)

    compiled = torch.compile(f, fullgraph=True, backend=backend)
    for lengths_q, lengths_k in [((5, 0, 19), (7, 3, 19)), ((24, 0, 0), (1, 4, 24))]:
        args, (cu_q, cu_k) = _case(device, lengths_q, lengths_k)
        q, k, v = args[:3]
        o, lse = compiled(*args[:5])
        ref, ref_lse = varlen_reference(q, k, v, cu_q, cu_k, causal=True)
        assert_parity(o, lse, ref, ref_lse, varlen_sdpa(q, k, v, cu_q, cu_k, causal=True))
    assert len(compiles) == 1


def test_export(device: torch.device) -> None:
    class Packed(torch.nn.Module):
        def forward(self, q, k, v, cu_q, cu_k):
            return flashrepro.attention_varlen(q, k, v, cu_q, cu_k, 19, 19, causal=True)

    args, _ = _case(device)
    program = torch.export.export(Packed(), args[:5])
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "flashrepro.attention_varlen.default" in targets, targets
    args, (cu_q, cu_k) = _case(device)
    q, k, v = args[:3]
    ref, ref_lse = varlen_reference(q, k, v, cu_q, cu_k, causal=True)
    assert_parity(program.module()(*args[:5]), None, ref, ref_lse,
                  varlen_sdpa(q, k, v, cu_q, cu_k, causal=True))


# -- GPU: real sizes --

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("h,h_kv,d", [(16, 8, 128), (4, 1, 64), (8, 8, 256), (6, 2, 80)])
@pytest.mark.parametrize("same_lengths", [True, False], ids=["self", "cross"])
def test_gpu_parity(h: int, h_kv: int, d: int, causal: bool, dtype: torch.dtype,
                    same_lengths: bool) -> None:
    """16 sequences of random lengths 0..2048 (two of them empty), keys as long as the
    queries (packed prefill) or of their own lengths."""
    generator = torch.Generator().manual_seed(h * 100 + d)
    lengths_q = torch.randint(1, 2049, (16,), generator=generator).tolist()
    lengths_q[3] = lengths_q[9] = 0
    lengths_k = lengths_q if same_lengths else torch.randint(
        0, 2049, (16,), generator=generator).tolist()
    q, k, v, cu_q, cu_k = packed(lengths_q, lengths_k, h, h_kv, d, dtype,
                                 torch.device("cuda"))
    check_varlen(q, k, v, cu_q, cu_k, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_seqused_k(causal: bool) -> None:
    lengths_q, lengths_k = [1, 4, 300, 1], [4096, 1000, 300, 70]
    q, k, v, cu_q, cu_k = packed(lengths_q, lengths_k, 16, 8, 128, torch.bfloat16,
                                 torch.device("cuda"))
    check_varlen(q, k, v, cu_q, cu_k, causal=causal, seqused=[4096, 0, 299, 71])


@pytest.mark.gpu
def test_gpu_new_lengths_compile_nothing() -> None:
    """After a first call, batches of other lengths, totals and max_seqlen run the kernel
    already compiled, and sync nothing (sync debug mode "error")."""
    device = torch.device("cuda")

    def call(lengths: list[int]) -> None:
        q, k, v, cu_q, cu_k = packed(lengths, lengths, 16, 8, 128, torch.bfloat16, device)
        cu_q, cu_k = (torch.tensor(c, dtype=torch.int32, device=device) for c in (cu_q, cu_k))
        torch.cuda.set_sync_debug_mode("error")
        try:
            flashrepro.attention_varlen(q, k, v, cu_q, cu_k, max(lengths), max(lengths),
                                        causal=True)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    call([100, 2000, 1])
    before = len(compiled_kernels(varlen_fwd_kernel))
    for lengths in ([1], [0, 17, 4096], [64] * 33, [1000, 1001, 999, 0]):
        call(lengths)
    assert len(compiled_kernels(varlen_fwd_kernel)) == before
