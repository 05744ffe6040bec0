"""Test set-up: pick interpreter or GPU mode before any Triton kernel is defined.

Without a CUDA GPU the kernels run under Triton's CPU interpreter (``TRITON_INTERPRET=1``),
which must be set before :mod:`flashrepro` is imported. ``FLASHREPRO_REQUIRE_GPU=1`` turns a
missing GPU into a failure instead of a skip (used on the GPU runners).
"""

from __future__ import annotations

import os

import pytest
import torch


def pin_xdist_worker_to_gpu() -> None:
    """Give pytest-xdist worker ``gwN`` one GPU: ``CUDA_VISIBLE_DEVICES`` = visible GPU N mod count.

    The GPU runners start a worker per CPU core (``flashrepro doctor --xdist-workers``: Triton's
    compiles, on the CPU, take most of the suite's time), so each GPU serves several workers;
    with fewer than two GPUs, or outside xdist, nothing changes. Must run
    before CUDA is initialised: ``torch.cuda.device_count()`` asks NVML and leaves CUDA alone
    (without NVML it initialises CUDA, the pin then has no effect and workers share GPU 0).
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = torch.cuda.device_count()
    if not worker.startswith("gw") or count < 2:
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",")[:count] if visible else [str(i) for i in range(count)]
    os.environ["CUDA_VISIBLE_DEVICES"] = ids[int(worker[2:]) % count]


pin_xdist_worker_to_gpu()
HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

REQUIRE_GPU = os.environ.get("FLASHREPRO_REQUIRE_GPU", "0") == "1"
DEVICE = torch.device("cuda" if HAS_GPU else "cpu")
"""Where a test that runs on either machine puts its tensors: the GPU, else the CPU under the
interpreter (the ``device`` fixture's value, for module-level functions)."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` on a GPU host: ``flashrepro_harness.env.xdist_workers()``, the cores bounded
    by the GPUs' memory (``-n auto`` alone gave an 80 GiB H100 sixteen workers, which ran it
    out of memory). Without a GPU, or with ``PYTEST_XDIST_AUTO_NUM_WORKERS`` set, xdist's own
    count."""
    if not HAS_GPU or os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    from flashrepro_harness.env import xdist_workers

    return xdist_workers()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:  # the kernels are compiled for the GPU: the interpreter's cases cannot run
        skip = pytest.mark.skip(reason="needs Triton's CPU interpreter (a host without a GPU)")
        for item in items:
            if "interpreter" in item.keywords:
                item.add_marker(skip)
        return
    if REQUIRE_GPU:
        raise pytest.UsageError("FLASHREPRO_REQUIRE_GPU=1 but torch sees no CUDA GPU")
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> torch.device:
    """The device kernels run on: the GPU, or the CPU under the interpreter."""
    return DEVICE


@pytest.fixture(autouse=True)
def _fresh_launch_plans() -> None:
    """Each test starts with no cached launch plan: tests that monkeypatch the kernel choice
    must see it consulted (a plan from an earlier test would bypass it)."""
    from flashrepro import launch

    launch.clear_plans()


ON_EACH_MACHINE = [
    pytest.param("cpu", marks=pytest.mark.skipif(
        HAS_GPU, reason="the interpreter's case; on a GPU host the gpu case runs")),
    pytest.param("cuda", marks=pytest.mark.gpu),
]
"""Fixture params for tests that run on the CPU under the interpreter in CI and on the GPU in
``-m gpu`` runs (where an unmarked test would be deselected; the GPU job runs the whole suite)."""
