"""``flashrepro tune``: time candidate launch configs on this GPU and, with ``--write``, commit
the winners to ``flashrepro/tuned.json`` (:mod:`flashrepro_harness.bench.tune`)."""

from __future__ import annotations

import argparse
import json
import sys

import torch
from tabulate import tabulate

from flashrepro.configs import TUNED_TABLE, KernelConfig, launch_arch, length_bucket, table_key
from flashrepro.validation import MAX_HEAD_DIM
from flashrepro_harness import env
from flashrepro_harness.bench.tune import (
    CANDIDATES,
    best_config,
    candidates,
    problems,
    table_head_dim,
)
from flashrepro_harness.outputs import write_atomic
from flashrepro_harness.problem import add_grid_arguments
from flashrepro_harness.progress import progress


def _config_arg(text: str) -> KernelConfig:
    try:
        return KernelConfig.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _percent(text: str) -> float:
    error = argparse.ArgumentTypeError(f"a percentage in [0, 100) is needed, got {text!r}")
    try:
        value = float(text)
    except ValueError:
        raise error from None
    if not 0 <= value < 100:  # also false for NaN
        raise error
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_grid_arguments(parser, "problem")
    parser.add_argument("--rounds", type=env.positive_int, default=5,
                        help="interleaved rounds per problem (default: %(default)s)")
    parser.add_argument("--calls", type=env.positive_int, default=10,
                        help="timed calls per candidate per round (default: %(default)s)")
    parser.add_argument("--configs", type=_config_arg, nargs="+", default=CANDIDATES,
                        metavar="CONFIG",
                        help="candidates to time instead of the default list: labels such as "
                             "'128x64 w8 s3' or '64x64 w4 s3 tma', or names ('article')")
    parser.add_argument("--masks", choices=["full", "causal"], nargs="+",
                        default=["full", "causal"],
                        help="which problems to time: full (no mask), causal (default: both)")
    parser.add_argument("--against-table", action="store_true",
                        help="time each problem's current table entry too (a challenger run: "
                             "--configs against the incumbents, keys missing from the table "
                             "against --configs only)")
    parser.add_argument("--min-gain", type=_percent, default=1.0, metavar="PERCENT",
                        help="with --against-table, how much faster (in %%) a challenger must "
                             "be to replace the table's entry (default: %(default)s)")
    parser.add_argument("--write", action="store_true", help=f"update {TUNED_TABLE}")


def run(args: argparse.Namespace) -> int:
    """Time each problem's candidates and print the tables; returns 0, or 2 for options that
    fit no problem (refused before any timing). Without a GPU one line, exit 0 (1 when
    FLASHREPRO_REQUIRE_GPU=1)."""
    unkeyed = [d for d in args.head_dims if not table_head_dim(d)]
    if args.write and unkeyed:
        print(f"tune: --write needs --head-dims that are table keys, powers of two in "
              f"16..{MAX_HEAD_DIM} (the default launch pads D to one), got {unkeyed}",
              file=sys.stderr)
        return 2
    for d in args.head_dims:  # before any timing: a later problem would fail after minutes
        # (a challenger run keeps the table's entry where no challenger fits)
        if not candidates(d, args.configs) and not args.against_table:
            print(f"tune: none of --configs fits D={d} (above D = 128 only BLOCK_N <= 64 with "
                  f"<= 2 stages; 192-row tiles at D = 64 only): "
                  f"{[c.label() for c in args.configs]}", file=sys.stderr)
            return 2
    if not torch.cuda.is_available():
        print("tune: needs a CUDA GPU (torch sees none)")
        return 1 if env.require_gpu() else 0
    arch = launch_arch()
    table = json.loads(TUNED_TABLE.read_text()) if TUNED_TABLE.exists() else {}
    masks = tuple(mask == "causal" for mask in args.masks)
    for problem in progress(problems(args.lengths, args.head_dims, args.tokens, masks=masks),
                            "tune problems", unit="problem"):
        key = table_key(arch, problem.head_dim, problem.causal, length_bucket(problem.seqlen_q))
        if not candidates(problem.head_dim, args.configs):  # with --against-table only
            print(f"\n{problem.key()}: no challenger in --configs fits D={problem.head_dim}; "
                  "the table's entry stays")
            continue
        incumbent = KernelConfig(**table[key]) if args.against_table and key in table else None
        pool = list(dict.fromkeys([*args.configs, incumbent] if incumbent else args.configs))
        cfg, rows = best_config(problem, args.rounds, args.calls, pool, incumbent,
                                args.min_gain / 100)
        print(f"\n{problem.key()}: best {cfg.label()}")
        print(tabulate(rows, ["config", "µs", "note"], tablefmt="simple"))
        table[key] = cfg.as_dict()
    if args.write:
        write_atomic(TUNED_TABLE, json.dumps(dict(sorted(table.items())), indent=1) + "\n")
        print(f"wrote {TUNED_TABLE}")
    return 0
