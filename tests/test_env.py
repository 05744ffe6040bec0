"""``flashrepro.env``: what a results file records about the machine besides the code."""

from __future__ import annotations

import os
import sys

import pytest

from flashrepro import env


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
