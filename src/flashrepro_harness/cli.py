"""Command line: ``flashrepro SUBCOMMAND ...`` or ``python -m flashrepro_harness SUBCOMMAND``
(:data:`COMMANDS`).

Each subcommand's module provides ``add_arguments(parser)`` and ``run(args) -> int`` (the exit
code); only the chosen one is imported, so ``--help`` loads neither torch nor triton.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterable

COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("flashrepro_harness.commands.doctor",
               "report the GPU, driver, CUDA, torch and triton seen here"),
    "reproduce": ("flashrepro_harness.commands.reproduce",
                  "the article run: timings vs torch, SASS table"),
    "bench": ("flashrepro_harness.commands.bench",
              "L x D x causal x dtype sweep vs torch; table + plot"),
    "model": ("flashrepro_harness.commands.model",
              "Qwen3-0.6B-shaped prefill tokens/s: flashrepro vs SDPA cuDNN/flash, FA4"),
    "tune": ("flashrepro_harness.commands.tune",
             "time launch configs, write flashrepro/tuned.json"),
    "profile": ("flashrepro_harness.commands.profile",
                "Nsight Compute: memory ladder, executed counts (docs/article.md)"),
    "sass": ("flashrepro_harness.commands.sass",
             "SASS counts per arch vs model, article, golden"),
    "gate": ("flashrepro_harness.commands.gate",
             "judge a results JSON: by its reference twins, else its per-GPU baseline"),
    "readme": ("flashrepro_harness.commands.readme",
               "check or rewrite README.md's tables from the results JSON"),
}
"""Subcommand -> (module with ``add_arguments`` and ``run``, help text)."""


DESCRIPTION = ("A FlashAttention forward kernel (Triton; Gluon on Hopper) and the rerun of "
               "its published analysis: timings vs torch SDPA (GPU), SASS counts (any Linux "
               "machine), the regression "
               "gate. Options of each subcommand: flashrepro SUBCOMMAND --help. The nox "
               "sessions (README) are thin calls to these.")
"""What ``flashrepro --help`` says above the list of subcommands (the module docstring is for
developers)."""


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The ``flashrepro`` parser: one subparser per :data:`COMMANDS` entry, options spelled out
    in full (``allow_abbrev=False``: ``--round 3`` is an error, not ``--rounds 3``).

    Args:
        commands: the subcommands whose options are added (each imports its module); default
            every one. The others are listed with their help text but take no options.
    """
    wanted = set(COMMANDS if commands is None else commands)
    parser = argparse.ArgumentParser(prog="flashrepro", description=DESCRIPTION,
                                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        p.set_defaults(module=module)
        if name in wanted:
            importlib.import_module(module).add_arguments(p)
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``argv`` (default ``sys.argv[1:]``) with the options of the subcommand it names
    only (its first word that is not an option); an unknown option after a subcommand is
    reported with that subcommand's usage line (argparse would show the top-level one), exit
    status 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser([chosen] if chosen in COMMANDS else [])
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        subparsers = next(a for a in parser._actions
                          if isinstance(a, argparse._SubParsersAction))
        subparsers.choices[args.command].error(
            f"unrecognized arguments: {' '.join(unknown)}")
    return args


EXTRAS = {"tabulate": "harness", "tqdm": "harness", "scipy": "harness",
          "matplotlib": "plot", "transformers": "models"}
"""Third-party modules the commands import -> the pyproject extra that installs them
(``pip install .`` installs the kernels' dependencies alone)."""


def main(argv: list[str] | None = None) -> int:
    """Run the subcommand ``argv`` names; its exit code. A module of an extra that is not
    installed is named with the extra to install, exit 2 (never 1, the gate's regression)."""
    try:
        args = parse(argv)
        return int(importlib.import_module(args.module).run(args))
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get(exc.name or "")  # a submodule missing is a broken install
        if extra is None:
            raise
        print(f"flashrepro: {exc.name} is not installed; it comes with flashrepro's {extra!r} "
              f"extra: pip install 'flashrepro[{extra}]' (from a clone: pip install "
              f"'.[{extra}]')", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
