"""What the default launch does with every entry of the tuned table (flashrepro/tuned.json):
which kernel :func:`flashrepro.select.select` chooses for inputs in the entry's bucket, and
that the table's fields (tile_grid included) survive ``tune --against-table --write``."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
import torch

from flashrepro import configs
from flashrepro.configs import FA3_WS, TRITON_FALLBACK, KernelConfig, _tuned_table
from flashrepro.kernels.fwd import attn_fwd_kernel
from flashrepro.kernels.fwd_gluon import attn_fwd_gluon_kernel
from flashrepro.kernels.fwd_gluon_ws import attn_fwd_gluon_ws_kernel
from flashrepro.select import MIN_DYNAMIC_TILES_PER_PROGRAM, MIN_SPLIT_TILES_PER_PROGRAM
from flashrepro_harness.cli import build_parser
from flashrepro_harness.commands import tune as tune_cmd
from tests.reference import check_parity, random_qkv
from tests.selection import choose

ALIGNMENTS = [("top_left", 1, 1), ("bottom_right", 1, 1), ("bottom_right", 2, 1),
              ("bottom_right", 1, 2), ("top_left", 1, 2)]  # (alignment, Lq/Lk as num/den)
LAYOUTS = ["contiguous", "bhld-transposed", "misaligned", "head-dim-stride-2"]


def _tensor(b: int, h: int, length: int, d: int, layout: str) -> torch.Tensor:
    """An fp16 (B, H, L, D) meta tensor in one of :data:`LAYOUTS` (its address: the offset)."""
    if layout == "contiguous":
        return torch.empty(b, h, length, d, dtype=torch.float16, device="meta")
    if layout == "bhld-transposed":  # (B, L, H, D) storage: TMA can address it
        return torch.empty(b, length, h, d, dtype=torch.float16, device="meta").transpose(1, 2)
    if layout == "misaligned":  # base 2 bytes past a 16-byte boundary: TMA cannot
        flat = torch.empty(b * h * length * d + 1, dtype=torch.float16, device="meta")
        return flat[1:].view(b, h, length, d)
    return torch.empty(b, h, length, 2 * d, dtype=torch.float16, device="meta")[..., ::2]


def _tma_addressable(t: torch.Tensor) -> bool:
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all(s and s * t.element_size() % 16 == 0 for s in t.stride()[:-1]))


@pytest.mark.parametrize("key", sorted(_tuned_table()))
def test_default_launch_on_sm90_runs_a_kernel_that_can(key: str) -> None:
    """For each sm_90 entry and inputs in its bucket: D padded to the entry's (and below it),
    top-left and bottom-right masks with Lq = Lk, Lq > Lk and Lq < Lk, GQA, TMA-addressable or
    not, the selection on sm_90 (wgmma on, 132 SMs): the ws kernel gets exactly the calls it
    can run (D 64/128, three consumers at D = 64 only, every query row sees a key,
    TMA-addressable tensors) with the entry's grid rule (one program per tile with tile_grid,
    else one per SM), and everything else runs the Triton kernel at TRITON_FALLBACK's tiles
    (a Gluon entry) or the entry's own (a Triton entry)."""
    cfg = _tuned_table()[key]
    arch, dk, mask, bucket = key.split("-")
    if arch != "sm90":
        pytest.skip("the Gluon kernels run on sm_90 only")
    padded, causal, length = int(dk[1:]), mask == "causal", int(bucket[1:])
    head_dims = sorted({padded, padded - 8, padded // 2 + 1})  # all pad to `padded`
    for d, (alignment, num, den), (h, h_kv), layout in itertools.product(
            head_dims, ALIGNMENTS, [(2, 2), (4, 1)], LAYOUTS):
        lq = length + 37
        lk = lq * den // num
        q = _tensor(1, h, lq, d, layout)
        k, v = (_tensor(1, h_kv, lk, d, layout) for _ in range(2))
        chosen = choose(q, k, v, arch=90, causal=causal, causal_alignment=alignment,
                        num_sms=132)
        call, kw = chosen.call, chosen.call.kwargs
        case = (d, alignment, lq, lk, h, h_kv, layout)
        assert call.kernel is not attn_fwd_gluon_kernel, case  # no entry picks fa3-overlap
        offset = lk - lq if alignment == "bottom_right" else 0
        runnable = (cfg.warp_specialize and d in (64, 128) and (not causal or offset >= 0)
                    and (d == 64 or not cfg.three_consumers)
                    and all(_tma_addressable(t) for t in (q, k, v)))
        assert (call.kernel is attn_fwd_gluon_ws_kernel) == runnable, case
        if runnable:
            tiles = h * -(-lq // cfg.block_m)
            few = tiles < MIN_DYNAMIC_TILES_PER_PROGRAM * 132  # the static order then
            few_split = tiles < MIN_SPLIT_TILES_PER_PROGRAM * 132 or lk < lq  # no split then
            assert chosen.config == replace(cfg, dynamic_schedule=cfg.dynamic_schedule and not few,
                                            split_tail=cfg.split_tail and not few_split)
            assert kw.get("SPLIT_TAIL", False) == chosen.config.split_tail, case
            assert all(desc.strides[-1] == 1 and all(s * 2 % 16 == 0 for s in desc.strides[:-1])
                       for desc in call.args[:4]), case
            assert call.grid == ((tiles if cfg.tile_grid else min(tiles, 132)),), case
            assert (kw["NUM_CONSUMERS"], kw["BLOCK_N"], kw["NUM_STAGES"], kw["HEAD_DIM"]) == (
                cfg.num_warps // 4, cfg.block_n, cfg.num_stages, d), case
        else:
            want = TRITON_FALLBACK if cfg.overlap else cfg
            assert call.kernel is attn_fwd_kernel and chosen.config == want, case
            assert (kw["BLOCK_M"], kw["BLOCK_N"], kw["num_warps"], kw["num_stages"]) == (
                want.block_m, want.block_n, want.num_warps, want.num_stages), case


def test_tune_against_table_round_trips_tile_grid(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path) -> None:
    """A table written before tile_grid existed (entries without the field) loads, a
    challenger run that moves one entry to a tilegrid config writes the field, the entry it
    keeps stays as it was, and the default launch reads both back."""
    table = tmp_path / "tuned.json"
    old = {k: {f: v for f, v in FA3_WS.as_dict().items() if f != "tile_grid"}
           for k in ("sm90-d128-causal-l16384", "sm90-d128-full-l16384")}
    table.write_text(json.dumps(old))
    monkeypatch.setattr(configs, "TUNED_TABLE", table)
    monkeypatch.setattr(tune_cmd, "TUNED_TABLE", table)
    configs._tuned_table.cache_clear()
    try:
        assert configs.default_config(128, True, 16384, 90) == FA3_WS  # the old table loads
        moved = KernelConfig.parse("128x128 w8 s2 tma overlap ws tilegrid")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(tune_cmd, "launch_arch", lambda: 90)
        monkeypatch.setattr(tune_cmd, "best_config", lambda problem, rounds, calls, pool,
                            incumbent, min_gain: ((moved if problem.causal else incumbent), []))
        args = build_parser().parse_args(["tune", "--head-dims", "128", "--lengths", "16384",
                                          "--configs", moved.label(), "--against-table",
                                          "--write"])
        assert tune_cmd.run(args) == 0
        written = json.loads(table.read_text())
        assert written["sm90-d128-causal-l16384"] == moved.as_dict()
        assert written["sm90-d128-causal-l16384"]["tile_grid"] is True
        assert written["sm90-d128-full-l16384"] == FA3_WS.as_dict()
        configs._tuned_table.cache_clear()
        assert configs.default_config(128, True, 16384, 90) == moved
        assert configs.default_config(128, False, 16384, 90) == FA3_WS
    finally:
        configs._tuned_table.cache_clear()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mask", ["top-left", "bottom-right"])
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_default_launch_at_the_long_causal_entries(d: int, mask: str, dtype: torch.dtype,
                                                       device: torch.device) -> None:
    """The default launch (config None) at the table's causal entries of the 8192 bucket (D 64
    and 128: one program per tile, or the persistent grid with the dynamic schedule): GQA,
    (B, L, H, D)-strided inputs, a ragged last tile and, bottom-right, Lk > Lq (a causal
    offset that is no multiple of 64), so the ws kernel runs (three consumers at D = 64, each
    skipping the blocks its rows do not see). 3·4·65 tiles of 128 rows (3·4·43 of 192 at
    D = 64): at least 3 per program on the H200's 132, so select() keeps the dynamic schedule
    and programs claim tiles past their first."""
    cfg = _tuned_table()[f"sm90-d{d}-causal-l8192"]
    assert cfg.warp_specialize and (cfg.tile_grid or cfg.dynamic_schedule)
    lq, lk = 8192 + 37, 8192 + 37 + (101 if mask == "bottom-right" else 0)
    q, k, v = random_qkv(3, 4, lq, lk, d, dtype, device, h_kv=2)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)
    chosen = choose(q, k, v, arch=90, causal=True, num_sms=132,
                    causal_alignment="bottom_right" if mask == "bottom-right" else "top_left")
    assert chosen.config == cfg
    check_parity(q, k, v, causal=True, bottom_right=mask == "bottom-right", enable_gqa=True)

