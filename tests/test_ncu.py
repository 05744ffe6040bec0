"""The Nsight Compute runner (:mod:`flashrepro_harness.analysis.ncu`) without a GPU.

``tests/fixtures/ncu_raw.csv`` and ``ncu_details.csv`` are hand-written in the formats ncu
prints (``--csv --page raw``: header row, units row, one row per launch; ``--page details``: one
row per metric; thousands separators; program output and ``==PROF==`` lines before the header)
— sample values, not measurements. ``tests/fixtures/fake_ncu.py`` stands in for the ``ncu``
executable so that the command line, the retry on unknown metrics and the import step run here.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from flashrepro_harness.analysis import ncu
from tests.conftest import HAS_GPU

FIXTURES = Path(__file__).parent / "fixtures"


def _v1_v2_expectations(kernels: list[ncu.KernelProfile]) -> None:
    assert [k.kernel for k in kernels] == ["ladder_v1_kernel", "ladder_v2_kernel"]
    assert [k.launch_id for k in kernels] == [0, 1]
    v1, v2 = kernels
    assert v1.value("dram__bytes_read.sum") == pytest.approx(16_912_003_072)
    assert v1.value("dram__bytes_write.sum") == pytest.approx(6_040_500_000)  # Mbyte -> byte
    assert v1.value("gpu__time_duration.sum") == pytest.approx(12_345_678)  # nanoseconds
    assert v1.value("smsp__inst_executed_pipe_tensor_op_hmma.sum") == 1_048_576
    assert v2.value("dram__bytes_read.sum") == pytest.approx(251_658_240)
    assert v2.value("dram__bytes_write.sum") == pytest.approx(83_886_080)
    assert v2.value("gpu__time_duration.sum") == pytest.approx(1_234_567)
    assert v2.metrics["smsp__inst_executed_pipe_tensor_op_hmma.sum"] == "n/a"
    assert v2.value("smsp__inst_executed_pipe_tensor_op_hmma.sum") is None
    assert v2.value("no__such_metric.sum") is None
    assert v2.value(None) is None


def test_parse_raw_page() -> None:
    kernels = ncu.parse_csv((FIXTURES / "ncu_raw.csv").read_text())
    _v1_v2_expectations(kernels)
    v1, v2 = kernels
    assert v1.value("launch__registers_per_thread") == 128
    assert v2.value("sm__warps_active.avg.pct_of_peak_sustained_active") == pytest.approx(48.75)
    assert v2.value("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum") == 0
    assert v1.units["dram__bytes_write.sum"] == "Mbyte"
    assert v1.metrics["device__attribute_display_name"] == "NVIDIA H200"
    assert "Block Size" not in v1.metrics


def test_parse_details_page() -> None:
    _v1_v2_expectations(ncu.parse_csv((FIXTURES / "ncu_details.csv").read_text()))


def test_parse_without_header_fails_clearly() -> None:
    with pytest.raises(ncu.NcuError, match="no ncu CSV header"):
        ncu.parse_csv("==ERROR== ERR_NVGPUCTRPERM - no permission to access the counters\n")


def test_resolve_prefers_known_names() -> None:
    wanted = {"gmma": ("smsp__inst_executed_pipe_tensor_op_gmma.sum",
                       "sm__inst_executed_pipe_tensor_op_gmma.sum"),
              "time": ("gpu__time_duration.sum",)}
    known = frozenset({"sm__inst_executed_pipe_tensor_op_gmma", "dram__bytes_read"})
    assert ncu.resolve(wanted, known) == {"gmma": "sm__inst_executed_pipe_tensor_op_gmma.sum",
                                          "time": "gpu__time_duration.sum"}
    assert ncu.resolve(wanted, None)["gmma"] == "smsp__inst_executed_pipe_tensor_op_gmma.sum"
    with pytest.raises(ValueError, match="at least one metric"):
        ncu.resolve({"x": ()}, None)


@pytest.fixture
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable ``ncu`` stand-in (tests/fixtures/fake_ncu.py) and its environment."""
    exe = tmp_path / "ncu"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FIXTURES / 'fake_ncu.py'} \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu.log"))
    monkeypatch.setenv("FAKE_NCU_CSV", str(FIXTURES / "ncu_raw.csv"))
    monkeypatch.delenv("FAKE_NCU_UNKNOWN", raising=False)
    return exe


def test_query_metrics(fake_ncu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_KNOWN", "dram__bytes_read,smsp__sass_inst_executed_op_ldsm")
    assert ncu.query_metrics(str(fake_ncu)) == {"dram__bytes_read",
                                                "smsp__sass_inst_executed_op_ldsm"}
    monkeypatch.setenv("FAKE_NCU_KNOWN", "")
    assert ncu.query_metrics(str(fake_ncu)) is None


def test_profile_builds_the_command_and_parses(fake_ncu: Path, tmp_path: Path) -> None:
    result = ncu.profile(["python", "-m", "workload", "--x"],
                         ["dram__bytes_read.sum", "gpu__time_duration.sum"],
                         kernel_regex="^(ladder_v1_kernel|ladder_v2_kernel)$", launch_skip=2,
                         launch_count=2, ncu=str(fake_ncu))
    _v1_v2_expectations(result.kernels)
    assert result.dropped == []
    assert result.csv == (FIXTURES / "ncu_raw.csv").read_text()
    logged = (tmp_path / "ncu.log").read_text().split()
    for option, value in (("--clock-control", "none"), ("--launch-skip", "2"),
                          ("--launch-count", "2"),
                          ("--kernel-name", "regex:^(ladder_v1_kernel|ladder_v2_kernel)$"),
                          ("--metrics", "dram__bytes_read.sum,gpu__time_duration.sum")):
        assert logged[logged.index(option) + 1] == value
    assert logged[-4:] == ["python", "-m", "workload", "--x"]


def test_profile_drops_unknown_metrics(fake_ncu: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_UNKNOWN", "smsp__inst_executed_pipe_tensor_op_gmma.sum")
    result = ncu.profile(["prog"], ["dram__bytes_read.sum",
                                    "smsp__inst_executed_pipe_tensor_op_gmma.sum"],
                         kernel_regex="ladder_", launch_count=2, ncu=str(fake_ncu))
    assert result.dropped == ["smsp__inst_executed_pipe_tensor_op_gmma.sum"]
    runs = (tmp_path / "ncu.log").read_text().splitlines()
    assert len(runs) == 2 and "gmma" not in runs[1]


def test_profile_fails_clearly(fake_ncu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_UNKNOWN", "dram__bytes_read.sum")
    with pytest.raises(ncu.NcuError, match=r"Failed to find metric dram__bytes_read\.sum"):
        ncu.profile(["prog"], ["dram__bytes_read.sum"], kernel_regex="k", ncu=str(fake_ncu))
    monkeypatch.delenv("FAKE_NCU_UNKNOWN")
    with pytest.raises(ncu.NcuError, match="expected 1 profiled launch"):
        ncu.profile(["prog"], ["dram__bytes_read.sum"], kernel_regex="k", ncu=str(fake_ncu))


def test_find_ncu(fake_ncu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ncu.find_ncu(str(fake_ncu)) == str(fake_ncu)
    monkeypatch.setenv(ncu.NCU_ENV, str(fake_ncu))
    assert ncu.find_ncu() == str(fake_ncu)
    monkeypatch.setenv(ncu.NCU_ENV, str(fake_ncu.parent / "missing-ncu"))
    assert ncu.find_ncu() is None


def test_unavailable_reason(fake_ncu: Path) -> None:
    assert "ncu" in (ncu.unavailable_reason(None) or "")
    reason = ncu.unavailable_reason(str(fake_ncu))
    if HAS_GPU:
        assert reason is None
    else:
        assert reason == "no CUDA GPU visible to torch"
    assert os.access(fake_ncu, os.X_OK)
