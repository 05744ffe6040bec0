"""``flashrepro_harness.env``: what a results file records about the machine besides the code."""

from __future__ import annotations

import os
import sys

import pytest

from flashrepro_harness import env


def test_capture_records_the_host_cpu() -> None:
    """Host µs per call depend on the host CPU: every results file says which one it was."""
    cpu = env.capture()["cpu"]
    assert cpu["logical_cores"] == os.cpu_count()
    if sys.platform.startswith("linux"):
        assert isinstance(cpu["model"], str) and cpu["model"].strip()


def test_cpu_without_proc_cpuinfo_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    real = env.Path.read_text

    def no_cpuinfo(self: env.Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/cpuinfo":
            raise OSError("no such file")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(env.Path, "read_text", no_cpuinfo)
    monkeypatch.setattr(env.platform, "processor", lambda: "x86_64")
    assert env.cpu() == {"model": "x86_64", "logical_cores": os.cpu_count()}


@pytest.mark.parametrize("cuda", [None, "13.0"])
def test_doctor_without_a_gpu_says_why_and_require_gpu_fails_on_stderr(
        cuda: str | None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A CPU build of torch is named as the reason (no CUDA_VISIBLE_DEVICES or --gpus can fix
    it); a CUDA build without a visible GPU points at CUDA_VISIBLE_DEVICES and Docker's --gpus.
    --require-gpu exits 1 and says so on stderr; the key: value lines share one column."""
    import torch

    from flashrepro_harness.cli import build_parser
    from flashrepro_harness.commands import doctor

    monkeypatch.setattr(env, "capture", lambda: {
        "date": "d", "torch": "2.13.0+cpu", "cuda": cuda,
        "cpu": {"model": "m", "logical_cores": 2}, "gpu": None})
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.delenv("FLASHREPRO_REQUIRE_GPU", raising=False)
    assert doctor.run(build_parser().parse_args(["doctor"])) == 0
    out = capsys.readouterr().out.splitlines()
    assert len({line.index(": ") for line in out}) == 1, out
    gpu = next(line for line in out if line.lstrip().startswith("gpu:"))
    if cuda is None:
        assert "is a CPU build" in gpu and "requirements/gpu.in" in gpu
    else:
        assert "CUDA_VISIBLE_DEVICES=7" in gpu and "--gpus all" in gpu
    assert doctor.run(build_parser().parse_args(["doctor", "--require-gpu"])) == 1
    err = capsys.readouterr().err
    assert err.startswith("doctor: exit 1, --require-gpu") and env.no_gpu_reason() in err


def test_capture_records_the_l2_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The head-group size of every launch follows the GPU's L2 size
    (flashrepro.select.heads_per_group), so a results file records it with the SM count."""
    import types

    import torch

    props = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0,
                                  multi_processor_count=132, L2_cache_size=60 * 2**20,
                                  total_memory=140 * 2**30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91900)
    monkeypatch.setattr(env, "nvml_clocks", lambda index: {})
    gpu = env.capture()["gpu"]
    assert gpu["l2_bytes"] == 60 * 2**20 and gpu["sm_count"] == 132
