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
    monkeypatch.setattr(env, "nvml_clocks", lambda: {})
    gpu = env.capture()["gpu"]
    assert gpu["l2_bytes"] == 60 * 2**20 and gpu["sm_count"] == 132


class _FakeNvml:
    """pynvml's calls that :func:`env.nvml_clocks` makes, over GPUs given as {bus id: max SM
    clock}, in NVML's (PCI) order."""

    class NVMLError(Exception):
        pass

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0

    def __init__(self, gpus: dict[str, int]) -> None:
        self.gpus = gpus

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return list(self.gpus)[index]

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> str:
        if bus_id not in self.gpus:
            raise self.NVMLError("not found")
        return bus_id

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:
        return 345

    def nvmlDeviceGetMaxClockInfo(self, handle: str, kind: int) -> int:
        return self.gpus[handle]

    def nvmlDeviceGetTemperature(self, handle: str, kind: int) -> int:
        return 30

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: str) -> int:
        return 700_000


@pytest.mark.parametrize(("gpus", "bus_id", "clock"), [
    ({"00000000:1B:00.0": 1410, "00000000:3B:00.0": 1980}, "00000000:3B:00.0", 1980),
    ({"00000000:1B:00.0": 1410, "00000000:3B:00.0": 1980}, None, None),
    ({"00000000:3B:00.0": 1980}, None, 1980),
    ({"00000000:3B:00.0": 1980}, "00000000:99:00.0", 1980),
], ids=["by-bus-id", "two-gpus-no-bus-id", "one-gpu", "one-gpu-unknown-bus-id"])
def test_nvml_clocks_are_the_timed_gpu_s(monkeypatch: pytest.MonkeyPatch, gpus: dict,
                                         bus_id: str | None, clock: int | None) -> None:
    """With CUDA_VISIBLE_DEVICES=1 torch's cuda:0 is NVML's GPU 1: its clocks are found by
    the PCI bus id torch reports; without one, on a host of several GPUs, none are recorded
    (NVML's GPU 0, possibly another card, would be recorded as the timed one)."""
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(gpus))
    monkeypatch.setattr(env, "_pci_bus_id", lambda: bus_id)
    got = env.nvml_clocks()
    assert got.get("max_sm_clock_mhz") == clock
    assert (got == {}) is (clock is None)


def test_pci_bus_id_is_nvml_s_spelling(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import torch

    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    assert env._pci_bus_id() == "00000000:3B:00.0"
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace())
    assert env._pci_bus_id() is None


def test_nvml_clocks_survive_a_pynvml_that_takes_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older pynvml passes the bus id to ctypes as is and raises TypeError for a str: the
    GPU is then found as where no bus id is known (one GPU: NVML's first)."""
    import sys

    fake = _FakeNvml({"00000000:3B:00.0": 1980})

    def bytes_only(bus_id: object) -> str:
        raise TypeError("bytes or integer address expected instead of str instance")

    fake.nvmlDeviceGetHandleByPciBusId = bytes_only  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(env, "_pci_bus_id", lambda: "00000000:3B:00.0")
    assert env.nvml_clocks()["max_sm_clock_mhz"] == 1980


def test_pci_bus_id_of_a_gpu_cuda_cannot_open_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    def broken(index: int) -> None:
        raise RuntimeError("CUDA error: unknown error")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", broken)
    assert env._pci_bus_id() is None


def test_git_modified_says_whether_the_commit_names_the_code(tmp_path, monkeypatch) -> None:
    """A checkout whose tracked files differ from HEAD is recorded as modified (its
    git_commit does not name the code that ran); an untracked file is not a change."""
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    monkeypatch.delenv("FLASHREPRO_GIT_COMMIT", raising=False)
    monkeypatch.setattr(env, "CHECKOUT", tmp_path)
    assert env._git_modified() is None  # not a repository
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-q", "-m", "a")
    (tmp_path / "b.py").write_text("untracked\n")
    assert env._git_modified() is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert env._git_modified() is True
    monkeypatch.setenv("FLASHREPRO_GIT_COMMIT", "abc")
    assert env._git_modified() is None
