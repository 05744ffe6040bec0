"""``python -m flashrepro_harness profile`` without a GPU: the model, the tables, the skip path, and
both jobs end to end against the ``ncu`` stand-in of ``tests/test_ncu.py`` (sample CSVs written
here in ncu's raw-page format; the values are test inputs, not measurements)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashrepro_harness.bench import profile
from flashrepro_harness.bench.ladder_kernels import KERNEL_NAMES
from tests.test_ncu import fake_ncu  # noqa: F401  (pytest fixture)

ROOT = Path(__file__).resolve().parents[1]


def test_expected_executed_matches_the_seed() -> None:
    """The SASS article: 2048 warps run the on-band body once, 15360 = 2048 x 7.5 off-band
    iterations in all, 256 static HMMA execute 8704 times on average; HMMA executed on mma.sync
    = 2048 x 8.5 x 128 = 2,228,224 (also what docs/article.md measured on the H200)."""
    expected = profile.expected_executed()
    assert expected["mma.sync"]["hmma"] == 2_228_224 == 256 * 8704 == 128 * (2048 + 15360)
    # ARTICLE.md's static sm_80 SASS: 112 LDSM.16.M88.4 + 16 LDSM.16.MT88.4 in two loop bodies
    assert expected["mma.sync"]["ldsm"] == (112 + 16) // 2 * (2048 + 15360)
    # wgmma: D/16 HGMMA for Q·Kᵀ and BN/16 for P·V per body, also counted by the HMMA pipe
    assert expected["wgmma"]["hgmma"] == (128 // 16 + 64 // 16) * (2048 + 15360)
    assert expected["wgmma"]["hmma"] == expected["wgmma"]["hgmma"]
    assert expected["mma.sync"]["hgmma"] == 0
    with pytest.raises(ValueError, match="article config only"):
        profile.expected_executed(profile.WORKLOADS["source"])


def _raw_csv(rows: list[tuple[str, dict[str, float]]]) -> str:
    """A raw-page CSV in ncu's layout: header, units row, one row per launch."""
    ids = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
           "Block Size", "Grid Size", "Device", "CC"]
    metrics = sorted({m for _, values in rows for m in values})
    lines = [",".join(f'"{h}"' for h in ids + metrics), ",".join('""' for _ in ids + metrics)]
    for i, (kernel, values) in enumerate(rows):
        cells = [str(i), "1", "python3", "host", kernel, "1", "7", "(128, 1, 1)", "(1, 1, 1)",
                 "0", "9.0"] + [f"{values[m]:,}" if m in values else "n/a" for m in metrics]
        lines.append(",".join(f'"{c}"' for c in cells))
    return "==PROF== Connected to process 1\n" + "\n".join(lines) + "\n"


def _args(fake: Path, **kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"ncu_path": str(fake), "timeout": 60, "workload": "all", **kw})


def _executed_csv(counts: dict[str, int]) -> str:
    names = {q: profile.METRICS[q][0] for q in profile.EXECUTED_METRICS}
    return _raw_csv([("article_fwd_kernel", {names[q]: v for q, v in counts.items()})])


@pytest.mark.parametrize("off_by", [0, 1])
def test_run_executed(off_by: int, fake_ncu: Path, tmp_path: Path,  # noqa: F811
                      monkeypatch: pytest.MonkeyPatch) -> None:
    expected = profile.expected_executed()
    wgmma = dict(expected["wgmma"])
    wgmma["ldsm"] += off_by
    (tmp_path / "mma.csv").write_text(_executed_csv(expected["mma.sync"]))
    (tmp_path / "wgmma.csv").write_text(_executed_csv(wgmma))
    monkeypatch.setenv("FAKE_NCU_CSV_MMA", str(tmp_path / "mma.csv"))
    monkeypatch.setenv("FAKE_NCU_CSV", str(tmp_path / "wgmma.csv"))
    out = tmp_path / "out"
    status = profile.run_executed(_args(fake_ncu), {"gpu": None}, out, None)
    assert status == off_by
    report = json.loads((out / "executed.json").read_text())
    assert report["passed"] is (off_by == 0)
    md = (out / "executed.md").read_text()
    assert ("DIFFERS" in md) is bool(off_by) and "2,228,224" in md
    assert (out / "executed_mma_sync.csv").read_text() == (tmp_path / "mma.csv").read_text()
    runs = (tmp_path / "ncu.log").read_text().splitlines()
    assert len(runs) == 2 and all("regex:^(article_fwd_kernel)$" in r for r in runs)


def _ladder_csv(variants: tuple[str, ...], reads: dict[str, float]) -> str:
    m = profile.METRICS
    rows = []
    for variant in variants:
        rows.append((KERNEL_NAMES[variant], {
            m["time_ns"][0]: 1000.0 if variant == "v1" else 400.0,
            m["dram_read_bytes"][0]: reads[variant], m["dram_write_bytes"][0]: 8e7,
            m["conflicts_ld"][0]: 700.0 if variant == "v2_kcol" else 0.0,
            m["wavefronts_ld"][0]: 1100.0, m["registers"][0]: 128.0}))
    return _raw_csv(rows)


def test_run_ladder(fake_ncu: Path, tmp_path: Path,  # noqa: F811
                    monkeypatch: pytest.MonkeyPatch) -> None:
    variants = profile.WORKLOADS["article"].variants
    reads = {"v1": 1.0e10, "v2_kcol": 4.0e8, "v2_kt": 4.0e8, "article": 3.0e8, "fwd": 3.0e8}
    (tmp_path / "ladder.csv").write_text(_ladder_csv(variants, reads))
    monkeypatch.setenv("FAKE_NCU_CSV", str(tmp_path / "ladder.csv"))
    out = tmp_path / "out"
    assert profile.run_ladder(_args(fake_ncu, workload="article"), {"gpu": None}, out, None) == 0
    report = json.loads((out / "ladder.json").read_text())
    records = report["runs"]["article"]["records"]
    assert [r["variant"] for r in records] == list(variants)
    assert records[1]["metrics"]["dram_read_bytes"] == 4.0e8
    assert records[1]["metrics"]["hgmma"] is None  # not in the CSV: n/a, not a crash
    md = (out / "ladder.md").read_text()
    table = _md_rows(md, "workload")
    v2 = next(r for r in table if r["workload"] == "article" and r["variant"] == "v2_kcol")
    assert v2["read vs v1 %"] == "-96.00"  # 4e8 of v1's 1e10 bytes
    assert v2["ld conflicts %"] == "63.64"  # 700 / 1100
    assert v2["time µs"] == "0.4" and v2["HGMMA"] == "n/a"
    claims = {r["claim"]: r for r in _md_rows(md, "claim")}
    assert claims["speed, v2 vs v1"]["ours: article config"] == "+150%"  # 1000 ns -> 400 ns
    assert claims["HBM reads, v1 -> v2"]["memory article"] == "-92.98%"
    assert claims["HBM reads, v1 -> v2"]["ours: source workload"] == "n/a"


def _md_rows(md: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the markdown table whose first column is ``first_header``."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("|") and line.split("|")[1].strip() == first_header)
    cells = [[c.strip() for c in line.strip().strip("|").split("|")]
             for line in lines[start:] if line.startswith("|")]
    end = next((i for i, row in enumerate(cells[2:], 2) if len(row) != len(cells[0])),
               len(cells))
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:end]]


def test_run_ladder_reports_wrong_kernel(fake_ncu: Path, tmp_path: Path,  # noqa: F811
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    csv = _ladder_csv(profile.WORKLOADS["article"].variants, dict.fromkeys(KERNEL_NAMES, 1e8))
    (tmp_path / "ladder.csv").write_text(csv.replace("attn_fwd_kernel", "other_kernel"))
    monkeypatch.setenv("FAKE_NCU_CSV", str(tmp_path / "ladder.csv"))
    out = tmp_path / "out"
    assert profile.run_ladder(_args(fake_ncu, workload="article"), {"gpu": None}, out, None) == 1
    assert "other_kernel, expected attn_fwd_kernel" in (out / "ladder.md").read_text()


@pytest.mark.parametrize("require_gpu", [False, True])
def test_skip_without_ncu(require_gpu: bool, tmp_path: Path) -> None:
    """No ncu: one line on stdout, nothing on stderr, exit 0 (1 with --require-gpu)."""
    env = {**os.environ, "FLASHREPRO_NCU": str(tmp_path / "no-ncu"),
           "PYTHONPATH": str(ROOT / "src")}
    env.pop("FLASHREPRO_REQUIRE_GPU", None)
    cmd = [sys.executable, "-m", "flashrepro_harness", "profile", "--out", str(tmp_path / "out"),
           *(["--require-gpu"] if require_gpu else [])]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert run.returncode == int(require_gpu)
    assert run.stderr == ""
    assert run.stdout.count("\n") == 1 and run.stdout.startswith("profile: skipped: ")
    assert not (tmp_path / "out").exists()
