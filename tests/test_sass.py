"""SASS counting: the listing parser, real compiles without a GPU, the golden gate, torch's kernel.

The SASS article's numbers (``docs/article.md``): 256 HMMA.16816.F32 and 112
LDSM.16.M88.4 for its Triton kernel; 256 / 80 LDSM.16.M88.4 / 64 LDSM.16.MT88.4 for torch's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

import pytest

from flashrepro import select
from flashrepro.configs import ARTICLE, NAMED, TRITON_FALLBACK, KernelConfig
from flashrepro.validation import interpreter_mode
from flashrepro_harness.analysis import count_model as model
from flashrepro_harness.analysis import golden, sass
from flashrepro_harness.analysis.disasm import Resources, SassCounts, count_sass, loop_ranges
from flashrepro_harness.analysis.offline_compile import (
    TARGETS,
    VARIANTS,
    KernelSass,
    KernelSpec,
    compile_spec,
    kernel_call,
    kernel_sass,
    mma_layouts,
    operand_loads,
)
from flashrepro_harness.analysis.rows import published_counts, torch_rows
from flashrepro_harness.analysis.torch_sass import (
    ARTICLE_INSTANCE,
    installed_library,
    torch_flash_sass,
)
from flashrepro_harness.commands import sass as sass_cmd
from flashrepro_harness.problem import load_article
from tests.sass_cache import full_report

PROBLEM, PUBLISHED = load_article()

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/              @!PT LDS RZ, [RZ] ;
        /*0020*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0030*/                   LDSM.16.M88.4 R8, [R2] ;
        /*0040*/               @P0 LDSM.16.MT88.4 R12, [R3] ;
        /*0050*/                   MUFU.EX2 R5, R6 ;
        /*0060*/               @P1 BRA 0x20 ;
        /*0070*/                   HGMMA.64x64x16.F32 R88, gdesc[UR12], RZ, !UPT ;
        /*0080*/              @UP0 LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;
        /*0090*/                   STL [R1], R2 ;
        /*00a0*/                   EXIT ;
        /*00b0*/                   BRA 0x10 ;
        /*00c0*/                   BRA 0xc0;
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    sass_cmd.add_arguments(parser)
    return parser


def test_count_sass_classes_and_loops() -> None:
    counts = count_sass(LISTING)
    # Neither the out-of-line block's jump back (after EXIT) nor the padding is a loop.
    assert loop_ranges(LISTING) == [(0x20, 0x60)]
    expected = {"HMMA": 1, "HGMMA": 1, "LDSM": 1, "LDSM.MT": 1, "LDS": 1, "STS": 0, "LDG": 0,
                "STG": 0, "ASYNC": 1, "MUFU.EX2": 1, "BAR": 0, "LDL": 0, "STL": 1, "total": 13}
    assert counts.classes == expected
    in_loop = {k: 0 for k in expected} | {"HMMA": 1, "LDSM": 1, "LDSM.MT": 1, "MUFU.EX2": 1,
                                          "total": 5}
    assert counts.loop_classes == in_loop
    assert counts.opcodes["LDSM.16.MT88.4"] == 1 and counts.opcodes["BRA"] == 3



def test_count_sass_named_barriers() -> None:
    """Named barriers by opcode as [id, threads] (0: no count, the whole CTA), distinct and
    sorted; predicated ones included."""
    listing = """\
        /*0000*/                   BAR.SYNC.DEFER_BLOCKING 0x9, 0x100 ;
        /*0010*/               @!P4  BAR.ARV 0x8, 0x100 ;
        /*0020*/                   BAR.SYNC.DEFER_BLOCKING 0x1 ;
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x2, 0x80 ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x9, 0x100 ;
        /*0050*/                   EXIT ;
"""
    assert count_sass(listing).barriers == {
        "BAR.ARV": [[8, 256]], "BAR.SYNC.DEFER_BLOCKING": [[1, 0], [2, 128], [9, 256]]}

TTGIR = """\
module {
  tt.func public @k(%Q: !tt.ptr<f16>) attributes {noinline = false} {
    %q_1 = ttg.local_load %q : !ttg.memdesc<64x128xf16, #shared, #smem> -> tensor<64x128xf16, \
#ttg.dot_op<{opIdx = 0, parent = #mma, kWidth = 2}>> loc(#loc1)
    %r:3 = scf.for %i = %c0 to %n step %c64 iter_args(%a = %z) -> (tensor<64x128xf32, #mma>) {
      %k_2 = ttg.local_load %k : !ttg.memdesc<64x128xf16, #shared, #smem> -> tensor<64x128xf16, \
#ttg.dot_op<{opIdx = 1, parent = #mma, kWidth = 2}>> loc(#loc2)
    }
  }
}
"""


def test_operand_loads_and_mma_layouts_from_ttgir() -> None:
    text = TTGIR.replace("\\\n", "") + (
        "#mma = #ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [1, 4], "
        "instrShape = [16, 8]}>\n")
    assert operand_loads(text) == [{"operand": 0, "shape": [64, 128], "in_loop": False},
                                   {"operand": 1, "shape": [64, 128], "in_loop": True}]
    assert mma_layouts(text) == [{"version": 2, "warps": [1, 4], "instr_shape": [16, 8]}]


def test_count_sass_rejects_text_without_instructions() -> None:
    with pytest.raises(ValueError, match="no SASS instruction"):
        count_sass("cuobjdump info    : File 'x' does not contain device code")


def test_article_kernel_sm80_gives_the_articles_counts() -> None:
    """A real compile for sm_80, no GPU: 256 HMMA, 112 LDSM (the SASS article's)."""
    row = next(r for r in full_report()["targets"]["sm_80"]["rows"]
               if r["name"] == f"article {ARTICLE.label()}")
    assert row["counts"]["opcodes"]["HMMA.16816.F32"] == 256
    assert row["counts"]["opcodes"]["LDSM.16.M88.4"] == 112
    assert row["published"]["status"] == "match"


def test_sm90_uses_wgmma_and_disable_mma_v3_restores_mma_sync() -> None:
    targets = full_report()["targets"]
    by_name = {t: {r["name"]: r for r in targets[t]["rows"]} for t in targets}
    key = f"article {ARTICLE.label()}"
    wgmma, mma_sync = by_name["sm_90"][key]["counts"], by_name["sm_90-mma.sync"][key]["counts"]
    assert wgmma["classes"]["HGMMA"] == 24 and wgmma["classes"]["HMMA"] == 0
    assert mma_sync["classes"]["HMMA"] == 256 and mma_sync["classes"]["HGMMA"] == 0


def _wgmma_waits_per_hgmma(kernels: dict) -> dict[str, float]:
    out = {}
    for name, entry in kernels.items():
        ops = entry["opcodes"]
        hgmma = sum(n for op, n in ops.items() if op.startswith("HGMMA"))
        out[name] = ops.get("WARPGROUP.DEPBAR.LE", 0) / hgmma
    return out


def test_no_wgmma_serialisation_on_sm90() -> None:
    """Every sm_90 (wgmma) kernel of the golden file (which ``nox -s sass`` holds equal to a
    fresh compile) waits once per group of HGMMAs, not after each: the pointer-load path once
    drew ptxas's C7515 serialisation, a WARPGROUP.DEPBAR after each of its 24 HGMMAs
    (lab/2026-11-29-pointer-path-wgmma-serialization/)."""
    doc = golden.load(golden.default_path())
    assert doc is not None
    ratios = _wgmma_waits_per_hgmma(doc["kernels"]["sm_90"])
    assert ratios and all(r <= 0.25 for r in ratios.values()), ratios


def test_the_serialisation_check_sees_the_old_kernel() -> None:
    """The check above on the serialised build's counts (golden before experiment 10)."""
    serialised = {"fwd 64x64 w4 s3": {"opcodes": {"HGMMA.64x64x16.F32": 16,
                                                  "HGMMA.64x128x16.F32": 8,
                                                  "WARPGROUP.DEPBAR.LE": 24}}}
    assert _wgmma_waits_per_hgmma(serialised) == {"fwd 64x64 w4 s3": 1.0}


def test_p_in_registers_gives_torchs_profile_in_the_loops() -> None:
    """The p-in-registers launch (warps over rows) loads no P from shared memory: in its loop
    bodies the model's torch-like 256 HMMA / 80 LDSM / 64 LDSM.MT, on every mma.sync target."""
    for target, block in full_report()["targets"].items():
        if target == "sm_90":
            continue
        row = next(r for r in block["rows"] if "P in registers" in r["role"])
        assert row["mma_layouts"][0]["warps"] == [8, 1]
        loops = row["counts"]["loop_classes"]
        assert (loops["HMMA"], loops["LDSM"], loops["LDSM.MT"]) == (256, 80, 64), target


def test_gluon_rows_are_counted_and_modelled() -> None:
    """sm_90's table counts the warp-specialized Gluon kernel (here the default, D=128 causal
    at the article problem), next to the Triton kernel at the same tiles: the model's two
    consumers x 2 x (S + P·V) HGMMAs, all in loops (the kernel loops over tiles), no LDSM (P in
    registers, Q/K/V by TMA). The non-specialized Gluon kernel (fa3-overlap) compiled apart
    matches its model too: 24 HGMMA, 12 in its single loop. (That the loops keep one wgmma
    group in flight, and the register reallocation, are checked on the GPU, in the PTX:
    tests/test_parity.py::test_gpu_overlap_runs_the_gluon_kernel and
    ::test_gpu_warp_specialize_runs_the_persistent_kernel.)"""
    block = full_report()["targets"]["sm_90"]
    ws = next(r for r in block["rows"] if r["variant"] == "fwd_gluon_ws")
    assert ws["config"]["warp_specialize"] and ws["model"]["status"] == "match"
    classes, loops = ws["counts"]["classes"], ws["counts"]["loop_classes"]
    assert (classes["HGMMA"], loops["HGMMA"], classes["LDSM"], classes["HMMA"]) == (64, 64, 0, 0)
    tiles = {k: v for k, v in ws["config"].items() if k not in ("overlap", "warp_specialize")}
    assert any(r["variant"] == "fwd" and {k: v for k, v in r["config"].items()
                                         if k not in ("overlap", "warp_specialize")} == tiles
               for r in block["rows"])
    [gluon] = kernel_sass([KernelSpec("fwd_gluon", NAMED["fa3-overlap"], "sm_90",
                                      load_article()[0])], workers=1)
    prediction = model.gluon_overlap_model(64, 64, 128, 4)
    assert (gluon.counts.classes["HGMMA"], gluon.counts.loop_classes["HGMMA"]) == (24, 12)
    assert (prediction.total["HGMMA"], prediction.in_loops["HGMMA"]) == (24, 12)
    assert gluon.counts.classes["LDSM"] == 0


def test_the_ws_turn_has_named_barriers_of_its_own() -> None:
    """The warp-specialized kernel passes its ping-pong turn on named barriers TURN_BARRIER and
    TURN_BARRIER + 1 for both consumers' 256 threads (inline PTX, since Gluon has no such op);
    every barrier the compiler adds itself (warp_specialize's setup, each partition's
    warpgroup barrier) must use another, lower id, or the turn would count their arrivals: a
    hang or a race. Fails when a Triton upgrade takes ids 8 or 9, or when the turn's inline
    PTX loses its barriers."""
    from flashrepro.kernels.fwd_gluon_ws import TURN_BARRIER

    ws = next(r for r in full_report()["targets"]["sm_90"]["rows"]
              if r["variant"] == "fwd_gluon_ws")
    barriers = ws["counts"]["barriers"]
    turn = [[TURN_BARRIER.value, 256], [TURN_BARRIER.value + 1, 256]]
    assert barriers["BAR.ARV"] == turn  # each consumer passes, without waiting
    syncs = barriers["BAR.SYNC.DEFER_BLOCKING"]
    assert all(b in syncs for b in turn)  # and waits for its turn
    assert [b for b in syncs if b not in turn and b[0] >= TURN_BARRIER.value] == []
    assert any(b[0] < TURN_BARRIER.value for b in syncs)  # the compiler's own are counted too


@pytest.mark.parametrize("target", ["sm_80", "sm_90-mma.sync"])
@pytest.mark.parametrize("entry", ["fa3-overlap", "fa3-ws", "fa3-ws3"])
def test_gluon_table_entry_off_the_wgmma_path(target: str, entry: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A table entry with overlap (``tune --configs fa3-overlap --write`` on an A100 writes one)
    counts as api.attention launches it off sm_90's wgmma path: the Triton kernel at
    TRITON_FALLBACK, pointer loads below sm_90, no Gluon rows (dropping only ``tma`` raised
    "overlap needs tma")."""
    monkeypatch.setattr(select, "default_config", lambda *args: NAMED[entry])
    rows = sass._configs(target, PROBLEM)
    assert not [v for v, _, _ in rows if v.startswith("fwd_gluon")]
    assert ("fwd", dataclasses.replace(TRITON_FALLBACK, tma=target == "sm_90-mma.sync")) in [
        (v, c) for v, c, _ in rows]


def test_three_consumer_default_on_sm90(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 192-row default (fa3-ws3, the table's D = 64 non-causal entries) counts the ws kernel
    at its own tiles and, beside it, the Triton kernel as api.attention runs it where the ws
    kernel cannot: at TRITON_FALLBACK (the Triton kernel has no 192-row tile, and the config
    without ``warp_specialize`` is refused), with a role that says so."""
    monkeypatch.setattr(select, "default_config", lambda *args: NAMED["fa3-ws3"])
    rows = sass._configs("sm_90", PROBLEM)
    assert ("fwd_gluon_ws", NAMED["fa3-ws3"]) in [(v, c) for v, c, _ in rows]
    fwd = [(c, r) for v, c, r in rows if v == "fwd" and c != ARTICLE]
    assert fwd == [(TRITON_FALLBACK, fwd[0][1])] and "TRITON_FALLBACK" in fwd[0][1]
    assert not [c for _, c, _ in rows if c.block_m == 192 and not c.warp_specialize]


@pytest.mark.parametrize(("batch", "counted_dynamic"), [(2, False), (16, True)])
def test_dynamic_schedule_default_on_sm90(monkeypatch: pytest.MonkeyPatch, batch: int,
                                          counted_dynamic: bool) -> None:
    """A table entry with the dynamic schedule counts the ws kernel as select() runs it: with
    the dynamic schedule from 3 tiles per program (B=16: 2048 tiles on 132 SMs), the snake
    order below (the article problem, B=2: 256 tiles); and the Triton kernel at its tiles,
    without the ws-only flags."""
    dynamic = dataclasses.replace(NAMED["fa3-ws"], dynamic_schedule=True)
    monkeypatch.setattr(select, "default_config", lambda *args: dynamic)
    problem = dataclasses.replace(PROBLEM, batch=batch)
    rows = [(v, c) for v, c, _ in sass._configs("sm_90", problem)]
    counted = dynamic if counted_dynamic else NAMED["fa3-ws"]
    assert ("fwd_gluon_ws", counted) in rows
    assert ("fwd", KernelConfig(128, 128, 8, 2, tma=True)) in rows


def test_the_dynamic_schedule_claims_without_a_gpu_fence() -> None:
    """The tile claim is a relaxed atomic: the ws kernel with the dynamic schedule has its two
    atomics and no GPU-wide fence or L1 invalidation, which the default (acq_rel) semantics put
    around every claim (lab/2026-12-02-claim-ahead/)."""
    config = dataclasses.replace(NAMED["fa3-ws"], dynamic_schedule=True)
    [compiled] = kernel_sass([KernelSpec("fwd_gluon_ws", config, "sm_90", PROBLEM)], workers=1)
    opcodes = compiled.counts.opcodes
    assert opcodes.get("ATOMG.E.ADD.STRONG.GPU") == 1, opcodes
    assert not [op for op in opcodes if op.startswith(("MEMBAR.ALL.GPU", "CCTL"))], opcodes


@pytest.mark.parametrize("changed", [KernelConfig(64, 32, 4, 3), KernelConfig(64, 64, 8, 3)],
                         ids=["block_n=32", "num_warps=8"])
def test_changing_the_article_config_fails_the_golden_check(
        changed: KernelConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sass, "ARTICLE", changed)  # as if configs.ARTICLE had been edited
    out = tmp_path / "report.json"
    assert sass_cmd.run(_parser().parse_args(["--arch", "sm_80", "--json", str(out)])) == 1
    err = capsys.readouterr().err
    assert f"sm_80  article {changed.label()}" in err and golden.NOT_IN_GOLDEN in err
    assert f"article {ARTICLE.label()}" in err and "but not compiled now" in err
    assert "python -m flashrepro_harness sass --update" in err
    # Not only the key: the counts themselves drift from the golden article kernel's.
    row = next(r for r in json.loads(out.read_text())["targets"]["sm_80"]["rows"]
               if r["name"] == f"article {changed.label()}")
    doc = golden.load(golden.default_path())
    assert doc is not None
    old = doc["kernels"]["sm_80"][f"article {ARTICLE.label()}"]["classes"]
    assert [c for c in ("HMMA", "LDSM", "total") if row["counts"]["classes"][c] != old[c]]


def _fake(target: str, hmma: int) -> KernelSass:
    classes = {"HMMA": hmma, "LDSM": 112, "total": 3000 + hmma}
    return KernelSass(KernelSpec("article", ARTICLE, target, PROBLEM),
                      SassCounts({"HMMA.16816.F32": hmma, "LDSM.16.M88.4": 112}, classes,
                                 classes), Resources(255, 0, 0, 0), 90112, [], [])


def test_golden_build_write_compare_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    header = {"triton": "x", "tools": {}, "problem": {}}
    golden.write(path, golden.build([_fake("sm_80", 256), _fake("sm_86", 256)], None, header))
    doc = golden.load(path)
    assert golden.compare(doc, [_fake("sm_80", 256)], ["sm_80"]) == {}
    drift = golden.compare(doc, [_fake("sm_80", 240)], ["sm_80"])
    assert drift == {("sm_80", f"article {ARTICLE.label()}"): [
        "HMMA: golden 256, now 240 (-16)", "total: golden 3256, now 3240 (-16)",
        "opcode HMMA.16816.F32: golden 256, now 240 (-16)"]}
    # --update replaces the targets it ran and keeps the others.
    merged = golden.build([_fake("sm_80", 240)], doc, header)
    assert merged["kernels"]["sm_80"][f"article {ARTICLE.label()}"]["classes"]["HMMA"] == 240
    assert merged["kernels"]["sm_86"] == doc["kernels"]["sm_86"]


def test_golden_diff_is_readable() -> None:
    old = {"classes": {"LDSM": 112}, "registers": 255, "shared_bytes": 90112,
           "opcodes": {f"OP{i}": i for i in range(20)}}
    new = {"classes": {"LDSM": 128}, "registers": 250, "shared_bytes": 90112,
           "opcodes": {f"OP{i}": i + 1 for i in range(20)}}
    lines = golden.diff_entry(old, new)
    assert lines[:3] == ["LDSM: golden 112, now 128 (+16)",
                         "registers/thread: golden 255, now 250 (-5)",
                         "opcode OP0: golden 0, now 1 (+1)"]
    assert lines[-1] == f"... and {20 - golden.MAX_OPCODE_LINES} more opcodes changed"
    text = golden.format_diff([{"target": "sm_80", "kernel": "article 64x64 w4 s3",
                                "lines": lines[:1]}], Path("g.json"))
    assert text.splitlines() == ["SASS drift against g.json:", "  sm_80  article 64x64 w4 s3",
                                 "      LDSM: golden 112, now 128 (+16)",
                                 "If the change is intended: python -m flashrepro_harness sass "
                                 "--update (then commit the golden file)."]


@pytest.mark.skipif(not interpreter_mode(), reason="kernels are JIT functions on a GPU host")
def test_interpreted_kernels_are_refused_in_process(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="kernel_sass"):
        compile_spec(KernelSpec("article", ARTICLE, "sm_80", PROBLEM), tmp_path)


def test_every_compile_is_the_selected_launch() -> None:
    """Each spec of the report compiles the call flashrepro.select chooses for the article
    problem on its target, and that call runs the kernel its variant names (kernel_call raises
    otherwise): what the golden file pins is what a launch on that GPU runs."""
    from flashrepro import select as sel
    from flashrepro_harness.analysis.offline_compile import _resolve

    specs = [*sass.specs_for(list(TARGETS), PROBLEM),
             KernelSpec("fwd_gluon", NAMED["fa3-overlap"], "sm_90", PROBLEM)]
    assert {s.variant for s in specs} == set(VARIANTS)
    for spec in specs:
        call = kernel_call(spec)
        assert call.kernel is _resolve(VARIANTS[spec.variant].kernel), spec
        if spec.variant == "article":
            continue
        target = TARGETS[spec.target]
        if spec.variant == "fwd":
            assert (call.kwargs["BLOCK_M"], call.kwargs["USE_TMA"]) == (
                spec.config.block_m, spec.config.tma and target.arch >= 90), spec
        assert sel.code_arch(target.arch, target.mma_v3) == target.config_arch, spec


def test_a_spec_that_select_would_not_run_is_refused() -> None:
    """The ws kernel on sm_80, or the Triton kernel where sm_90 selects the ws kernel: the
    compile would count a kernel no launch there runs."""
    from flashrepro.configs import FA3_WS

    with pytest.raises(RuntimeError, match=r"^select\(\) chose attn_fwd_kernel .* on sm_80, "
                                           r"not flashrepro.kernels.fwd_gluon_ws:"):
        kernel_call(KernelSpec("fwd_gluon_ws", FA3_WS, "sm_80", PROBLEM))
    with pytest.raises(RuntimeError, match=r"^select\(\) chose attn_fwd_gluon_ws_kernel"):
        kernel_call(KernelSpec("fwd", FA3_WS, "sm_90", PROBLEM))


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="archs must be among"):
        sass.sass_report(["sm_70"])
    with pytest.raises(ValueError, match="target must be one of"):
        KernelSpec("article", ARTICLE, "sm_75", PROBLEM)
    assert sass_cmd.run(_parser().parse_args(["--torch-lib", "/nonexistent.so"])) == 2


def test_torch_rows_say_why_they_are_skipped() -> None:
    rows = torch_rows(["sm_80"], None, published_counts(PUBLISHED))["sm_80"]
    assert [r["name"] for r in rows] == ["torch 64x64 w4", "torch 128x64 w4"]
    assert all("CPU build" in r["skipped"] and "--torch-lib" in r["skipped"] for r in rows)


def test_torch_symbol_is_the_article_instance() -> None:
    assert ARTICLE_INSTANCE.symbol() == (
        "_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi64ELi64ELi4ELb0E"
        "Lb0EN7cutlass6half_tE19Flash_kernel_traitsILi128ELi64ELi64ELi4ES3_EELb0ELb1ELb0ELb0ELb1"
        "ELb1ELb0ELb0EEEvNS_16Flash_fwd_paramsE")


_TORCH_LIB = (Path(os.environ["FLASHREPRO_TORCH_LIB"]) if "FLASHREPRO_TORCH_LIB" in os.environ
              else installed_library())


@pytest.mark.skipif(_TORCH_LIB is None, reason="needs a CUDA build's libtorch_cuda.so "
                                               "(installed, or FLASHREPRO_TORCH_LIB=PATH)")
def test_torch_flash_kernel_gives_the_articles_counts() -> None:
    assert _TORCH_LIB is not None
    result = torch_flash_sass(_TORCH_LIB, 80, ARTICLE_INSTANCE)
    assert result.counts.opcodes["HMMA.16816.F32"] == 256
    assert result.counts.opcodes["LDSM.16.M88.4"] == 80
    assert result.counts.opcodes["LDSM.16.MT88.4"] == 64


@pytest.mark.parametrize("workers", ["0", "-2", "x"])
def test_cli_rejects_bad_workers(workers: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``sass --workers`` below 1 (or no int) is an argparse error naming the option, before
    any compile."""
    from flashrepro_harness.cli import main as cli_main

    with pytest.raises(SystemExit) as exc:
        cli_main(["sass", "--workers", workers])
    assert exc.value.code == 2
    assert "argument --workers" in capsys.readouterr().err
