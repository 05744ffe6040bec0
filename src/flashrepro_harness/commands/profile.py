"""``flashrepro profile``: the memory ladder and the executed-count check under Nsight Compute
(:mod:`flashrepro_harness.bench.profile`); without ncu or a GPU one line, exit 0 (1 with
``--require-gpu``)."""

from __future__ import annotations

import argparse
import os
import sys

from flashrepro_harness import env
from flashrepro_harness.analysis import ncu
from flashrepro_harness.bench.profile import WORKLOADS, run_executed, run_ladder
from flashrepro_harness.outputs import output_dir
from flashrepro_harness.results import results_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--executed", action="store_true",
                      help="only the executed-count check (article kernel, both paths)")
    mode.add_argument("--ladder", action="store_true", help="only the memory-ladder table")
    parser.add_argument("--workload", choices=[*WORKLOADS, "all"], default="all",
                        help="ladder workload(s) to profile (default: all)")
    parser.add_argument("--out", type=output_dir, default=None,
                        help="output folder (default reproduce/results/<gpu-key>/)")
    parser.add_argument("--ncu-path", default=None,
                        help=f"ncu executable (default: ${ncu.NCU_ENV}, PATH, CUDA install)")
    parser.add_argument("--timeout", type=env.positive_seconds, default=300,
                        help="limit per ncu run, seconds (default 300)")
    parser.add_argument("--require-gpu", action="store_true",
                        default=os.environ.get("FLASHREPRO_REQUIRE_GPU") == "1",
                        help="exit 1 instead of 0 when ncu or a GPU is missing")


def run(args: argparse.Namespace) -> int:
    """Both jobs (or the one asked for); returns 0, or 1 when a run failed or a count differs."""
    ncu_path = ncu.find_ncu(args.ncu_path)
    if args.ncu_path and ncu_path is None:  # asked for by name: not a skip
        print(f"profile: --ncu-path {args.ncu_path}: no such executable", file=sys.stderr)
        return 2
    reason = ncu.unavailable_reason(ncu_path)
    if reason is not None:
        print(f"profile: skipped: {reason}")
        return 1 if args.require_gpu else 0
    args.ncu_path = ncu_path
    environment = env.capture()
    out = results_dir(args.out, environment["gpu"]["key"])
    known = ncu.query_metrics(ncu_path)
    status = 0
    if not args.executed:
        status |= run_ladder(args, environment, out, known)
    if not args.ladder:
        status |= run_executed(args, environment, out, known)
    print(f"profile: wrote {out}")
    return status
