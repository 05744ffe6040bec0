"""``python -m flashrepro_harness tune``: time candidate launch configs and commit the winners.

The default launch never tunes at call time: it looks its config up in the committed table
``flashrepro/tuned.json`` (:func:`flashrepro.configs.default_config`), keyed by arch, head dim,
causal and a power-of-two bucket of Lq. This command rebuilds that table on the GPU it runs on.
Each candidate is checked against torch SDPA before it may win; the correct candidates of a
problem are timed together in interleaved rounds
(:func:`flashrepro_harness.bench.timing.interleaved_rounds`), so clock drift favours none of them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys

import torch
from tabulate import tabulate

from flashrepro.configs import TUNED_TABLE, KernelConfig, launch_arch, length_bucket, table_key
from flashrepro.validation import MAX_HEAD_DIM
from flashrepro_harness import env
from flashrepro_harness.bench import impls as K
from flashrepro_harness.bench import peers
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.outputs import write_atomic
from flashrepro_harness.problem import Problem, add_grid_arguments
from flashrepro_harness.progress import progress

# The configs that won at least one point of the full grids on the H200 (lab/2026-11-29-*,
# the first four experiments; 30 configs were timed there) and the article's 64x64 pointer build.
# Two-stage 128-row tiles (128x64 and 128x128, 8 warps) were tried again later and lost every
# D = 128 non-causal point to their three-stage versions by 13-46 %
# (lab/2026-11-29-host-time-per-call/).
CANDIDATES = [
    KernelConfig(64, 64, 4, 3),
    KernelConfig(64, 64, 4, 2, tma=True),
    KernelConfig(64, 64, 4, 3, tma=True),
    KernelConfig(64, 32, 4, 3, tma=True),
    KernelConfig(64, 128, 4, 2, tma=True),
    KernelConfig(128, 64, 8, 3, tma=True),
    KernelConfig(128, 128, 8, 3, tma=True),
]


def candidates(head_dim: int, pool: list[KernelConfig] = CANDIDATES) -> list[KernelConfig]:
    """Launch configs of ``pool`` worth timing for ``head_dim``: those that fit, and 192-row
    tiles (the ws kernel's three consumers) at D = 64 only, the one D they run at (elsewhere
    the launch runs another config, which would be timed under their label)."""
    pool = [c for c in pool if not c.three_consumers or head_dim == 64]
    if head_dim > 128:  # K/V stages of 256-wide rows do not fit 228 KB of shared memory
        return [c for c in pool if c.block_n <= 64 and c.num_stages <= 2]
    return pool


def problems(lengths: list[int], head_dims: list[int], tokens: int,
             dtype: str = "float16", masks: tuple[bool, ...] = (False, True)) -> list[Problem]:
    """Problems with H = 16 and B·L = ``tokens`` (B >= 1), for each causal flag in ``masks``."""
    out = []
    for length, d, causal in itertools.product(lengths, head_dims, masks):
        out.append(Problem(batch=max(1, tokens // length), heads=16, seqlen_q=length,
                           seqlen_k=length, head_dim=d, dtype=dtype, causal=causal))
    return out


def best_config(problem: Problem, rounds: int, calls: int,
                pool: list[KernelConfig] = CANDIDATES, incumbent: KernelConfig | None = None,
                min_gain: float = 0.0) -> tuple[KernelConfig, list[list]]:
    """Time every candidate on ``problem``; return the fastest correct one (as
    :func:`winner`) and the table rows.

    Candidates whose output differs from torch SDPA's by 2e-2 or more, or that fail to build
    (tiles that do not fit shared memory), are listed with the reason and never win. The rest
    run in ``rounds`` interleaved rounds of ``calls`` calls; a candidate's time (µs) is the
    median of its per-round medians. ``incumbent`` (one of ``pool``) and ``min_gain``: see
    :func:`winner`. The optional peers (:data:`flashrepro_harness.bench.peers.PEERS`) are timed in
    the same rounds as rows ``peer <name>`` that never win, or listed with the reason they did not
    run (not installed, or unsupported here).
    """
    inputs = problem.inputs()
    q, k, v = inputs
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=problem.causal)
    rows: list[list] = []
    configs: dict[str, KernelConfig] = {}
    fns = {}
    for cfg in candidates(problem.head_dim, pool):
        call = K.make_call("flashrepro", inputs, problem.causal, config=cfg)
        try:
            err = (call().float() - ref.float()).abs().max().item()
        except Exception as exc:  # tiles that do not fit, or a config Triton cannot build
            rows.append([cfg.label(), "n/a", f"{type(exc).__name__}: {exc}".splitlines()[0][:70]])
            continue
        if not err < 2e-2:
            rows.append([cfg.label(), "n/a", f"wrong: max err {err:.2g}"])
            continue
        configs[cfg.label()] = cfg
        fns[cfg.label()] = call
    if not fns:
        raise RuntimeError(f"no candidate ran correctly on {problem.key()}: {rows}")
    peer_fns, peer_notes = {}, {}
    for name in peers.PEERS:
        reason = K.available(name, inputs, problem.causal)
        if reason:
            rows.append([f"peer {name}", "n/a", f"skipped: {reason}"[:90]])
            continue
        call = K.make_call(name, inputs, problem.causal)
        err = (K.output(name, call()).float() - ref.float()).abs().max().item()
        peer_fns[f"peer {name}"] = call
        peer_notes[f"peer {name}"] = f"{peers.PEERS[name].layout}, max err {err:.2g}"
    per_round = interleaved_rounds({**fns, **peer_fns}, rounds=rounds, calls_per_round=calls)
    times = {label: statistics.median(per_round[label]) for label in fns}
    rows += [[label, f"{us:.1f}", ""] for label, us in times.items()]
    rows += [[label, f"{statistics.median(per_round[label]):.1f}", peer_notes[label]]
             for label in peer_fns]
    return configs[winner(times, None if incumbent is None else incumbent.label(), min_gain)], rows


def winner(times: dict[str, float], incumbent: str | None, min_gain: float) -> str:
    """The label of the fastest of ``times`` (µs by config label), unless ``incumbent`` (the
    table's entry, if it ran correctly) is within ``min_gain`` (a fraction) of it: a challenger
    must be faster by more than the noise of a few rounds to replace the committed entry, so
    the table does not flip between configs that tie (an entry once moved on 0.5 % over 3
    rounds, and the sweep then showed the point unchanged: lab/2026-11-29-turn-next-q-epilogue/).
    """
    fastest = min(times, key=times.__getitem__)
    if incumbent in times and times[fastest] > times[incumbent] * (1 - min_gain):
        return incumbent
    return fastest


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


def table_head_dim(head_dim: int) -> bool:
    """Whether the tuned table has keys for ``head_dim``: the default launch looks D up padded
    to a power of two >= 16 (:func:`flashrepro.configs.default_config`), so a winner timed at
    D=96 could only go under a key ``sm90-d96-...`` that no launch reads."""
    return 16 <= head_dim <= MAX_HEAD_DIM and head_dim & (head_dim - 1) == 0


def run(args: argparse.Namespace) -> int:
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
