"""flashrepro.select: the kernel and launch a call gets, a pure function of the inputs'
metadata and the GPU's facts: equal inputs give equal calls, meta tensors do, nothing
launches, no device is asked, and the eager launch runs exactly that call."""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from flashrepro import launch
from flashrepro import select as sel
from flashrepro.configs import NAMED, P_IN_REGISTERS, KernelConfig, _tuned_table
from flashrepro.kernels import LOG2_E
from flashrepro.kernels.call import KernelCall
from flashrepro.kernels.fwd import attn_fwd_kernel
from flashrepro.kernels.fwd_gluon_ws import REGISTERS, attn_fwd_gluon_ws_kernel, row_max_tree
from tests.reference import check_parity, random_qkv
from tests.selection import choose

SRC = Path(__file__).resolve().parents[1] / "src"


def _qkv(b: int = 2, h: int = 16, lq: int = 1024, lk: int | None = None, d: int = 128,
         device: str = "meta") -> tuple[torch.Tensor, ...]:
    """Uninitialised fp16 (B, H, L, D) q, k, v (the article problem's shape by default)."""
    lk = lq if lk is None else lk
    return (torch.empty(b, h, lq, d, dtype=torch.float16, device=device),
            *(torch.empty(b, h, lk, d, dtype=torch.float16, device=device) for _ in range(2)))


def test_sm90_fp16_d128_causal_l1024_runs_the_ws_kernel() -> None:
    """The tuned table's entry for the article problem on sm_90: the warp-specialized kernel,
    two consumers at its tiles, persistent grid of one program per SM, every head in one
    group (K and V of 32 heads fill 16 MiB of the stand-in's 25); its 256 tiles, two per
    program, run in the static snake order whatever the entry's schedule (rule 7)."""
    entry = _tuned_table()["sm90-d128-causal-l1024"]
    chosen = choose(*_qkv(), arch=90, causal=True, num_sms=132)
    call = chosen.call
    assert chosen.config == replace(entry, dynamic_schedule=False)
    assert entry.warp_specialize and not entry.tile_grid
    assert call.kernel is attn_fwd_gluon_ws_kernel
    assert call.grid == (min(2 * 16 * 1024 // entry.block_m, 132),)
    consumers = entry.num_warps // 4
    assert call.kwargs == dict(HEAD_DIM=128, BLOCK_N=entry.block_n, NUM_STAGES=entry.num_stages,
                               CAUSAL=True, STORE_LSE=False, NUM_CONSUMERS=consumers,
                               CONSUMER_REGS=REGISTERS[consumers][0], num_warps=4,
                               maxnreg=REGISTERS[consumers][1])
    assert call.args[5:] == (16 * 1024, 1024, 2, 16, 1, 32, 1024, 1024, 0,
                             LOG2_E / math.sqrt(128))
    assert [list(desc.block_shape) for desc in call.args[:4]] == [
        [1, 1, 64, 128], [1, 1, entry.block_n, 128], [1, 1, entry.block_n, 128],
        [1, 1, 64, 128]]
    assert all(slot is None or slot.base is None for slot in call.args[:5])  # no tensor kept
    assert not (chosen.contiguous_q or chosen.contiguous_kv or chosen.o_buffer)


@pytest.mark.parametrize(("config", "d", "tree"), [
    ("192x128 w12 s3 tma overlap ws", 64, True),
    ("192x128 w12 s3 tma overlap ws dynamic", 64, True),
    ("192x64 w12 s6 tma overlap ws", 64, False),
    ("128x128 w8 s2 tma overlap ws", 64, False),
    ("128x128 w8 s2 tma overlap ws", 128, False),
])
def test_the_row_max_is_a_tree_in_the_192x128_tile_only(config: str, d: int,
                                                        tree: bool) -> None:
    """The ws kernel's softmax takes each row's max as a tree with three consumers and 128-key
    blocks, where it measured 1-2 % faster, and as one chain elsewhere, where the tree measured
    neutral to 3 % slower (lab/2026-12-03-row-max-tree/): the rule the kernel applies to its
    launch's constexprs (tests/ws_protocol.py checks that every softmax call gets it)."""
    call = choose(*_qkv(b=4, lq=4096, d=d), arch=90, config=KernelConfig.parse(config)).call
    assert call.kernel is attn_fwd_gluon_ws_kernel
    assert row_max_tree(call.kwargs["NUM_CONSUMERS"], call.kwargs["BLOCK_N"]) is tree


@pytest.mark.parametrize("arch", [80, 86, 89])
def test_mma_sync_archs_run_the_triton_kernel(arch: int) -> None:
    """sm_80/86/89 (and sm_90 with DISABLE_MMA_V3, whose code is sm_80's): the Triton kernel
    at P_IN_REGISTERS (D = 128), pointer loads (P_IN_REGISTERS asks for no TMA)."""
    chosen = choose(*_qkv(), arch=arch, causal=True)
    call = chosen.call
    assert call.kernel is attn_fwd_kernel and chosen.config == P_IN_REGISTERS
    assert call.grid == (2 * 16 * 1024 // P_IN_REGISTERS.block_m,)
    assert {k: call.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")} == dict(
        BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    assert call.kwargs["USE_TMA"] is False and call.kwargs["CAUSAL"] is True
    assert choose(*_qkv(), arch=90, mma_v3=False, causal=True).call == call


def test_tma_needs_sm90() -> None:
    """A config asking for TMA gets it on sm_90 and in the interpreter, pointer loads below."""
    config = NAMED["fa3-ws"]  # not run by the ws kernel at D = 96: the Triton kernel
    for arch, tma in ((80, False), (89, False), (90, True), (None, True)):
        call = choose(*_qkv(d=96), arch=arch, config=config).call
        assert call.kernel is attn_fwd_kernel and call.kwargs["USE_TMA"] is tma, arch


@pytest.mark.parametrize("config", [None, "article", "fa3-overlap", "fa3-ws", "fa3-ws3"])
@pytest.mark.parametrize("arch", [None, 80, 90])
@pytest.mark.parametrize("causal", [False, True])
def test_equal_inputs_give_equal_selections(config: str | None, arch: int | None,
                                            causal: bool) -> None:
    """Fresh tensors of the same metadata, meta or CPU, give equal selections (kernel, grid,
    every argument, constexprs, copies); another length gives another one."""
    first = choose(*_qkv(d=64), arch=arch, config=config, causal=causal)
    assert choose(*_qkv(d=64), arch=arch, config=config, causal=causal) == first
    assert choose(*_qkv(d=64, device="cpu"), arch=arch, config=config, causal=causal) == first
    assert choose(*_qkv(d=64, lq=2048), arch=arch, config=config, causal=causal) != first


def test_no_device_query_and_no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """select() asks torch.cuda nothing and runs no kernel: every such entry point raises."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("select() queried a device or launched")

    for name in ("is_available", "device_count", "current_device", "get_device_properties",
                 "get_device_capability", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, refuse)
    monkeypatch.setattr(KernelCall, "run", refuse)
    for config in (None, "fa3-overlap", "article"):
        for arch in (None, 80, 90):
            choose(*_qkv(), arch=arch, config=config, causal=True)


def test_runs_without_cuda() -> None:
    """In a process that sees no GPU and compiles for one (no interpreter), select() on meta
    tensors chooses sm_90's ws kernel and sm_80's Triton kernel."""
    code = (
        "import torch\n"
        "from flashrepro.select import select\n"
        "assert not torch.cuda.is_available()\n"
        "q, k, v, o = (torch.empty(2, 16, 1024, 128, dtype=torch.float16, device='meta')"
        " for _ in range(4))\n"
        "lse = torch.empty(2, 16, 1024, device='meta')\n"
        "for arch in (90, 80):\n"
        "    s = select(q, k, v, o, lse, causal=True, scale=None, causal_alignment='top_left',"
        " return_lse=False, config=None, arch=arch, mma_v3=True, num_sms=132,"
        " l2_bytes=50 * 2**20)\n"
        "    print(s.call.kernel.__name__, type(s.call.kernel).__name__)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "DISABLE_MMA_V3")}
    env.update(PYTHONPATH=str(SRC), CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["attn_fwd_gluon_ws_kernel GluonJITFunction",
                                          "attn_fwd_kernel JITFunction"]


@pytest.mark.parametrize("config", [None, "article", "fa3-ws"])
def test_the_eager_launch_runs_the_selection(config: str | None, device: torch.device) -> None:
    """The plan an eager call records holds the call select() makes for its inputs and its
    GPU (launch._gpu_facts), and that launch computes attention."""
    q, k, v = random_qkv(1, 2, 70, 90, 64, torch.float16, device)
    o, lse = check_parity(q, k, v, causal=True, config=config)
    (plan,) = launch._PLANS.values()
    chosen = sel.select(q, k, v, o, lse, causal=True, scale=None, causal_alignment="top_left",
                        return_lse=True, config=config, **launch._gpu_facts(q.device))
    assert plan.call == chosen.call
    assert (plan.contiguous_q, plan.contiguous_kv) == (chosen.contiguous_q, chosen.contiguous_kv)


def test_copies_are_described_not_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where int32 offsets would overflow (the limit lowered here), the selection says which
    tensors the kernel reads through contiguous copies and builds the call for the copies'
    strides; operands() makes them and bind() puts them in the call's slots."""
    monkeypatch.setattr(sel, "INT32_LIMIT", 2**10)
    b, h, lq, d = 1, 2, 40, 32
    q, k, v, o = (torch.empty(d, b, h, lq, dtype=torch.float16, device="meta")
                  .permute(1, 2, 3, 0) for _ in range(4))  # head-dim stride b·h·lq = 80
    assert not sel.fits_int32(q, (3, 32))
    chosen = choose(q, k, v, arch=None, config="article", out=o)
    assert chosen.contiguous_q and chosen.contiguous_kv and chosen.o_buffer
    contiguous = torch.empty(b, h, lq, d).stride()
    assert chosen.call.args[5:17] == 3 * contiguous
    io = chosen.operands(q, k, v, o, torch.empty(b, h, lq, device="meta"))
    assert all(t.is_contiguous() for t in io[:4]) and io[3] is not o
    assert all(a is b for a, b in zip(chosen.bind(io).args[:5], io, strict=True))


def test_empty_calls_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^select needs B, H, Lq and Lk >= 1"):
        choose(*_qkv(lk=0), arch=90)


@pytest.mark.parametrize(("bh", "bound", "balanced", "want"), [
    (32, 15, True, 8),     # 8+8+8+8, not 15+15+2
    (16, 7, True, 4),
    (64, 30, True, 16),
    (32, 60, True, 32),    # all pairs fit: one group
    (31, 15, True, 12),    # prime: 12+12+7, the last group at least half a group
    (7, 3, True, 2),       # divisor 1 below half of 3, and 3+3+1 leaves 1: 2+2+2+1
    (26, 5, True, 4),      # 13 and 26 over the bound, 2 below half: 4x6+2
    (32, 15, False, 15),   # the static persistent causal order keeps the L2 bound
    (1, 15, True, 1),
])
def test_heads_per_group_makes_equal_groups(bh: int, bound: int, balanced: bool,
                                            want: int) -> None:
    """Groups are the largest divisor of B·H under the L2 bound (K and V of that many heads
    in half of L2) when it is at least half the bound, else the largest size whose last
    group is at least half a group; not ``balanced``, the bound itself."""
    from flashrepro.select import heads_per_group
    kv_bytes = 2 * 1024 * 64 * 2
    got = heads_per_group(bh, 1024, 64, 2, 2 * bound * kv_bytes, balanced=balanced)
    assert got == want


def test_heads_per_group_never_leaves_a_small_last_group() -> None:
    """Over every B·H < 200 and bound < 210: the size is within [1, min(B·H, bound)] and the
    last group, where there is a partial one, holds at least half a group."""
    from flashrepro.select import heads_per_group
    kv_bytes = 2 * 1024 * 64 * 2
    for bh in range(1, 200):
        for bound in range(1, 210):
            g = heads_per_group(bh, 1024, 64, 2, 2 * bound * kv_bytes)
            assert 1 <= g <= min(bh, bound)
            assert bh % g == 0 or 2 * (bh % g) >= g, (bh, bound, g)


@pytest.mark.parametrize(("batch", "dynamic"), [(1, False), (2, False), (3, True), (32, True)])
def test_a_table_dynamic_schedule_needs_3_tiles_per_program(
        monkeypatch: pytest.MonkeyPatch, batch: int, dynamic: bool) -> None:
    """A table config with the dynamic schedule keeps it from 3 tiles per program
    (MIN_DYNAMIC_TILES_PER_PROGRAM, lab/2026-12-03-dynamic-schedule-tile-count/): H=16, L=512
    at 128 rows is 64·B tiles, on 64 SMs 2 per program at B=2 (the snake order) and exactly 3
    at B=3. A config the caller names is run as named."""
    dyn = KernelConfig.parse("128x128 w8 s2 tma overlap ws dynamic")
    monkeypatch.setattr(sel, "default_config", lambda *args: dyn)
    q, k, v = _qkv(b=batch, lq=512)
    chosen = choose(q, k, v, arch=90, causal=True, num_sms=64)
    assert chosen.config == replace(dyn, dynamic_schedule=dynamic)
    assert ("DYNAMIC_SCHEDULE" in chosen.call.kwargs) is dynamic
    named = choose(q, k, v, arch=90, causal=True, num_sms=64, config=dyn)
    assert named.config == dyn and "DYNAMIC_SCHEDULE" in named.call.kwargs


@pytest.mark.parametrize(("batch", "split"), [(1, False), (9, False), (10, True), (32, True)])
def test_a_table_split_tail_needs_10_tiles_per_program(
        monkeypatch: pytest.MonkeyPatch, batch: int, split: bool) -> None:
    """A table config with the split tail keeps it from 10 tiles per program
    (MIN_SPLIT_TILES_PER_PROGRAM, lab/2026-12-03-split-tail/): H=16, L=512 at 128 rows is
    64·B tiles, on 64 SMs B per program. The launch then takes a stream counter and float32
    scratch of two 64 x (D + 2) slots per program and consumer, both placeholders until the
    launcher fills them; a config the caller names is run as named."""
    cfg = KernelConfig.parse("128x128 w8 s2 tma overlap ws split")
    monkeypatch.setattr(sel, "default_config", lambda *args: cfg)
    q, k, v = _qkv(b=batch, lq=512)
    chosen = choose(q, k, v, arch=90, causal=False, num_sms=64)
    assert chosen.config == replace(cfg, split_tail=split)
    call = chosen.call
    assert ("SPLIT_TAIL" in call.kwargs) is split
    assert call.scratch == (2 * 64 * 2 * 64 * (q.shape[3] + 2) if split else 0)
    assert call.counters == (2 * 64 * 2 if split else 0)  # a ticket per tail tile and consumer
    if split:
        assert call.kwargs["tile_counter"].numel() == call.kwargs["partials"].numel() == 0
        with pytest.raises(ValueError, match="tile_counter is an empty placeholder"):
            call.run()
        with pytest.raises(ValueError, match=r"tile_counter holds 1 counters, the launch needs "
                                             "256"):
            call.with_counter(torch.zeros(1, dtype=torch.int32)).run()
        with pytest.raises(ValueError, match=r"partials holds 0 elements, the launch needs"):
            call.with_counter(torch.zeros(256, dtype=torch.int32)).run()
    named = choose(q, k, v, arch=90, causal=False, num_sms=64, config=cfg)
    assert named.config == cfg and "SPLIT_TAIL" in named.call.kwargs
    # measured at Lk = Lq only: shorter key ranges (shorter tiles) keep the whole tiles
    short = choose(q, k[:, :, :500], v[:, :, :500], arch=90, causal=False, num_sms=64)
    assert not short.config.split_tail and "SPLIT_TAIL" not in short.call.kwargs


def test_split_tail_is_refused_under_a_causal_mask() -> None:
    """The split tail shares equal tiles out: a causal call with it is refused by name, by
    select() and by the kernel's launch builder, as are its other rules there."""
    from flashrepro.kernels import fwd_gluon_ws

    q, k, v = _qkv(b=2, lq=512)
    with pytest.raises(ValueError, match="split_tail needs causal=False"):
        choose(q, k, v, arch=90, causal=True, num_sms=64,
               config=KernelConfig.parse("128x128 w8 s2 tma overlap ws split"))
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3])
    common = dict(qk_scale=1.0, causal_offset=0, heads_per_group=1, store_lse=False,
                  block_n=128, num_stages=2)
    for bad in (dict(causal=True, num_programs=64), dict(causal=False, num_programs=None),
                dict(causal=False, num_programs=64, dynamic_schedule=True)):
        with pytest.raises(ValueError, match="split_tail needs a non-causal, static persistent"):
            fwd_gluon_ws.kernel_call(q, k, v, o, lse, **common, **bad, split_tail=True)
    many = _qkv(b=64, lq=512)[0]  # 1024 programs of two consumers: 4096 tickets, the most
    fwd_gluon_ws.kernel_call(many, many, many, many, lse, **common, causal=False,
                             num_programs=1024, split_tail=True)
    with pytest.raises(ValueError, match="split_tail takes up to 1024 programs, got 1028"):
        big = _qkv(b=65, lq=512)[0]
        fwd_gluon_ws.kernel_call(big, big, big, big, lse, **common, causal=False,
                                 num_programs=1028, split_tail=True)


@pytest.mark.parametrize(("config", "causal", "balanced"), [
    ("fa3-ws", True, False),                                        # static persistent, causal
    ("fa3-ws", False, True),                                        # no mask: tiles alike
    ("128x128 w8 s2 tma overlap ws dynamic", True, True),
    ("128x128 w8 s2 tma overlap ws tilegrid", True, True),
    ("64x64 w4 s2 tma", True, True),                                # Triton: one program a tile
])
def test_select_balances_groups_except_on_the_static_causal_order(config: str, causal: bool,
                                                                  balanced: bool) -> None:
    """select() passes equal head groups to every launch but the static persistent ws grid
    under a causal mask (its snake order), which keeps the L2 bound: B·H = 32 with a bound of
    15 gives 8 (balanced) or 15."""
    from flashrepro.configs import NAMED, KernelConfig
    from tests.selection import choose
    cfg = NAMED.get(config) or KernelConfig.parse(config)
    q = torch.zeros(2, 16, 1024, 128, dtype=torch.float16)
    kv_bytes = 2 * 1024 * 128 * 2
    chosen = choose(q, q, q, arch=90, causal=causal, num_sms=132, config=cfg,
                    l2_bytes=2 * 15 * kv_bytes)
    kernel = chosen.call.kernel
    names = list(inspect.signature(getattr(kernel, "fn", kernel)).parameters)
    position = names.index("heads_per_group")
    got = (chosen.call.args[position] if position < len(chosen.call.args)
           else chosen.call.kwargs["heads_per_group"])
    assert got == (8 if balanced else 15)
