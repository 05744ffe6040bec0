"""The analytic instruction-count model: the article's numbers, its formulas, and model = count.

Published numbers and formulas: the SASS article (``docs/article.md``).
"""

from __future__ import annotations

import itertools

import pytest

from flashrepro_harness.analysis import count_model as model
from flashrepro_harness.analysis.rows import compare_model
from tests.sass_cache import full_report, rows


def test_article_config_torch_and_triton() -> None:
    # torch (FA2): warps split the rows, P stays in registers -> 80 LDSM, 64 LDSM.MT, 256 HMMA.
    torch_counts = model.mma_sync_model(64, 64, 128, *model.FA2_WARPS, p_in_smem=False,
                                        loop_bodies=model.fa2_loop_bodies(64, 64))
    assert torch_counts.total == {"HMMA": 256, "HGMMA": 0, "LDSM": 80, "LDSM.MT": 64}
    assert torch_counts.in_loops == torch_counts.total
    # The article's Triton kernel: warps 1x4, P through shared memory -> 112 LDSM, 256 HMMA.
    triton_counts = model.mma_sync_model(64, 64, 128, 1, 4, model.p_through_smem(4),
                                         model.TRITON_LOOP_BODIES).total
    assert triton_counts["HMMA"] == 256
    assert triton_counts["LDSM"] == 112
    # Per stage: 16 more LDSM for P (64·64/(16·16)), the article's explanation.
    with_p = model.mma_sync_stage(64, 64, 128, 1, 4, p_in_smem=True)
    without_p = model.mma_sync_stage(64, 64, 128, 1, 4, p_in_smem=False)
    assert with_p["LDSM"] - without_p["LDSM"] == 64 * 64 // (16 * 16)


@pytest.mark.parametrize(("m", "n", "k", "warps"), [
    (m, n, k, w) for m, n, k, w in itertools.product((16, 64, 128, 256), (16, 64, 128),
                                                     (16, 32, 64, 128), (1, 2, 4))
    if m % (16 * w) == 0])  # whole 16-row blocks per warp
def test_generalised_model_reduces_to_the_articles_formulas(m: int, n: int, k: int,
                                                            warps: int) -> None:
    got = model.mma_sync_gemm(m, n, k, warps_m=warps, warps_n=1)
    # The article: warps split the rows; loads M·K/(16·16·n) + N·K/(16·16), mma M·N·K/(16·8·16·n).
    assert got["LDSM"] == m * k // (16 * 16 * warps) + n * k // (16 * 16)
    assert got["HMMA"] == m * n * k // (16 * 8 * 16 * warps)
    assert got["LDSM.MT"] == 0


def test_transposed_operand_and_register_operand() -> None:
    counts = model.mma_sync_gemm(64, 128, 64, 4, 1, a=model.Operand(from_smem=False),
                                 b=model.Operand(trans=True))
    assert counts == {"HMMA": 64, "LDSM": 0, "LDSM.MT": 32}


def test_hoisted_q_is_loaded_once() -> None:
    # 64x32 tiles, warps 1x4 (P through shared memory): per stage K 128·8/256 = 4 and P
    # 64·32/256 = 8 LDSM; Q's 64·128/256 = 32 loads run once, before the loops.
    hoisted = model.mma_sync_model(64, 32, 128, 1, 4, True, 2, q_in_loop=False)
    assert hoisted.in_loops["LDSM"] == 2 * (4 + 8)
    assert hoisted.total["LDSM"] == 2 * (4 + 8) + 32
    reloaded = model.mma_sync_model(64, 32, 128, 1, 4, True, 2)
    assert reloaded.total["LDSM"] == reloaded.in_loops["LDSM"] == 2 * (32 + 4 + 8)
    assert hoisted.total["HMMA"] == reloaded.total["HMMA"] == 2 * (32 + 32)


def test_wgmma_model() -> None:
    # Article config on sm_90: S 8 (k=128/16) + P·V 4 (k=64/16) per stage, 2 stages.
    assert model.wgmma_model(64, 64, 128, 4, model.TRITON_LOOP_BODIES).total["HGMMA"] == 24
    # Two warpgroups split 128 rows: each issues the 64-row instruction sequence.
    assert model.wgmma_gemm(128, 64, 128, 8) == model.wgmma_gemm(64, 64, 128, 4) == 8
    # One warpgroup over 128 rows issues two m64 rows of instructions; N > 256 splits too.
    assert model.wgmma_gemm(128, 512, 16, 4) == 2 * 2


@pytest.mark.parametrize(("tiles", "total", "in_loop"), [
    ((64, 64, 128, 4), 24, 12),     # the tuned default's tiles (offline sm_90 compile: 24 / 12)
    ((128, 128, 128, 8), 32, 16),   # two warpgroups over 128 rows (offline compile: 32 / 16)
    ((64, 64, 64, 4), 16, 8),       # D=64 (offline compile: 16 / 8)
])
def test_gluon_overlap_model(tiles: tuple[int, int, int, int], total: int,
                             in_loop: int) -> None:
    prediction = model.gluon_overlap_model(*tiles)
    assert (prediction.total["HGMMA"], prediction.in_loops["HGMMA"]) == (total, in_loop)
    assert prediction.total["LDSM"] == prediction.total["HMMA"] == 0


def test_fa2_loop_bodies() -> None:
    assert model.fa2_loop_bodies(64, 64) == 2
    assert model.fa2_loop_bodies(128, 64) == 3


@pytest.mark.parametrize(("args", "needle"), [
    ((64, 16, 128, 1, 4), "a warp's columns"),
    ((64, 64, 24, 1, 4), "k"),
    ((32, 64, 128, 4, 1), "a warp's rows"),
    ((16, 8, 16, 1, 1), "a warp's B block"),
])
def test_model_rejects_shapes_outside_its_assumptions(args: tuple[int, ...], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        model.mma_sync_gemm(*args)


def test_comparison_flags_a_wrong_prediction() -> None:
    classes = {"HMMA": 256, "HGMMA": 0, "LDSM": 112, "LDSM.MT": 16}
    loops = {"HMMA": 256, "HGMMA": 0, "LDSM": 104, "LDSM.MT": 16}
    exact = model.Prediction(dict(classes), dict(loops))
    assert compare_model(exact, classes, loops) == ("match", [])
    loops_only = model.Prediction({**classes, "LDSM": 104}, dict(loops))
    status, notes = compare_model(loops_only, classes, loops)
    assert status == "match-in-loops" and "LDSM: 8 outside the loop bodies" in notes[0]
    wrong = model.Prediction({**classes, "HMMA": 255}, {**loops, "HMMA": 255})
    status, notes = compare_model(wrong, classes, loops)
    assert status == "mismatch" and "HMMA: model 255 (255 in loops), count 256" in notes[0]


def test_model_equals_count_on_every_row_or_says_why() -> None:
    """Model = count for every row, or a written reason in the row."""
    checked = 0
    for target, row in rows(full_report()):
        if row["skipped"]:
            assert "skipped" in row["skipped"] or "CPU build" in row["skipped"]
            continue
        entry = row["model"]
        assert entry["status"] in ("match", "match-in-loops"), (target, row["name"], entry)
        if entry["status"] == "match-in-loops":
            assert any("outside the loop bodies" in note for note in entry["notes"])
        for cls, predicted in entry["counts"].items():
            count = row["counts"]["classes"][cls]
            in_loops = row["counts"]["loop_classes"][cls]
            assert predicted == count or entry["loop_counts"][cls] == in_loops, (
                target, row["name"], cls)
        checked += 1
    assert checked >= 10  # article and fwd on five targets, at least
