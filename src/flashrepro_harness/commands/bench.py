"""``flashrepro bench``: the L x D x causal x dtype sweep against torch's backends
(:mod:`flashrepro_harness.bench.sweep`); a GPU run writes ``bench.json``, ``bench.md`` and
``bench.png``."""

from __future__ import annotations

import argparse

import torch

from flashrepro_harness import env
from flashrepro_harness.bench import sweep
from flashrepro_harness.outputs import output_dir, require_plotting
from flashrepro_harness.problem import add_grid_arguments
from flashrepro_harness.results import results_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_grid_arguments(parser, "point")
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"],
                        choices=["float16", "bfloat16"],
                        help="input dtypes (default: %(default)s)")
    parser.add_argument("--rounds", type=env.positive_int, default=3,
                        help="interleaved rounds per point (default: %(default)s)")
    parser.add_argument("--calls", type=env.positive_int, default=10,
                        help="timed calls per kernel per round (default: %(default)s)")
    parser.add_argument("--out", type=output_dir, default=None, help="results folder")


def run(args: argparse.Namespace) -> int:
    """The sweep, its files and its table; without a GPU one line, exit 0 (1 when
    FLASHREPRO_REQUIRE_GPU=1)."""
    if not torch.cuda.is_available():
        print("bench: the sweep needs a CUDA GPU (torch sees none)")
        return 1 if env.require_gpu() else 0
    require_plotting()
    environment = env.capture()
    results = sweep.sweep(environment, args.lengths, args.head_dims, args.dtypes, args.tokens,
                          args.rounds, args.calls)
    sweep.write_results(results_dir(args.out, environment["gpu"]["key"]), results)
    print(sweep.table(results["points"], "simple"))
    print(sweep.caption(environment, args.tokens))
    return 0
