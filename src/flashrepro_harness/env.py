"""Environment capture, recorded next to every result (``flashrepro doctor`` prints it).

Clocks and the driver version come from NVML (``nvidia-ml-py``) when installed, the rest from
torch, triton and git. torch and triton are imported inside the functions that read them, so the
argparse types here load without them (``flashrepro --help``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import math
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from flashrepro_harness.paths import CHECKOUT


def shown_path(path: Path) -> str:
    """``path`` as results and reports show it: relative to the repository root when inside
    it, else as given."""
    try:
        return str(path.resolve().relative_to(CHECKOUT or Path.cwd()))
    except ValueError:
        return str(path)


def _git_commit() -> str | None:
    """The commit the results come from: ``FLASHREPRO_GIT_COMMIT`` (the image's build argument),
    else ``git rev-parse HEAD``, else ``GITHUB_SHA``."""
    if commit := os.environ.get("FLASHREPRO_GIT_COMMIT"):
        return commit
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=CHECKOUT, capture_output=True,
                             text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("GITHUB_SHA")
    return out.stdout.strip() or None


def _git_modified() -> bool | None:
    """Whether the checkout's tracked files differ from its ``HEAD`` (``git status
    --porcelain --untracked-files=no`` prints anything), so that ``git_commit`` does not name
    the code that ran; None where the commit comes from ``FLASHREPRO_GIT_COMMIT`` or git
    cannot tell."""
    if os.environ.get("FLASHREPRO_GIT_COMMIT"):
        return None
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                             cwd=CHECKOUT, capture_output=True, text=True, timeout=30,
                             check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip())


def gpu_key(name: str) -> str:
    """A file-name-safe GPU model key: 'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def nvml_clocks() -> dict[str, Any]:
    """Current SM and memory clocks (MHz), maximum SM clock, driver version, temperature (°C)
    and power limit via NVML, of the GPU that is torch's ``cuda:0`` (:func:`_nvml_handle`).

    Returns an empty dict when NVML (``nvidia-ml-py``) or a GPU is not available, or when that
    GPU cannot be told apart among several.
    """
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
        try:
            h = _nvml_handle(pynvml)
            if h is None:
                return {}
            info = {
                "driver": pynvml.nvmlSystemGetDriverVersion(),
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "temperature_c": pynvml.nvmlDeviceGetTemperature(h,
                                                                 pynvml.NVML_TEMPERATURE_GPU),
                "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
            }
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return {}
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in info.items()}


def _nvml_handle(pynvml: Any) -> Any:
    """NVML's handle of torch's ``cuda:0``: NVML numbers every GPU of the host in PCI order,
    CUDA only those ``CUDA_VISIBLE_DEVICES`` shows, in its own order, so NVML's GPU 0 may be
    another card. Found by the PCI bus id torch reports; else NVML's GPU 0 where NVML sees one
    GPU alone; else None (the clocks of another card would be recorded as the timed one's)."""
    bus_id = _pci_bus_id()
    if bus_id is not None:
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        except (pynvml.NVMLError, TypeError):  # TypeError: a pynvml that takes bytes only
            pass
    if pynvml.nvmlDeviceGetCount() == 1:
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    return None


def _pci_bus_id() -> str | None:
    """``cuda:0``'s PCI address as NVML spells it (``00000000:3B:00.0``), from torch's device
    properties; None without a GPU or where torch does not report it."""
    import torch

    try:
        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(0)
    except RuntimeError:  # a GPU that CUDA cannot open: no bus id, the count decides
        return None
    parts = [getattr(props, f"pci_{field}_id", None) for field in ("domain", "bus", "device")]
    if not all(isinstance(part, int) for part in parts):
        return None
    domain, bus, device = parts
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def _version(distribution: str) -> str | None:
    """The installed version of ``distribution``, None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu() -> dict[str, Any]:
    """The host CPU's model name (``/proc/cpuinfo``, else ``platform.processor()``) and logical
    cores: host µs per call depend on it (lab/2026-12-01-host-path/)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"model": model or platform.processor() or None, "logical_cores": os.cpu_count()}


def capture() -> dict[str, Any]:
    """Everything a result depends on besides the code: GPU, SMs, L2 size, driver, CUDA,
    versions, the host CPU (:func:`cpu`), date.

    Returns a JSON-ready dict. ``gpu`` is None on a machine without a CUDA GPU.
    """
    import torch
    import triton

    from flashrepro import native

    env: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "git_modified": _git_modified(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "image_digest": os.environ.get("FLASHREPRO_IMAGE_DIGEST"),
        "flash_attn_4": _version("flash-attn-4"),  # the fa4-cute peer (extra fa4), or None
        # plan hits launched from C++ (flashrepro.native: decode and forward), switched on
        "native_decode": os.environ.get(native.SWITCH) == "1",
        "cpu": cpu(),
        "gpu": None,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": props.name,
            "key": gpu_key(props.name),
            "capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "l2_bytes": props.L2_cache_size,  # the kernels' head groups follow it
            "memory_gib": round(props.total_memory / 2**30, 1),
            **nvml_clocks(),
        }
    return env


def require_gpu() -> bool:
    """Whether a missing GPU is an error here (``FLASHREPRO_REQUIRE_GPU=1``, the GPU runners)."""
    return os.environ.get("FLASHREPRO_REQUIRE_GPU", "0") == "1"


GIB_PER_XDIST_WORKER = 8
"""GPU memory budgeted per pytest-xdist worker: a CUDA context plus a test's tensors."""


def xdist_workers() -> int:
    """pytest-xdist workers for the GPU suite: one per usable CPU core (compiles dominate), at
    most one per ``GIB_PER_XDIST_WORKER`` GiB of the smallest GPU, per GPU; 1 without a GPU.
    ``tests/conftest.py`` deals them out to the GPUs in turn.
    """
    import torch

    per_gpu = [max(1, torch.cuda.get_device_properties(i).total_memory
                   // (GIB_PER_XDIST_WORKER << 30))
               for i in range(torch.cuda.device_count())]
    by_memory = len(per_gpu) * min(per_gpu, default=1)
    return max(1, min(len(os.sched_getaffinity(0)), by_memory))


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from exc
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def no_gpu_reason() -> str:
    """What ``doctor`` says when torch sees no CUDA GPU, with what to do: a CPU build of torch
    (``torch.version.cuda`` is None) cannot see one at all; a CUDA build may be kept from it by
    ``CUDA_VISIBLE_DEVICES`` or, in Docker, by a missing ``--gpus all``."""
    import torch

    if torch.version.cuda is None:
        return (f"none (torch {torch.__version__} is a CPU build; on a GPU host install "
                "requirements/gpu.in, as nox does where nvidia-smi exists)")
    return (f"none visible to torch (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}; with Docker, run with "
            "--gpus all and the NVIDIA container toolkit)")
