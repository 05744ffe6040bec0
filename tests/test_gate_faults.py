"""Fault injection: ways a gate can pass what it must fail, each driven through the command line
(:func:`flashrepro_harness.cli.main`) as the GPU job runs it.

Two paths:

* ``reproduce --gate`` for real on the CPU: the kernels run under Triton's interpreter on a
  small problem (written as the article's, so the judge and the run agree), and only the GPU
  parts are stood in for: the timer (:class:`FakeTimer`), the environment capture, the
  busy-wait length and the architecture. A kernel can raise, return NaN, or declare itself
  slower; the reference checkout is a copy of ``src/flashrepro``.
* ``gate --results`` on mutated copies of the committed H200 run
  (``reproduce/results/nvidia-h200/reproduce.json``, paired A/A), judged against the committed
  baselines.

Each test names the case it covers (``test_caseN_...``); the ``control`` tests show the same
path passing good input. The runners' Triton cache and which checkout judges a pull request
concern the workflow and the runners, not the gate's code, and are not here.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import flashrepro
from flashrepro.validation import interpreter_mode
from flashrepro_harness import env, problem
from flashrepro_harness.bench import reproduce as bench_reproduce
from flashrepro_harness.cli import main
from flashrepro_harness.gate import plausible
from flashrepro_harness.gate.simulate import synthetic_env

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "reproduce" / "results" / "nvidia-h200" / "reproduce.json"
BASELINES = REPO / "reproduce" / "baselines"
BASELINE_FILE = BASELINES / "nvidia-h200" / "b2-h16-q1024-k1024-d128-float16-causal.json"
WRONG_OUTPUT = "FLASHREPRO_TEST_WRONG_OUTPUT"
SMALL_ARTICLE = """[problem]
batch = 1
heads = 2
seqlen = 64
head_dim = 16
dtype = "float16"
causal = true

[published]
ratio_first = 2.14
ratio_tuned = 1.12
"""
ROUNDS = "12"


def cli(argv: list[str]) -> int:
    """The exit status of a process running ``flashrepro ARGV``: what :func:`main` returns,
    argparse's ``SystemExit`` code, or 1 with the traceback on stderr for an exception that
    escapes (what Python does)."""
    try:
        return int(main(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except Exception:
        traceback.print_exc()
        return 1


# -- gate --results on mutated copies of the committed run --------------------------------------

@pytest.fixture
def good() -> dict[str, Any]:
    """The committed paired A/A run, marked complete (reproduce's last step)."""
    data = json.loads(COMMITTED.read_text())
    data["complete"] = True
    return data


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def _gate(results: Path, *extra: str, baseline_dir: Path = BASELINES) -> int:
    return cli(["gate", "--results", str(results), "--baseline-dir", str(baseline_dir), *extra])


def _record(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in data["records"] if r["name"] == name)


def _slow(data: dict[str, Any], name: str, factor: float) -> None:
    """Record ``name``'s rounds ``factor`` times slower (its twin unchanged)."""
    rec = _record(data, name)
    rec["round_medians_us"] = [x * factor for x in rec["round_medians_us"]]
    rec["median_us"] *= factor


def test_control_the_committed_paired_run_passes(good: dict[str, Any], tmp_path: Path) -> None:
    """The control: the unmutated run passes, so every refusal below is the mutation's."""
    assert _gate(_write(tmp_path / "r.json", good)) == 0


def test_case1_skipped_flashrepro_rows_fail(good: dict[str, Any], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Every flashrepro.attention call raising: the rows calling it skipped, only the frozen
    article kernel left to judge."""
    for rec in [r for r in good["records"] if r["name"].startswith("flashrepro")]:
        for key in [k for k in rec if k not in ("name", "description", "causal")]:
            del rec[key]
        rec["skipped"] = "CUDA error: an illegal memory access was encountered"
    assert _gate(_write(tmp_path / "r.json", good)) == 5
    out = capsys.readouterr().out
    assert "KERNEL FAILURE (exit 5)" in out and "| flashrepro " in out and "must run" in out


def test_case1_a_row_the_baseline_has_and_the_run_lacks_fails(good: dict[str, Any],
                                                              tmp_path: Path) -> None:
    good["records"] = [r for r in good["records"]
                       if r["name"] not in ("flashrepro (mma.sync)",
                                            "reference:flashrepro (mma.sync)")]
    assert _gate(_write(tmp_path / "r.json", good)) == 5


def test_case1_a_row_the_reference_has_and_the_run_lacks_fails(good: dict[str, Any],
                                                               tmp_path: Path) -> None:
    good["records"] = [r for r in good["records"] if r["name"] != "flashrepro"]
    assert _gate(_write(tmp_path / "r.json", good)) == 5


@pytest.mark.parametrize(("row", "error"), [("flashrepro", 0.5), ("flashrepro", math.nan),
                                            ("flashrepro (mma.sync)", 0.0051),
                                            ("torch-cudnn", 0.5)])
def test_case2_a_row_over_the_output_tolerance_fails(good: dict[str, Any], tmp_path: Path,
                                                     row: str, error: float,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _record(good, row)["max_abs_err"] = error
    assert _gate(_write(tmp_path / "r.json", good)) == 5
    out = capsys.readouterr().out
    assert row in out and "tolerance" in out


def test_case2_a_timed_row_without_an_output_check_is_refused(good: dict[str, Any],
                                                              tmp_path: Path) -> None:
    del _record(good, "flashrepro")["max_abs_err"]
    assert _gate(_write(tmp_path / "r.json", good)) == 4


def _rounds(data: dict[str, Any], n: int) -> None:
    for rec in data["records"]:
        if "round_medians_us" in rec:
            rec["round_medians_us"] = rec["round_medians_us"][:n]
            rec.pop("ratio_rounds", None)
    data["method"]["rounds"] = n


def test_case3_too_few_rounds_to_reject_are_refused(good: dict[str, Any], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """At 5 rounds the smallest one-sided Wilcoxon p is 1/32 > 0.025: a 3x slowdown could
    never fail. Refused (4), not "inconclusive"; at 6 rounds the same slowdown fails."""
    _slow(good, "flashrepro", 3.0)
    five, six = copy.deepcopy(good), copy.deepcopy(good)
    _rounds(five, 5)
    _rounds(six, 6)
    assert _gate(_write(tmp_path / "five.json", five)) == 4
    assert "at least 6 rounds" in capsys.readouterr().err
    assert _gate(_write(tmp_path / "six.json", six)) == 1


def test_case4_a_missing_baseline_dir_is_refused(good: dict[str, Any], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "reproduce" / "baslines"
    assert _gate(_write(tmp_path / "r.json", good), baseline_dir=missing) == 4
    assert f"--baseline-dir {missing}" in capsys.readouterr().err


def test_case4_a_skipped_twin_is_refused(good: dict[str, Any], tmp_path: Path) -> None:
    _slow(good, "flashrepro", 3.0)
    twin = _record(good, "reference:flashrepro")
    for key in [k for k in twin if k not in ("name", "description", "causal", "reference_of")]:
        del twin[key]
    twin["skipped"] = "no reference twin: the reference has another KernelConfig"
    (tmp_path / "empty").mkdir()
    assert _gate(_write(tmp_path / "r.json", good), baseline_dir=tmp_path / "empty") == 4


def test_case4_duplicate_record_names_are_refused(good: dict[str, Any], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    fast = copy.deepcopy(_record(good, "flashrepro"))
    _slow(good, "flashrepro", 3.0)
    good["records"].append(fast)  # last one wins, before
    assert _gate(_write(tmp_path / "r.json", good)) == 4
    assert "'flashrepro' twice" in capsys.readouterr().err


def test_case5_a_loose_threshold_in_the_baseline_is_refused(good: dict[str, Any],
                                                            tmp_path: Path) -> None:
    bdir = tmp_path / "baselines"
    shutil.copytree(BASELINES, bdir)
    path = bdir / BASELINE_FILE.relative_to(BASELINES)
    base = json.loads(path.read_text())
    base["gate"]["threshold"] = 0.99
    path.write_text(json.dumps(base))
    _slow(good, "flashrepro", 1.5)
    assert _gate(_write(tmp_path / "r.json", good), baseline_dir=bdir) == 4


def test_case5_a_loose_threshold_option_is_refused(good: dict[str, Any], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _slow(good, "flashrepro", 1.3)
    assert _gate(_write(tmp_path / "r.json", good), "--threshold", "0.5") == 2
    assert "--threshold must be in [0, 0.1]" in capsys.readouterr().err


@pytest.mark.parametrize("field, value", [("seqlen", 512), ("seqlen", 16384), ("batch", 64)])
def test_case5_results_of_another_problem_are_refused(good: dict[str, Any], tmp_path: Path,
                                                      field: str, value: int) -> None:
    """A pull request that edits article.toml times another problem, whose baseline key has
    no baseline: the judge compares it with its own article problem instead (exit 6). Also a
    larger one, whose committed times sit below its time floor: the problem is refused as
    another problem, not the times as a broken timer (exit 4)."""
    if field == "seqlen":
        good["problem"]["seqlen_q"] = good["problem"]["seqlen_k"] = value
    else:
        good["problem"][field] = value
    _slow(good, "flashrepro", 3.0)
    _slow(good, "reference:flashrepro", 3.0)
    assert _gate(_write(tmp_path / "r.json", good)) == 6


def test_case7_a_baseline_write_cut_short_leaves_the_old_file(good: dict[str, Any],
                                                              tmp_path: Path) -> None:
    """Under a 32 KiB file-size limit a plain write cut the committed baseline to 32,768 bytes
    and lost its history. Written atomically, the old file stays whole, and the refusal is exit 4
    with a message."""
    bdir = tmp_path / "baselines"
    shutil.copytree(BASELINES, bdir)
    target = bdir / BASELINE_FILE.relative_to(BASELINES)
    before = target.read_bytes()
    entries = len(json.loads(before)["history"])
    assert len(before) > 32768 and entries > 1, "the fixture must outgrow the limit"
    results = _write(tmp_path / "r.json", good)
    child = textwrap.dedent("""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (32768, 32768))
        from flashrepro_harness.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", child, "gate", "--update-baseline", "--results", str(results),
         "--baseline-dir", str(bdir)], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), "PYTHONDONTWRITEBYTECODE": "1"})
    assert target.read_bytes() == before
    assert len(json.loads(target.read_text())["history"]) == entries
    assert [p.name for p in target.parent.iterdir()] == [target.name], "a temporary file left"
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr and str(target.parent) in proc.stderr


def test_case7_results_without_the_completion_marker_are_refused(good: dict[str, Any],
                                                                 tmp_path: Path) -> None:
    del good["complete"]
    assert _gate(_write(tmp_path / "r.json", good)) == 4


def _non_utf8(path: Path, data: dict[str, Any]) -> None:
    path.write_bytes(json.dumps(data).encode()[:-1] + b' "\xff\xfe"}')


@pytest.mark.parametrize("mutate", [
    pytest.param(_non_utf8, id="non-utf8"),
    pytest.param(lambda p, d: p.write_text("5"), id="top-level-5"),
    pytest.param(lambda p, d: p.write_text("null"), id="top-level-null"),
    pytest.param(lambda p, d: _write(p, {**d, "records": [1]}), id="records-[1]"),
    pytest.param(lambda p, d: _write(p, {**d, "problem": {**d["problem"], "batch": 10**300}}),
                 id="batch-10^300"),
    pytest.param(lambda p, d: _write(p, {**d, "reference": {**d["reference"], "commit": 5}}),
                 id="reference-commit-5"),
    pytest.param(lambda p, d: _write(p, {**d, "reference": {**d["reference"], "src": [1]}}),
                 id="reference-src-list"),
    pytest.param(lambda p, d: p.write_text(json.dumps(d).replace(
        '"batch": 2', '"batch": ' + "9" * 5000)), id="int-of-5000-digits"),
    pytest.param(lambda p, d: _write(p, {**d, "records": [
        {**r, "host_us": None} if r["name"] == "flashrepro" else r for r in d["records"]]}),
        id="host_us-null"),
])
def test_case8_malformed_results_exit_4_with_the_file_and_the_rule(
        good: dict[str, Any], tmp_path: Path, mutate,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    mutate(path, good)
    assert _gate(path) == 4
    err = capsys.readouterr().err
    assert str(path) in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["flashrepro", "reference:flashrepro (non-causal)"])
def test_case8_times_faster_than_the_gpu_can_compute_are_refused(
        good: dict[str, Any], tmp_path: Path, name: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A timer that measured no work (events around nothing, a launch that never ran) reads
    a speedup, and paired with a twin timed the same way, a pass. Rounds at a quarter of the
    committed times (the causal row at 1.25x the H200's peak rate; at a third, 0.93x, the gate
    passes it as a speedup), of one row or of a twin and its product: refused, naming the
    record."""
    _slow(good, name, 1 / 4)
    twin = name.removeprefix("reference:") if name.startswith("reference:") else None
    if twin:
        _slow(good, twin, 1 / 4)
    assert _gate(_write(tmp_path / "r.json", good)) == 4
    err = capsys.readouterr().err
    assert "has a round median" in err and "peak" in err
    assert f"record {name.removeprefix('reference:')!r}" in err  # the first of them


def test_the_time_floor_is_the_problem_s_matrix_products_at_the_gpu_s_peak() -> None:
    """The floor of the committed run's problem on its H200: 4·B·H·D FLOPs per attended pair
    (causal: 1024·1025/2 pairs a head) at 132 SMs x 1980 MHz x 4096 FLOPs a clock; without
    GPU facts, the stand-ins, never a higher floor."""
    data = json.loads(COMMITTED.read_text())
    gpu, prob = data["env"]["gpu"], data["problem"]
    flops = 4 * 2 * 16 * 128 * (1024 * 1025 // 2)
    assert plausible.floor_us(prob, True, gpu) == pytest.approx(
        flops / (132 * 1980e6 * 4096) * 1e6)
    assert plausible.floor_us(prob, False, gpu) == pytest.approx(
        2 * flops * 1024 / 1025 / (132 * 1980e6 * 4096) * 1e6)
    for missing in ("max_sm_clock_mhz", "sm_count", "capability"):
        less = {k: v for k, v in gpu.items() if k != missing}
        assert plausible.floor_us(prob, True, less) < plausible.floor_us(prob, True, gpu)
    assert plausible.floor_us(prob, True, None) < plausible.floor_us(prob, True, gpu)
    fastest = min(min(r["round_medians_us"]) for r in data["records"]
                  if "round_medians_us" in r)
    assert plausible.floor_us(prob, True, gpu) < fastest / 3


@pytest.mark.parametrize("facts", [
    {"sm_count": 10**306}, {"sm_count": 132.0}, {"sm_count": True}, {"sm_count": 0},
    {"max_sm_clock_mhz": 10**400}, {"max_sm_clock_mhz": 1.0}, {"max_sm_clock_mhz": float("nan")},
    {"capability": [9, 0]}], ids=str)
def test_odd_gpu_facts_give_a_finite_floor_no_higher_than_the_true_ones(facts: dict) -> None:
    """GPU facts past what any GPU has, of another type, or absurd (a clock of 1 MHz, which
    would raise the floor above real times) fall back to the generous stand-ins, so the floor
    stays finite and never rises; none raises (an int past 2^53 overflowed a float)."""
    data = json.loads(COMMITTED.read_text())
    gpu, prob = data["env"]["gpu"], data["problem"]
    floor = plausible.floor_us(prob, True, {**gpu, **facts})
    assert math.isfinite(floor) and 0 < floor <= plausible.floor_us(prob, True, gpu)


def test_attended_pairs_are_the_fewer_of_the_causal_alignments() -> None:
    for lq, lk in [(1, 1), (5, 3), (3, 5), (64, 64), (1, 4096), (4096, 1), (7, 100)]:
        top_left = sum(min(lk, i + 1) for i in range(lq))
        bottom_right = sum(min(lk, max(0, i + 1 + lk - lq)) for i in range(lq))
        assert plausible.attended_pairs(lq, lk, True) == min(top_left, bottom_right)
        assert plausible.attended_pairs(lq, lk, False) == lq * lk
    assert plausible.attended_pairs(2**40, 2**40, True) == 2**40 * (2**40 + 1) // 2  # no loop


@pytest.mark.parametrize("content", [[], "no-env", "no-ratios"], ids=["[]", "no-env", "no-ratios"])
def test_case8_malformed_baseline_exits_4(good: dict[str, Any], tmp_path: Path, content: Any,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Also a flashrepro row without its ratios (a KeyError traceback once)."""
    bdir = tmp_path / "baselines"
    shutil.copytree(BASELINES, bdir)
    path = bdir / BASELINE_FILE.relative_to(BASELINES)
    if content == "no-env":
        content = {k: v for k, v in json.loads(BASELINE_FILE.read_text()).items() if k != "env"}
    elif content == "no-ratios":
        content = json.loads(BASELINE_FILE.read_text())
        del content["records"]["flashrepro"]["round_ratios"]
    path.write_text(json.dumps(content))
    assert _gate(_write(tmp_path / "r.json", good), baseline_dir=bdir) == 4
    err = capsys.readouterr().err
    assert str(path) in err and "Traceback" not in err


def test_case8_an_unwritable_baseline_dir_exits_4(good: dict[str, Any], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    results = _write(tmp_path / "r.json", good)
    assert cli(["gate", "--update-baseline", "--results", str(results),
                "--baseline-dir", "/proc"]) == 4
    err = capsys.readouterr().err
    assert "/proc" in err and "Traceback" not in err


def test_case8_an_unbounded_round_count_is_refused_before_allocating(
        good: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rec in good["records"]:
        if "round_medians_us" in rec:
            rec["round_medians_us"] = (rec["round_medians_us"] * 101)[:10_001]
            rec.pop("ratio_rounds", None)
    assert _gate(_write(tmp_path / "r.json", good)) == 4
    assert "10000 rounds" in capsys.readouterr().err


def test_case8_readme_check_shows_a_skipped_row(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """fa4-cute skipped on a host without flash-attn-4: a table that differs, not a
    KeyError."""
    data = json.loads(COMMITTED.read_text())
    for rec in data["records"]:
        if rec["name"].startswith("fa4-cute"):
            for key in [k for k in rec if k not in ("name", "description", "causal")]:
                del rec[key]
            rec["skipped"] = "flash_attn.cute.flash_attn_func is not available"
    path = _write(tmp_path / "r.json", data)
    assert cli(["readme", "--check", "--results", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "differ" in out and "Traceback" not in err
    from flashrepro_harness import readme
    row = next(line for line in readme.headline(data).splitlines() if "`fa4-cute`" in line)
    assert "skipped" in row


def test_case8_readme_check_names_a_missing_file(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere" / "reproduce.json"
    assert cli(["readme", "--check", "--results", str(missing)]) == 4
    err = capsys.readouterr().err
    assert str(missing) in err and "Traceback" not in err


# -- inputs that passed, or raised, before the gate refused them ---------------------------------

def _baseline_copy(tmp_path: Path, mutate) -> Path:
    """A copy of the committed baselines with the article problem's file mutated."""
    bdir = tmp_path / "baselines"
    shutil.copytree(BASELINES, bdir)
    path = bdir / BASELINE_FILE.relative_to(BASELINES)
    content = json.loads(path.read_text())
    mutate(content)
    path.write_text(json.dumps(content))
    return bdir


def _no_work(data: dict[str, Any]) -> None:
    """flashrepro and its twin at 0.17 of their times (4.4 µs: below the H200's floor of 8 µs,
    above the one of twice its FLOPs per clock)."""
    for name in ("flashrepro", "reference:flashrepro"):
        _slow(data, name, 0.17)


def _everything(data: dict[str, Any], factor: float) -> None:
    for rec in data["records"]:
        if "round_medians_us" in rec:
            _slow(data, rec["name"], factor)


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda d: d["reference"].update(commit=d["env"]["git_commit"]),
                 id="paired-with-itself"),
    pytest.param(lambda d: d.pop("method"), id="no-method"),
    pytest.param(lambda d: d["method"].pop("timer"), id="method-without-timer"),
    pytest.param(lambda d: d["problem"].update(window=64), id="unknown-problem-field"),
    pytest.param(lambda d: (d["env"]["gpu"].update(capability=None), _everything(d, 0.12)),
                 id="capability-null-times-x0.12"),
    pytest.param(lambda d: (d["env"]["gpu"].update(capability="99.0"), _everything(d, 0.12)),
                 id="capability-unknown-times-x0.12"),
    pytest.param(lambda d: (d["env"]["gpu"].update(max_sm_clock_mhz=10**9),
                            _everything(d, 1e-3)), id="clock-1e9-times-x0.001"),
    pytest.param(lambda d: _everything(d, 2.5), id="torch-flash-2.5x-its-baseline"),
    pytest.param(lambda d: [_slow(d, r["name"], 3.0) for r in list(d["records"])
                            if r["name"].endswith(" (mma.sync)")], id="mma.sync-rows-3x"),
    pytest.param(lambda d: (d["env"]["gpu"].update(sm_count=10**6), _no_work(d)),
                 id="sm_count-1e6-a-timer-of-no-work"),
    pytest.param(lambda d: (d["env"]["gpu"].update(capability="10.0"), _no_work(d)),
                 id="h200-as-capability-10.0-a-timer-of-no-work"),
    pytest.param(lambda d: d["env"]["gpu"].update(capability="8.0"), id="h200-as-8.0"),
    pytest.param(lambda d: d["records"].append(
        {"name": "fa4-cute (mma.sync)", "failed": "x", "host_us": "abc"}),
        id="failed-row-host_us-str"),
])
def test_inputs_that_cannot_be_judged_are_refused(
        good: dict[str, Any], tmp_path: Path, mutate,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each passed (exit 0) or raised a traceback: a run paired with its own commit; one that
    does not say how it was timed, or names a problem field the judge does not know; GPU
    facts dropped or raised so the time floor fell below times scaled down (a ms/µs mix-up);
    torch-flash, the primary metric's denominator, timed far from its baseline's with every
    row moved alike; a failed row's host time of another type."""
    if "reference" in good and not good["reference"].get("commit"):
        good["reference"]["commit"] = "75413b1" + "0" * 33
    mutate(good)
    assert _gate(_write(tmp_path / "r.json", good)) == 4
    err = capsys.readouterr().err
    assert "r.json" in err and "Traceback" not in err


def test_results_of_a_modified_checkout_are_not_the_commit_s(good: dict[str, Any],
                                                             tmp_path: Path) -> None:
    good["env"]["git_modified"] = True
    path = _write(tmp_path / "r.json", good)
    assert _gate(path) == 0  # judged, as a run by hand
    assert _gate(path, "--expect-commit", good["env"]["git_commit"]) == 4


def test_twins_timed_as_slow_as_their_rows_meet_the_backstop(good: dict[str, Any],
                                                              tmp_path: Path) -> None:
    """A row 8 % slower whose twin reads 8 % slower too (a forged or broken reference)
    passes the pair; the baseline, on its own setup, fails it beyond the threshold plus
    gate.check.BASELINE_BACKSTOP; 3 % on both stays a warning (a machine's offset)."""
    for factor, code in ((1.08, 1), (1.03, 0)):
        data = copy.deepcopy(good)
        for name in ("flashrepro", "reference:flashrepro"):
            _slow(data, name, factor)
        assert _gate(_write(tmp_path / "r.json", data)) == code, factor


def test_a_reference_error_without_a_message_still_pairs_nothing(good: dict[str, Any],
                                                                  tmp_path: Path) -> None:
    """A bare ImportError() left "error": "" in the results, which read as a loaded
    reference: every row then lacked its twin (a false refusal)."""
    good["reference"] = {"src": "/tmp/base/src", "error": ""}
    good["records"] = [r for r in good["records"] if not r["name"].startswith("reference:")]
    assert _gate(_write(tmp_path / "r.json", good)) == 0


def test_a_reference_expected_but_not_loaded_is_refused(good: dict[str, Any],
                                                         tmp_path: Path) -> None:
    """With --expect-reference-commit the job meant to pair: a reference that did not load
    leaves the baseline alone to judge, whose denominator the run itself times."""
    good["reference"] = {"src": "/tmp/base/src", "error": "ImportError: x"}
    for rec in list(good["records"]):
        if rec["name"].startswith("reference:"):
            good["records"].remove(rec)
    path = _write(tmp_path / "r.json", good)
    assert _gate(path) == 0  # no reference expected: the baseline judges (warned)
    assert _gate(path, "--expect-reference-commit", "75413b1") == 4


@pytest.mark.parametrize("option", ["--summary", "--verdict-json", "$GITHUB_STEP_SUMMARY"])
def test_the_gate_never_writes_its_input(good: dict[str, Any], tmp_path: Path, option: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "r.json", good)
    before = path.read_bytes()
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    if option.startswith("$"):
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "." / "r.json"))
        assert _gate(path) == 4
        os.link(path, tmp_path / "hard-link.md")  # the same file by another name
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "hard-link.md"))
        assert _gate(path) == 4
    else:
        assert _gate(path, option, str(path)) == 4
    assert path.read_bytes() == before


def test_the_verdict_never_overwrites_the_baseline(good: dict[str, Any], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bdir = _baseline_copy(tmp_path, lambda b: None)
    path = bdir / BASELINE_FILE.relative_to(BASELINES)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    assert _gate(_write(tmp_path / "r.json", good), baseline_dir=bdir) == 4
    assert json.loads(path.read_text())["schema"] == "flashrepro.baseline/1"


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda b: b["env"].update(git_commit=12345), id="commit-int"),
    pytest.param(lambda b: b["history"][0].update(git_commit=1), id="history-commit-int"),
    pytest.param(lambda b: b["records"]["flashrepro"].update(
        round_ratios=b["records"]["flashrepro"]["round_ratios"][:6]), id="ratios-6-of-100"),
])
def test_baselines_that_raised_are_refused(good: dict[str, Any], tmp_path: Path, mutate,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    bdir = _baseline_copy(tmp_path, mutate)
    assert _gate(_write(tmp_path / "r.json", good), baseline_dir=bdir) == 4
    assert "Traceback" not in capsys.readouterr().err


def test_a_new_baseline_keeps_the_previous_one_s_rows(good: dict[str, Any],
                                                     tmp_path: Path) -> None:
    """--update-baseline from a run without the mma.sync child's rows wrote a baseline
    without them, so later runs lacking them passed: refused (exit 5), the old file kept."""
    bdir = _baseline_copy(tmp_path, lambda b: None)
    path = bdir / BASELINE_FILE.relative_to(BASELINES)
    before = path.read_bytes()
    good["records"] = [r for r in good["records"] if " (mma.sync)" not in r["name"]]
    results = _write(tmp_path / "r.json", good)
    assert cli(["gate", "--update-baseline", "--results", str(results),
                "--baseline-dir", str(bdir)]) == 5
    assert path.read_bytes() == before


def test_without_a_baseline_a_hopper_run_needs_its_mma_sync_rows(good: dict[str, Any],
                                                                  tmp_path: Path) -> None:
    """A GPU without a committed baseline, judged by its twins alone: dropping the mma.sync
    child's rows (or only p-in-registers) fails, as dropping any other row does."""
    good["env"]["gpu"].update(name="NVIDIA H200 NVL", key="nvidia-h200-nvl")
    assert _gate(_write(tmp_path / "ok.json", good)) == 0
    for drop in (" (mma.sync)", "flashrepro-p-in-registers"):
        data = copy.deepcopy(good)
        data["records"] = [r for r in data["records"] if drop not in r["name"]]
        assert _gate(_write(tmp_path / "r.json", data)) == 5, drop


# -- reproduce --gate for real on the CPU, with the GPU timer stood in for ------------------------

class FakeTimer:
    """Stands in for :func:`flashrepro_harness.bench.timing.interleaved_rounds`.

    Each callable is called once (a kernel that raises, raises here); its per-round µs are
    ``base x cost x machine_r x (1 + 0.2 % noise)``: base 61 µs for torch's rows and 26 µs for
    the others, ``machine_r`` shared by the round (1 % sd), ``cost`` 1 unless the call
    multiplied :attr:`cost` (a kernel declaring itself slower)."""

    def __init__(self) -> None:
        self.cost = 1.0
        self.rng = np.random.default_rng(0)

    def __call__(self, fns, rounds: int, calls_per_round: int) -> dict[str, list[float]]:
        machine = 1 + 0.01 * self.rng.standard_normal(rounds)
        out = {}
        for name, fn in fns.items():
            self.cost = 1.0
            fn()
            base = 61.0 if name.startswith("torch") else 26.0
            noise = 1 + 0.002 * self.rng.standard_normal(rounds)
            out[name] = (base * self.cost * machine * noise).tolist()
        return out


@pytest.fixture(scope="module")
def reference_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this checkout's ``src/flashrepro``: the paired reference (the base commit)."""
    src = tmp_path_factory.mktemp("reference") / "src"
    shutil.copytree(Path(flashrepro.__file__).parent, src / "flashrepro",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return src


@pytest.fixture
def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTimer:
    """A CUDA GPU as ``reproduce`` sees it, on the CPU: a small article problem (for the run
    and the judge), inputs on the CPU, no synchronisation, an A100's environment and its
    sm_80 path (no mma.sync child), no FA4, and :class:`FakeTimer` for the timer."""
    if not interpreter_mode():
        pytest.skip("runs the kernels under Triton's interpreter")
    toml = tmp_path / "article.toml"
    toml.write_text(SMALL_ARTICLE)
    monkeypatch.setattr(problem.load_article, "__defaults__", (toml,))
    inputs = problem.Problem.inputs
    monkeypatch.setattr(problem.Problem, "inputs",
                        lambda self, device="cpu", seed=0: inputs(self, device="cpu", seed=seed))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda *args: SimpleNamespace(multi_processor_count=132))
    monkeypatch.setattr(env, "capture", lambda: synthetic_env("nvidia-a100", capability="8.0"))
    monkeypatch.setattr(env, "nvml_clocks", lambda *args: {})
    monkeypatch.setattr(bench_reproduce, "busy_wait_us", lambda: 1000.0)
    monkeypatch.setattr(bench_reproduce, "launch_arch", lambda *args: 80)
    monkeypatch.setattr(bench_reproduce, "host_and_eager_rounds",
                        lambda fns, *args, **kwargs: {n: (10.0, 20.0) for n in fns})
    timer = FakeTimer()
    monkeypatch.setattr(bench_reproduce, "interleaved_rounds", timer)
    for mod in ("flash_attn", "flash_attn.cute"):
        monkeypatch.setitem(sys.modules, mod, None)
    for var in ("FLASHREPRO_RESULTS_DIR", "FLASHREPRO_BASELINE_DIR", "GITHUB_STEP_SUMMARY",
                WRONG_OUTPUT, "FLASHREPRO_INJECT_SLOWDOWN", "FLASHREPRO_REQUIRE_GPU"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "baselines").mkdir()
    return timer


def _reproduce(tmp_path: Path, *extra: str, reference: Path | None = None,
               rounds: str = ROUNDS, mode: str = "--gate") -> int:
    argv = ["reproduce", *([mode] if mode else []), "--no-sass", "--rounds", rounds,
            "--calls", "1",
            "--out", str(tmp_path / "out"), "--baseline-dir", str(tmp_path / "baselines"),
            *extra]
    if reference is not None:
        argv += ["--reference-src", str(reference)]
    return cli(argv)


def _patch_head(monkeypatch: pytest.MonkeyPatch, wrap) -> None:
    """``flashrepro.attention`` of the code under test (not the reference's) replaced by
    ``wrap(real)``: the rows flashrepro and flashrepro-article-config call it."""
    monkeypatch.setattr(flashrepro, "attention", wrap(flashrepro.attention))


def _slower(timer: FakeTimer, factor: float):
    def wrap(real):
        def attention(*args, **kwargs):
            timer.cost *= factor
            return real(*args, **kwargs)
        return attention
    return wrap


def test_control_reproduce_gate_paired_a_a_passes(fake_gpu: FakeTimer, tmp_path: Path,
                                          reference_src: Path) -> None:
    """The control of the reproduce path: unchanged code, paired, passes (and the file it
    writes passes gate --results too)."""
    assert _reproduce(tmp_path, reference=reference_src) == 0
    results = json.loads((tmp_path / "out" / "reproduce.json").read_text())
    assert results["gate"]["status"] == "pass"
    assert _gate(tmp_path / "out" / "reproduce.json", baseline_dir=tmp_path / "baselines") == 0


def test_case1_a_raising_flashrepro_kernel_fails_reproduce_gate(
        fake_gpu: FakeTimer, tmp_path: Path, reference_src: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def wrap(real):
        def attention(*args, **kwargs):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return attention
    _patch_head(monkeypatch, wrap)
    assert _reproduce(tmp_path, reference=reference_src) == 5
    out = capsys.readouterr().out
    assert "flashrepro" in out and "illegal memory access" in out


def test_case1_a_run_with_a_failed_kernel_is_never_a_baseline(
        fake_gpu: FakeTimer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def wrap(real):
        def attention(*args, **kwargs):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return attention
    _patch_head(monkeypatch, wrap)
    assert _reproduce(tmp_path, mode="--update-baseline") == 5
    assert not any((tmp_path / "baselines").iterdir()), "a baseline without flashrepro"


def _nan(real):
    def attention(*args, **kwargs):
        return real(*args, **kwargs).fill_(float("nan"))
    return attention


def test_case2_a_plain_reproduce_of_a_nan_kernel_exits_5(
        fake_gpu: FakeTimer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _patch_head(monkeypatch, _nan)
    assert _reproduce(tmp_path, mode="") == 5
    assert "flashrepro: max abs(o - ref) = nan" in capsys.readouterr().err


def test_case2_a_kernel_returning_nan_fails_reproduce_gate(
        fake_gpu: FakeTimer, tmp_path: Path, reference_src: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _patch_head(monkeypatch, _nan)
    assert _reproduce(tmp_path, reference=reference_src) == 5
    results = json.loads((tmp_path / "out" / "reproduce.json").read_text())
    rec = _record(results, "flashrepro")
    assert math.isnan(rec["max_abs_err"]) and rec["tolerance"] == 5e-3


def test_case2_the_wrong_output_test_hook_fails_reproduce_gate(
        fake_gpu: FakeTimer, tmp_path: Path, reference_src: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The acceptance's "kernel returning wrong values": FLASHREPRO_TEST_WRONG_OUTPUT adds
    its value to one element of the flashrepro row's output (the head's call only)."""
    monkeypatch.setenv(WRONG_OUTPUT, "0.01")
    assert _reproduce(tmp_path, reference=reference_src) == 5
    results = json.loads((tmp_path / "out" / "reproduce.json").read_text())
    assert _record(results, "flashrepro")["max_abs_err"] == pytest.approx(0.01, abs=1e-3)
    assert _record(results, "reference:flashrepro")["max_abs_err"] < 5e-3
    assert _record(results, "flashrepro-article-config")["max_abs_err"] < 5e-3
    assert results["test_hooks"] == {WRONG_OUTPUT: 0.01}


def test_case3_reproduce_gate_refuses_too_few_rounds(
        fake_gpu: FakeTimer, tmp_path: Path, reference_src: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _patch_head(monkeypatch, _slower(fake_gpu, 3.0))
    assert _reproduce(tmp_path, reference=reference_src, rounds="5") == 2
    assert "--rounds >= 6" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert _reproduce(tmp_path, reference=reference_src, rounds="6") == 1


def test_case4_reproduce_gate_refuses_a_misspelled_baseline_dir(
        fake_gpu: FakeTimer, tmp_path: Path, reference_src: Path) -> None:
    argv = ["--baseline-dir", str(tmp_path / "baslines")]
    assert _reproduce(tmp_path, *argv, reference=reference_src) == 4
    assert not (tmp_path / "out").exists(), "refused before timing"


def test_control_reproduce_gate_a_three_times_slower_kernel_fails(
        fake_gpu: FakeTimer, tmp_path: Path, reference_src: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _patch_head(monkeypatch, _slower(fake_gpu, 3.0))
    assert _reproduce(tmp_path, reference=reference_src) == 1


def test_case7_a_failed_run_leaves_no_stale_results(
        fake_gpu: FakeTimer, tmp_path: Path, reference_src: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that passed, then one whose kernel fails in the timing rounds: the old
    reproduce.json must not survive to be judged as the new run's."""
    assert _reproduce(tmp_path, reference=reference_src) == 0
    out = tmp_path / "out"
    assert (out / "reproduce.json").is_file()
    calls = []

    def wrap(real):
        def attention(*args, **kwargs):
            calls.append(1)
            if len(calls) > 4:  # the probe and the output check of both rows pass
                raise RuntimeError("CUDA error: unspecified launch failure")
            return real(*args, **kwargs)
        return attention
    _patch_head(monkeypatch, wrap)
    assert _reproduce(tmp_path, reference=reference_src) == 5
    assert not any(out.glob("reproduce.*")) and not (out / "summary.md").exists()
    assert _gate(out / "reproduce.json", baseline_dir=tmp_path / "baselines") == 4


def test_the_wrong_output_hook_is_the_harness_s_alone() -> None:
    """The library never reads the test hook: only the harness's flashrepro row does."""
    library = Path(flashrepro.__file__).parent
    assert not [p for p in library.rglob("*.py") if WRONG_OUTPUT in p.read_text()]
    harness = REPO / "src" / "flashrepro_harness"
    readers = sorted(str(p.relative_to(harness)) for p in harness.rglob("*.py")
                     if WRONG_OUTPUT in p.read_text())
    assert readers == ["bench/reproduce.py"]
