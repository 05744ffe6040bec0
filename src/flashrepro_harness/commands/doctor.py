"""``flashrepro doctor``: the GPU, driver, CUDA, torch and triton this environment sees
(:func:`flashrepro_harness.env.capture`) and the tuned table the default launch reads."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flashrepro_harness import env


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--require-gpu", action="store_true",
                        default=env.require_gpu(),
                        help="exit 1 when no CUDA GPU is visible (default from "
                             "FLASHREPRO_REQUIRE_GPU=1)")
    parser.add_argument("--xdist-workers", action="store_true",
                        help="print only the number of pytest-xdist workers for the GPU suite "
                             "(one per usable CPU core, at most one per "
                             f"{env.GIB_PER_XDIST_WORKER} GiB of GPU memory) and exit")


def run(args: argparse.Namespace) -> int:
    """Print what :func:`~flashrepro_harness.env.capture` sees, one ``key: value`` line each;
    returns 0, or 1 with ``--require-gpu`` when no CUDA GPU is visible (the reason also on
    stderr)."""
    from flashrepro.configs import TUNED_TABLE

    if args.xdist_workers:
        print(env.xdist_workers())
        return 0
    captured = env.capture()
    lines: list[tuple[str, Any]] = []
    for key, value in captured.items():
        if key == "cpu":
            lines += [(f"cpu.{sub}", v) for sub, v in value.items()]
        elif key != "gpu":
            lines.append((key, value))
    lines.append(("tuned table", str(TUNED_TABLE) if TUNED_TABLE.exists() else
                  f"none at {TUNED_TABLE}: the default launch uses the per-arch rules (the "
                  "package data flashrepro/tuned.json is missing from this install)"))
    reason = env.no_gpu_reason() if captured["gpu"] is None else None
    if reason is not None:
        lines.append(("gpu", reason))
    else:
        lines += [(f"gpu.{key}", value) for key, value in captured["gpu"].items()]
    width = max(len(key) for key, _ in lines)
    for key, value in lines:
        print(f"{key:>{width}}: {value}")
    if reason is not None and args.require_gpu:
        print(f"doctor: exit 1, --require-gpu (or FLASHREPRO_REQUIRE_GPU=1) and gpu: {reason}",
              file=sys.stderr)
        return 1
    return 0
