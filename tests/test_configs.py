"""Launch configurations: parsing labels, and what the default launch picks per arch."""

from __future__ import annotations

import pytest

from flashrepro.configs import (
    ARTICLE,
    FA3_WS,
    NAMED,
    P_IN_REGISTERS,
    KernelConfig,
    _tuned_table,
    default_config,
    launch_arch,
)
from flashrepro_harness.bench import tune
from flashrepro_harness.cli import build_parser
from flashrepro_harness.commands import tune as tune_cmd

LABELLED = [KernelConfig(64, 64, 4, 3), KernelConfig(64, 32, 4, 3, tma=True),
            KernelConfig(128, 128, 8, 2, tma=True, overlap=True),
            KernelConfig(128, 128, 8, 1, tma=True), KernelConfig(16, 256, 1, 8),
            KernelConfig(128, 64, 8, 4, tma=True, overlap=True, warp_specialize=True),
            KernelConfig(192, 64, 12, 8, tma=True, overlap=True, warp_specialize=True),
            KernelConfig(128, 128, 8, 2, tma=True, overlap=True, warp_specialize=True,
                         tile_grid=True),
            KernelConfig(128, 128, 8, 2, tma=True, overlap=True, warp_specialize=True,
                         dynamic_schedule=True),
            KernelConfig(192, 128, 12, 3, tma=True, overlap=True, warp_specialize=True,
                         dynamic_schedule=True),
            KernelConfig(128, 128, 8, 2, tma=True, overlap=True, warp_specialize=True,
                         split_tail=True)]


@pytest.mark.parametrize("cfg", LABELLED, ids=KernelConfig.label)
def test_parse_inverts_label(cfg: KernelConfig) -> None:
    assert KernelConfig.parse(cfg.label()) == cfg


@pytest.mark.parametrize("name", sorted(NAMED))
def test_parse_names(name: str) -> None:
    assert KernelConfig.parse(name) is NAMED[name]
    assert KernelConfig.parse(f" {name}\n") is NAMED[name]  # stripped, as labels are


@pytest.mark.parametrize(("text", "message"), [
    ("64x64", r"config must be a name in \['article', 'fa3-overlap', 'fa3-ws', 'fa3-ws3', "
              r"'p-in-registers'\] or a label like"),
    ("64x64 w4 s3 overlap", "overlap needs tma, num_stages >= 2"),
    ("64x64 w4 s1 tma overlap", "overlap needs tma, num_stages >= 2"),
    ("128x128 w8 s2 tma ws", "warp_specialize needs overlap, block_n 64 or 128, and block_m 128"),
    ("64x64 w4 s3 tma overlap ws", "warp_specialize needs .* block_m 128 with num_warps 8"),
    ("128x64 w8 s5 tma overlap ws", r"warp_specialize needs .* num_stages·block_n <= 256"),
    ("128x128 w8 s3 tma overlap ws", r"warp_specialize needs .* num_stages·block_n <= 256"),
    ("128x32 w8 s2 tma overlap ws", "warp_specialize needs .* block_n 64 or 128"),
    # the three-consumer tile: BLOCK_M 192 with 12 warps only, and only warp-specialized
    ("192x128 w12 s5 tma overlap ws", r"warp_specialize needs .* block_m 192 with num_warps "
                                      r"12 and num_stages·block_n <= 512"),
    ("192x128 w12 s3 tma overlap", "block_m 192 with 12 warps .* needs warp_specialize"),
    ("192x128 w12 s1 tma overlap ws", r"overlap needs .* \(12 with block_m 192\)"),
    ("128x128 w8 s2 tma overlap tilegrid", "tile_grid needs warp_specialize"),
    ("128x128 w8 s2 tma overlap tilegrid ws", "config must be a name"),  # label order
    # the dynamic schedule: the persistent ws kernel only
    ("128x128 w8 s2 tma overlap dynamic", "dynamic_schedule needs warp_specialize without "
                                          "tile_grid"),
    ("64x64 w4 s3 dynamic", "dynamic_schedule needs warp_specialize"),
    ("128x128 w8 s2 tma overlap ws tilegrid dynamic", "dynamic_schedule needs .* without "
                                                      r"tile_grid \(it schedules the persistent "
                                                      r"grid\), got 128x128 w8 s2 tma overlap "
                                                      "ws tilegrid dynamic"),
    ("128x128 w8 s2 tma overlap ws dynamic tilegrid", "config must be a name"),  # label order
    # the split tail: the static persistent ws kernel only
    ("128x128 w8 s2 tma overlap split", "split_tail needs warp_specialize without tile_grid "
                                        "or dynamic_schedule"),
    ("128x128 w8 s2 tma overlap ws dynamic split", r"split_tail needs .* \(it splits the "
                                                   r"static persistent grid's last rounds\), "
                                                   "got 128x128 w8 s2 tma overlap ws dynamic "
                                                   "split"),
    ("128x128 w8 s2 tma overlap ws tilegrid split", "split_tail needs warp_specialize"),
    ("128x128 w8 s2 tma overlap ws split dynamic", "config must be a name"),  # label order
    ("192x128 w8 s3 tma overlap ws", r"block_m must be one of .* \(or 192 with 12 warps.*got "
                                     r"192"),
    ("128x128 w12 s2 tma overlap ws", r"num_warps must be a power of two in 1..16, got 12 "
                                      r"\(12 only with block_m 192"),
    ("128x128 w8 s2 tma ws overlap", "config must be a name"),  # flags in label order
    ("64x64 w4 s3 fast", "config must be a name"),
    ("\u0666\u0664x64 w4 s3", "config must be a name"),  # Arabic-Indic digits: ASCII only
    ("64x48 w4 s3", r"block_n must be one of \(16, 32, 64, 128, 256\), got 48"),
    ("64x64 w3 s3", "num_warps must be a power of two in 1..16, got 3"),
])
def test_parse_errors_name_the_rule(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KernelConfig.parse(text)


def test_dynamic_schedule_label_and_type() -> None:
    """``dynamic`` closes the label; the flag is a bool, off unless asked (the tuned table's
    entries written before the field load with it off)."""
    import json

    from flashrepro.configs import TUNED_TABLE

    cfg = KernelConfig.parse("fa3-ws3")
    assert not cfg.dynamic_schedule and not FA3_WS.dynamic_schedule
    raw = json.loads(TUNED_TABLE.read_text())
    assert all(not _tuned_table()[key].dynamic_schedule
               for key, entry in raw.items() if "dynamic_schedule" not in entry)
    dynamic = KernelConfig(128, 128, 8, 2, tma=True, overlap=True, warp_specialize=True,
                           dynamic_schedule=True)
    assert dynamic.label() == "128x128 w8 s2 tma overlap ws dynamic"
    assert dynamic.as_dict()["dynamic_schedule"] is True
    assert KernelConfig(**dynamic.as_dict()) == dynamic
    with pytest.raises(TypeError, match="dynamic_schedule must be a bool, got int 1"):
        KernelConfig(128, 128, 8, 2, tma=True, overlap=True, warp_specialize=True,
                     dynamic_schedule=1)  # type: ignore[arg-type]


def test_tune_takes_configs_and_masks() -> None:
    args = build_parser().parse_args(
        ["tune", "--configs", "p-in-registers", "64x64 w4 s3 tma", "--masks", "full",
         "--against-table"])
    assert args.configs == [P_IN_REGISTERS, KernelConfig(64, 64, 4, 3, tma=True)]
    assert args.against_table
    problems = tune.problems([1024], [128], 16384, masks=(False,))
    assert [p.causal for p in problems] == [False]
    assert tune.candidates(256, args.configs) == []  # neither fits D = 256's shared memory


def test_tune_refuses_configs_that_fit_no_problem(capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before any timing (and without a GPU): D = 256 comes after the D = 128 problems."""
    args = build_parser().parse_args(["tune", "--head-dims", "128", "256", "--configs",
                                      "p-in-registers"])
    assert tune_cmd.run(args) == 2
    assert "none of --configs fits D=256" in capsys.readouterr().err


def test_tune_challenge_skips_head_dims_no_challenger_fits(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--against-table` with fa3-ws3 (D = 64 only) over D 64 and 128: D = 128's entries stay
    as they are instead of the run being refused; D = 64 is timed. Timing is stubbed out."""
    import torch

    timed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune_cmd, "launch_arch", lambda: 90)
    monkeypatch.setattr(tune_cmd, "best_config", lambda problem, rounds, calls, pool, incumbent,
                        min_gain: (timed.append(problem.head_dim) or pool[0], []))
    args = build_parser().parse_args(["tune", "--head-dims", "64", "128", "--lengths", "1024",
                                      "--masks", "full", "--configs", "fa3-ws3",
                                      "--against-table"])
    assert tune_cmd.run(args) == 0
    assert timed == [64]
    assert "no challenger in --configs fits D=128; the table's entry stays" in (
        capsys.readouterr().out)


def test_tune_rejects_a_bad_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tune", "--configs", "64x64 w4"])
    assert "argument --configs: config must be a name" in capsys.readouterr().err


# -- the default launch (configs.default_config) --

@pytest.mark.parametrize(("head_dim", "expected"), [
    (32, ARTICLE), (64, ARTICLE), (80, P_IN_REGISTERS), (96, P_IN_REGISTERS),
    (128, P_IN_REGISTERS), (192, KernelConfig(64, 32, 4, 2)),
])
@pytest.mark.parametrize("arch", [80, 86, 89, 120, 121])
def test_default_on_the_mma_sync_path(arch: int, head_dim: int,
                                      expected: KernelConfig) -> None:
    """mma.sync archs (sm_80/86/89, consumer Blackwell sm_120/121, and sm_90 with
    DISABLE_MMA_V3, which launch_arch reports as 80): P in registers for 64 < D <= 128
   (lab/2026-11-29-mma-sync-default/), 64x64 up to D = 64."""
    for causal in (False, True):
        for seqlen in (1, 1024, 100_000):
            assert default_config(head_dim, causal, seqlen, arch) == expected


@pytest.mark.parametrize(("arch", "head_dims"), [(None, (16, 32, 64, 96, 128)),
                                                 (90, (16, 32)), (100, (16, 64, 128)),
                                                 (103, (64, 96, 128))])
def test_default_off_the_table_elsewhere(arch: int | None, head_dims: tuple[int, ...]) -> None:
    """The interpreter, and head dims sm_90+ has no table entry for, keep 64x64 up to D=128."""
    for head_dim in head_dims:
        assert default_config(head_dim, True, 1024, arch) == KernelConfig(64, 64, 4, 3)


def test_default_on_sm90_is_the_tuned_table() -> None:
    table = _tuned_table()
    assert table, "flashrepro/tuned.json is missing or empty"
    for key, cfg in table.items():
        arch, d, mask, bucket = key.split("-")
        length = int(bucket.removeprefix("l"))
        for seqlen in (length, 2 * length - 1):
            got = default_config(int(d.removeprefix("d")), mask == "causal", seqlen,
                                 int(arch.removeprefix("sm")))
            assert got == cfg, key  # the top bucket, 16384, takes longer Lq too
        assert default_config(int(d.removeprefix("d")) - 8, mask == "causal", length,
                              int(arch.removeprefix("sm"))) == cfg, "D pads up to the key's"


@pytest.mark.parametrize(("capability", "disable_mma_v3", "expected"), [
    ((8, 6), "1", 86),     # no wgmma to disable
    ((9, 0), "1", 80),     # Hopper: Triton builds sm_80's mma.sync code
    ((9, 0), "0", 90),
    ((10, 0), "1", 100),   # B200: tcgen05 code whatever DISABLE_MMA_V3 says
    ((12, 0), "1", 120),   # consumer Blackwell: mma.sync anyway
])
def test_launch_arch(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int],
                     disable_mma_v3: str, expected: int) -> None:
    """The arch whose code Triton builds (Triton's getMMAVersionSafe: DISABLE_MMA_V3 turns
    wgmma into mma.sync on sm_90 only; sm_100 keeps tcgen05), hence the default's arch; the
    selection's rule (select.code_arch, no device query) agrees."""
    import torch

    from flashrepro.select import code_arch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setenv("DISABLE_MMA_V3", disable_mma_v3)
    assert launch_arch(torch.device("cuda")) == expected
    assert code_arch(10 * capability[0] + capability[1], disable_mma_v3 == "0") == expected


@pytest.mark.parametrize(("arch", "mma_v3", "dtype", "d", "causal", "offset", "expected"), [
    (90, True, "float16", 128, True, 0, True),
    (90, True, "bfloat16", 64, False, -5, True),    # no mask: the offset does not matter
    (90, True, "float16", 128, True, -1, False),    # bottom-right with Lq > Lk: rows without keys
    (90, True, "float16", 96, True, 0, False),      # D not 64 or 128
    (90, True, "float32", 128, True, 0, False),
    (90, False, "float16", 128, True, 0, False),    # DISABLE_MMA_V3: mma.sync, no wgmma
    (80, True, "float16", 128, True, 0, False),
    (100, True, "float16", 128, True, 0, False),    # Blackwell: no Hopper wgmma
    (None, True, "float16", 128, True, 0, False),   # the interpreter: Triton kernel
])
def test_overlap_applies_only_where_the_gluon_kernel_does(
        arch: int | None, mma_v3: bool, dtype: str, d: int, causal: bool, offset: int,
        expected: bool) -> None:
    """config fa3-overlap selects the Gluon kernel exactly where it applies (the rule of
    flashrepro.select), and the Triton kernel at the config's own tiles elsewhere."""
    import torch

    from flashrepro.kernels.fwd import attn_fwd_kernel
    from flashrepro.kernels.fwd_gluon import attn_fwd_gluon_kernel
    from tests.selection import choose

    lq = 256
    q = torch.empty(1, 2, lq, d, dtype=getattr(torch, dtype), device="meta")
    k, v = (torch.empty(1, 2, lq + offset, d, dtype=q.dtype, device="meta") for _ in range(2))
    chosen = choose(q, k, v, arch=arch, mma_v3=mma_v3, config="fa3-overlap", causal=causal,
                    causal_alignment="bottom_right")
    want = attn_fwd_gluon_kernel if expected else attn_fwd_kernel
    assert chosen.call.kernel is want
    assert chosen.config == NAMED["fa3-overlap"]
    assert chosen.call.kwargs["BLOCK_M"] == 64 and chosen.call.kwargs["num_warps"] == 4


@pytest.mark.parametrize("head_dim", ["96", "8", "512"])
def test_tune_writes_only_table_keys(head_dim: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The table is keyed by D padded to a power of two >= 16 (default_config): --write with
    D=96 would put its winners under a key that no launch reads, so it is refused before any
    timing (and without a GPU); timing D=96 without --write stays allowed. D beyond the
    kernels' 256 is refused when the arguments are parsed."""
    argv = ["tune", "--head-dims", "128", head_dim, "--write"]
    if int(head_dim) > 256:
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        assert "head dims run up to 256" in capsys.readouterr().err
        return
    assert tune_cmd.run(build_parser().parse_args(argv)) == 2
    assert "--write needs --head-dims that are table keys" in capsys.readouterr().err
    assert [tune.table_head_dim(d) for d in (16, 64, 128, 256, 96, 8, 512)] == [
        True, True, True, True, False, False, False]


@pytest.mark.parametrize("present", [True, False])
def test_doctor_reports_the_tuned_table(present: bool, tmp_path, monkeypatch, capsys) -> None:
    from flashrepro import configs
    from flashrepro_harness.commands import doctor

    table = tmp_path / "tuned.json"
    if present:
        table.write_text("{}\n")
    monkeypatch.setattr(configs, "TUNED_TABLE", table)
    doctor.run(build_parser().parse_args(["doctor"]))
    line = next(x for x in capsys.readouterr().out.splitlines() if "tuned table" in x)
    if present:
        assert line.endswith(str(table))
    else:
        assert f"none at {table}" in line and "package data" in line


@pytest.mark.interpreter
@pytest.mark.parametrize(("config", "block_m"), [(None, 64), ("fa3-ws", 128), ("fa3-ws3", 64)])
def test_a_table_gluon_entry_that_cannot_run_falls_back(
        monkeypatch: pytest.MonkeyPatch, config: str | None, block_m: int) -> None:
    """The table picks fa3-ws, but the Gluon kernels cannot run the call (here: the CPU
    interpreter; on sm_90 e.g. D=96): the default launch runs the Triton kernel at
    TRITON_FALLBACK's 64-row tiles, a config given explicitly keeps its own tiles, except a
    192-row one (fa3-ws3), which only the ws kernel runs: TRITON_FALLBACK too; all right, and
    the launch's plan holds the selected call."""
    import torch

    from flashrepro import launch, select
    from flashrepro.kernels.fwd import attn_fwd_kernel
    from tests.reference import check_parity, random_qkv
    from tests.selection import choose

    monkeypatch.setattr(select, "default_config", lambda *args: FA3_WS)
    b, h, lq, d = 1, 2, 200, 96
    q, k, v = random_qkv(b, h, lq, lq, d, torch.float16, torch.device("cpu"))
    o, _ = check_parity(q, k, v, causal=True, config=config)
    chosen = choose(q, k, v, arch=None, config=config, causal=True, return_lse=True, out=o)
    assert chosen.call.kernel is attn_fwd_kernel
    assert chosen.call.grid == (b * h * -(-lq // block_m),)
    assert chosen.call.kwargs["BLOCK_M"] == block_m
    (plan,) = launch._PLANS.values()
    assert plan.call == chosen.call


def test_tune_keeps_the_incumbent_unless_beaten_by_the_margin() -> None:
    """`tune --against-table`: a challenger replaces the table's entry only when faster by more
    than --min-gain; without an incumbent (or one that did not run) the fastest wins."""
    times = {"a": 352.8, "b": 354.5, "c": 360.0}
    assert tune.winner(times, "b", 0.01) == "b"  # 0.5 % faster: a tie, the entry stays
    assert tune.winner(times, "c", 0.01) == "a"  # 2 % faster: the challenger wins
    assert tune.winner(times, "b", 0.0) == "a"
    assert tune.winner(times, None, 0.01) == "a"
    assert tune.winner(times, "gone", 0.01) == "a"  # the incumbent failed: not in times
    args = build_parser().parse_args(["tune", "--against-table"])
    assert args.min_gain == 1.0
    for bad in ("-1", "100", "x"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["tune", "--min-gain", bad])


@pytest.mark.parametrize(("tile_grid", "programs"), [(False, 132), (True, None)])
def test_tile_grid_launches_one_program_per_tile(tile_grid: bool, programs: int | None) -> None:
    """The ws kernel's launch gets the persistent grid (one program per SM, at most one per
    tile) unless the config asks for one program per tile; two or three consumers by
    config."""
    import dataclasses

    import torch

    from flashrepro.kernels.fwd_gluon_ws import attn_fwd_gluon_ws_kernel
    from tests.selection import choose

    q = torch.empty(3, 16, 1000, 64, dtype=torch.float16, device="meta")
    for config in (FA3_WS, NAMED["fa3-ws3"]):
        chosen = choose(q, q, q, arch=90, config=dataclasses.replace(config, tile_grid=tile_grid),
                        num_sms=132)
        tiles = 3 * 16 * -(-1000 // config.block_m)
        assert chosen.call.kernel is attn_fwd_gluon_ws_kernel
        assert chosen.call.grid == ((tiles if programs is None else min(tiles, programs)),)
        assert chosen.call.kwargs["NUM_CONSUMERS"] == config.block_m // 64


@pytest.mark.parametrize("dynamic", [False, True])
def test_dynamic_schedule_reaches_the_ws_kernel(dynamic: bool) -> None:
    """``dynamic_schedule``: the ws kernel's call on the persistent grid carries
    DYNAMIC_SCHEDULE and an empty int32 placeholder for its stream counter on q's device (the
    launcher binds the counter: a plan must hold no memory of its own); without it, neither (the
    static kernel's call as before); two and three consumers."""
    import dataclasses

    import torch

    from flashrepro.kernels.fwd_gluon_ws import attn_fwd_gluon_ws_kernel
    from tests.selection import choose

    q = torch.zeros(3, 16, 1000, 64, dtype=torch.float16)
    for config in (FA3_WS, NAMED["fa3-ws3"]):
        chosen = choose(q, q, q, arch=90, causal=True, num_sms=132,
                        config=dataclasses.replace(config, dynamic_schedule=dynamic))
        assert chosen.call.kernel is attn_fwd_gluon_ws_kernel
        assert chosen.call.grid == (132,)
        kwargs = chosen.call.kwargs
        if dynamic:
            counter = kwargs["tile_counter"]
            assert kwargs["DYNAMIC_SCHEDULE"] is True
            assert counter.dtype == torch.int32 and counter.shape == (0,)
            assert counter.device == q.device
            bound = chosen.call.with_counter(torch.zeros(1, dtype=torch.int32))
            assert bound.kwargs["tile_counter"].shape == (1,)
            slot = chosen.call.counter_slot()
            assert slot is not None
            assert bound.ordered_values()[slot] is bound.kwargs["tile_counter"]
        else:
            assert "DYNAMIC_SCHEDULE" not in kwargs and "tile_counter" not in kwargs
            assert chosen.call.counter_slot() is None
            assert chosen.call.with_counter(torch.zeros(1)) is chosen.call


def test_the_dynamic_schedule_needs_the_persistent_grid() -> None:
    """fwd_gluon_ws.kernel_call refuses dynamic_schedule with one program per tile, naming the
    rule; with programs it keeps at most one per tile."""
    import torch

    from flashrepro.kernels import fwd_gluon_ws

    q = torch.zeros(1, 3, 1000, 64, dtype=torch.float16)
    lse = torch.zeros(1, 3, 1000)
    common = dict(causal=True, qk_scale=0.18, causal_offset=0, heads_per_group=3,
                  store_lse=False, block_n=128, num_stages=2, dynamic_schedule=True)
    assert fwd_gluon_ws.kernel_call(q, q, q, q, lse, num_programs=4, **common).grid == (4,)
    assert fwd_gluon_ws.kernel_call(q, q, q, q, lse, num_programs=1000,
                                    **common).grid == (3 * 8,)  # 128-row tiles
    with pytest.raises(ValueError, match="dynamic_schedule needs num_programs"):
        fwd_gluon_ws.kernel_call(q, q, q, q, lse, num_programs=None, **common)
