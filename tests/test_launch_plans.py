"""The launch-plan cache (:mod:`flashrepro.launch`): a repeated call signature skips the full
path but computes the same function on fresh inputs, and never skips a check.

On the CPU the plans relaunch through Triton's interpreter; on a GPU they launch the compiled
kernel directly, so the GPU cases are what cover the direct launch.
"""

from __future__ import annotations

import pytest
import torch

import flashrepro
from flashrepro import launch
from flashrepro.configs import _tuned_table, launch_arch
from tests.conftest import HAS_GPU, ON_EACH_MACHINE
from tests.reference import assert_parity, random_qkv


@pytest.fixture(params=ON_EACH_MACHINE)
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)


def _poison_allocator(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
    """Leave a NaN-filled block of the output's size in torch's caching allocator, so the next
    ``torch.empty`` of that size (the plan's output) most likely starts as NaN: an element the
    kernel does not write then fails the finiteness check."""
    torch.full(shape, float("nan"), dtype=dtype, device=device)


def _calls(q_shape: tuple[int, int, int, int], h_kv: int, dtype: torch.dtype,
           device: torch.device, **kwargs: object) -> None:
    """Three calls of one signature on fresh inputs, each checked against the reference: the
    first builds the plan, the next two run it."""
    b, h, lq, d = q_shape
    for _ in range(3):
        q, k, v = random_qkv(b, h, lq, lq, d, dtype, device, h_kv=h_kv)
        _poison_allocator(q_shape, dtype, device)
        o, lse = flashrepro.attention(q, k, v, return_lse=True, enable_gqa=h != h_kv, **kwargs)
        assert_parity(o, lse, q, k, v, causal=bool(kwargs.get("causal", False)),
                      scale=kwargs.get("scale"))  # type: ignore[arg-type]
    assert launch.plan_count() == 1


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_repeated_calls_reuse_one_plan(causal: bool, device: torch.device) -> None:
    _calls((1, 2, 70, 32), 2, torch.float16, device, causal=causal)


def test_gqa_and_scale_through_a_plan(device: torch.device) -> None:
    _calls((2, 4, 40, 16), 2, torch.float16, device, causal=True, scale=0.3)


def test_each_signature_gets_its_plan(device: torch.device) -> None:
    """Shapes, strides, flags and dtype all key the cache; no two share a plan."""
    q, k, v = random_qkv(1, 2, 33, 33, 16, torch.float16, device)
    calls = [dict(), dict(causal=True), dict(scale=0.5), dict(return_lse=True),
             dict(causal_alignment="bottom_right", causal=True), dict(config="article")]
    for kwargs in calls:
        flashrepro.attention(q, k, v, **kwargs)
    flashrepro.attention(q.transpose(1, 2).contiguous().transpose(1, 2), k, v)  # strides
    flashrepro.attention(q[:, :, :20], k, v)  # Lq
    assert launch.plan_count() == len(calls) + 2
    for kwargs in calls:  # hits
        flashrepro.attention(q, k, v, **kwargs)
    assert launch.plan_count() == len(calls) + 2


def test_a_cached_signature_still_refuses_bad_input(device: torch.device) -> None:
    """After a valid call has cached its plan, inputs equal to it but for a rule they break
    raise the full path's errors."""
    q, k, v = random_qkv(1, 2, 33, 33, 16, torch.float16, device)
    flashrepro.attention(q, k, v, causal=True, scale=1.0)
    with pytest.raises(TypeError, match="causal must be a bool"):
        flashrepro.attention(q, k, v, causal=1, scale=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="scale must be None or a real number"):
        flashrepro.attention(q, k, v, causal=True, scale=True)
    with pytest.raises(ValueError, match="q requires grad"):
        flashrepro.attention(q.clone().requires_grad_(), k, v, causal=True, scale=1.0)
    with pytest.raises(TypeError, match="return_lse must be a bool"):
        flashrepro.attention(q, k, v, causal=True, scale=1.0, return_lse=1)  # type: ignore[arg-type]


def test_out_through_a_plan_is_still_checked(device: torch.device) -> None:
    """``out=`` keys its own plan by its layout; its memory is checked against q, k and v on
    every call, cached or not, and the output lands in it (poisoned first)."""
    q, k, v = random_qkv(1, 2, 33, 33, 16, torch.float16, device)
    out = torch.empty_like(q)
    for _ in range(2):
        q, k, v = random_qkv(1, 2, 33, 33, 16, torch.float16, device)
        out.fill_(float("nan"))
        assert flashrepro.attention(q, k, v, causal=True, out=out) is out
        assert_parity(out, None, q, k, v, causal=True)
    assert launch.plan_count() == 1
    with pytest.raises(ValueError, match="out must not share memory with k"):
        flashrepro.attention(q, k, v, causal=True, out=k)
    with pytest.raises(ValueError, match="out must not share memory with v"):
        flashrepro.attention(q, k, v, causal=True, out=v)
    strided = torch.empty(1, 33, 2, 16, dtype=q.dtype, device=device).transpose(1, 2)
    assert flashrepro.attention(q, k, v, causal=True, out=strided) is strided  # another plan
    assert_parity(strided, None, q, k, v, causal=True)
    assert flashrepro.attention(q, k, v, causal=True, out=q) is q  # allowed; out's plan
    assert launch.plan_count() == 2
    # The plan's fast check compares byte ranges: a partial overlap, or an out that wants grad,
    # must still reach the exact check and its error.
    n = q.numel()
    buf = torch.empty(2 * n, dtype=q.dtype, device=device)
    k_in_buf = buf[n // 2: n // 2 + n].view_as(k).copy_(k)
    with pytest.raises(ValueError, match="out must not share memory with k"):
        flashrepro.attention(q, k_in_buf, v, causal=True, out=buf[:n].view_as(q))
    with pytest.raises(ValueError, match="out requires grad"):
        flashrepro.attention(q, k, v, causal=True, out=torch.empty_like(q).requires_grad_())


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(k for k in _tuned_table() if k.startswith("sm90")))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_every_table_entry_through_its_plan(key: str, dtype: torch.dtype) -> None:
    """On the GPU, each tuned-table entry's kernel launched from its plan (Triton's compiled
    kernel, launched directly, with fresh TMA descriptors) is right on fresh inputs."""
    device = torch.device("cuda")
    _, dk, mask, bucket = key.split("-")
    arch = launch_arch(device)
    if arch != 90:
        pytest.skip(f"sm_90 table entries; this GPU builds sm_{arch}")
    lq = min(int(bucket[1:]), 2048) + 8  # the bucket's length bucket, short enough to be quick
    _calls((2, 4, lq, int(dk[1:])), 2, dtype, device, causal=mask == "causal")
    (plan,) = launch._PLANS.values()
    assert plan.direct is not None, "the plan did not bind the compiled kernel"


@pytest.mark.gpu
def test_plan_on_a_side_stream_and_misaligned_inputs() -> None:
    """A plan launches on the caller's current stream; an input whose address is not 16-byte
    aligned (same shape and strides) gets its own plan, not the aligned one's TMA kernel."""
    device = torch.device("cuda")
    b, h, lq, d = 1, 4, 300, 128
    q, k, v = random_qkv(b, h, lq, lq, d, torch.float16, device)
    flashrepro.attention(q, k, v, causal=True)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        q2, k2, v2 = random_qkv(b, h, lq, lq, d, torch.float16, device)
        o = flashrepro.attention(q2, k2, v2, causal=True)
    stream.synchronize()
    assert_parity(o, None, q2, k2, v2, causal=True)
    buf = torch.randn(q.numel() + 1, dtype=torch.float16, device=device)
    q3 = buf[1:].view(q.shape)  # 2-byte offset
    o3 = flashrepro.attention(q3, k, v, causal=True)
    assert_parity(o3, None, q3, k, v, causal=True)
    assert launch.plan_count() == 2


def test_interpreter_plans_relaunch_through_the_jit_path(device: torch.device) -> None:
    """Under the interpreter a plan keeps no compiled kernel (it relaunches the recorded call);
    on a GPU it binds Triton's compiled kernel."""
    q, k, v = random_qkv(1, 2, 33, 33, 64, torch.float16, device)
    flashrepro.attention(q, k, v)
    (plan,) = launch._PLANS.values()
    assert (plan.direct is not None) == HAS_GPU


def test_a_plan_keeps_no_tensor_of_its_first_call(device: torch.device) -> None:
    """A cached plan must not pin the first call's q, k, v or output in memory (nor, on a GPU,
    in a CUDA-graph pool)."""
    import gc
    import weakref

    q, k, v = random_qkv(1, 2, 33, 33, 64, torch.float16, device)
    o = flashrepro.attention(q, k, v, causal=True)
    refs = [weakref.ref(t) for t in (q, k, v, o)]
    del q, k, v, o
    gc.collect()
    assert launch.plan_count() == 1
    assert all(r() is None for r in refs), "the plan holds a tensor of its first call"


def test_a_dynamic_plan_passes_its_streams_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan of the ws kernel's dynamic schedule records where its counter sits in the bound
    tail (the kernel's tile_counter, after the five io slots) and passes the current stream's
    counter there at every launch, leaving the bound placeholder alone; a plan without one
    passes no tail and fetches no counter."""
    import dataclasses

    from flashrepro.configs import NAMED
    from flashrepro.kernels.call import IO_ARGS, STREAM_COUNTER
    from tests.selection import choose

    q = torch.zeros(3, 16, 1000, 64, dtype=torch.float16)
    chosen = choose(q, q, q, arch=90, causal=True, num_sms=132,
                    config=dataclasses.replace(NAMED["fa3-ws"], dynamic_schedule=True))
    plan = launch._plan(chosen, None, tuple(q.shape), q.stride(), tuple(q.shape[:3]), None)
    values = chosen.call.ordered_values()
    assert values is not None and plan.counter_slot is not None
    assert values[IO_ARGS + plan.counter_slot] is chosen.call.kwargs[STREAM_COUNTER]

    placeholder = torch.empty(0, dtype=torch.int32)
    fresh = torch.zeros(1, dtype=torch.int32)
    fetched: list[int] = []
    seen: list[list | None] = []

    class FakeDirect:
        def __init__(self) -> None:
            self.tail = [7, "x", placeholder]

        def on_stream(self, grid, device, io, tail=None) -> None:
            seen.append(tail)

    def counters(device: torch.device, count: int) -> torch.Tensor:
        fetched.append(count)
        return fresh

    monkeypatch.setattr(launch, "stream_counters", counters)
    direct = FakeDirect()
    small = launch.LaunchPlan(call=chosen.call, direct=direct, grid=(1, 1, 1),  # type: ignore[arg-type]
                              out_shape=(1, 1, 1, 4), out_stride=(4, 4, 4, 1),
                              lse_shape=(1, 1, 1),
                              lse_dummy=torch.empty(1), contiguous_q=False,
                              contiguous_kv=False, counter_slot=2)
    x = torch.zeros(1, 1, 1, 4)
    small.launch(x, x, x)
    assert seen[-1] is not None and seen[-1][:2] == [7, "x"] and seen[-1][2] is fresh
    assert direct.tail[2] is placeholder and fetched == [1]
    dataclasses.replace(small, counter_slot=None).launch(x, x, x)
    assert seen[-1] is None and fetched == [1]


def test_a_split_tail_plan_fetches_its_tickets_and_scratch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan of the split tail asks the stream for the call's ticket count (2 per program and
    consumer; a CUDA-graph capture gets exactly that many) and the call's size of float32
    scratch at every launch, into the tail slots the kernel takes them in."""
    import dataclasses

    from flashrepro.configs import NAMED
    from flashrepro.kernels.call import IO_ARGS, SCRATCH, STREAM_COUNTER
    from tests.selection import choose

    q = torch.zeros(3, 64, 900, 128, dtype=torch.float16)
    chosen = choose(q, q, q, arch=90, causal=False, num_sms=132,
                    config=dataclasses.replace(NAMED["fa3-ws"], split_tail=True))
    call = chosen.call
    assert call.counters == 2 * 132 * 2 and call.scratch == 2 * 132 * 2 * 64 * 130
    plan = launch._plan(chosen, None, tuple(q.shape), q.stride(), tuple(q.shape[:3]), None)
    values = call.ordered_values()
    assert values is not None and plan.counter_slot is not None
    assert plan.scratch_slot is not None
    assert values[IO_ARGS + plan.counter_slot] is call.kwargs[STREAM_COUNTER]
    assert values[IO_ARGS + plan.scratch_slot] is call.kwargs[SCRATCH]

    fetched: list[int] = []
    seen: list[list] = []

    class FakeDirect:
        tail = [None] * 4

        def on_stream(self, grid, device, io, tail=None) -> None:
            seen.append(tail)

    def counters(device: torch.device, count: int) -> torch.Tensor:
        fetched.append(count)
        return torch.zeros(count, dtype=torch.int32)

    monkeypatch.setattr(launch, "stream_counters", counters)
    small = dataclasses.replace(plan, direct=FakeDirect(), counter_slot=1, scratch_slot=3,
                                out_shape=(1, 1, 1, 4), out_stride=(4, 4, 4, 1))
    x = torch.zeros(1, 1, 1, 4)
    small.launch(x, x, x)
    assert fetched == [528]
    assert seen[-1][1].numel() == 528 and seen[-1][3].dtype == torch.float32
    assert seen[-1][3].numel() == call.scratch


def test_a_placeholder_counter_is_never_launched() -> None:
    """KernelCall.run refuses a call whose stream counter is still the empty placeholder (its
    atomics would write address 0) and names the fix."""
    import dataclasses

    from flashrepro.configs import NAMED
    from tests.selection import choose

    q = torch.zeros(3, 16, 1000, 64, dtype=torch.float16)
    chosen = choose(q, q, q, arch=90, causal=True, num_sms=132,
                    config=dataclasses.replace(NAMED["fa3-ws"], dynamic_schedule=True))
    with pytest.raises(ValueError, match=r"tile_counter is an empty placeholder.*with_counter"):
        chosen.call.run()
