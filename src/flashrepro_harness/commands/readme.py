"""``flashrepro readme --check|--write``: README.md's tables against the committed results
JSON (:mod:`flashrepro_harness.readme`).

README.md and the results exist only in a clone of the repository: outside one, each file is
named with the option that takes its path. A file that is missing, cannot be read or cannot be
used exits 4 (the gate's "unusable input"), with its name and the reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flashrepro_harness import readme
from flashrepro_harness.outputs import write_atomic
from flashrepro_harness.paths import CHECKOUT

UNUSABLE = 4
"""Exit code for a file that cannot be read or used (the gate's BAD_INPUT)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="exit 1 if the tables drifted")
    group.add_argument("--write", action="store_true", help="rewrite the tables in README.md")
    parser.add_argument("--readme", type=Path, default=readme.README,
                        help=f"the README to check or rewrite (default: {_shown(readme.README)})")
    parser.add_argument("--results", type=Path, default=readme.RESULTS,
                        help="reproduce results JSON of the setup, headline and SASS tables "
                             f"(default: {_shown(readme.RESULTS)})")
    parser.add_argument("--model-results", type=Path, default=readme.MODEL_RESULTS,
                        help="model results JSON of the Qwen3 prefill table "
                             f"(default: {_shown(readme.MODEL_RESULTS)})")


def _shown(path: Path) -> str:
    """``path`` relative to the repository root where it lies inside it."""
    try:
        return str(path.relative_to(CHECKOUT or Path.cwd()))
    except ValueError:
        return str(path)


def _read(option: str, path: Path, parse: bool = True) -> Any:
    """The text (or, with ``parse``, the JSON) of ``path``; OSError and ValueError (not UTF-8,
    not JSON) name ``option`` and the file."""
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if parse else text
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise ValueError(f"{option} {path}: cannot read it: "
                         f"{getattr(exc, 'strerror', None) or exc}") from exc


def _rendered(args: argparse.Namespace) -> tuple[str, str]:
    """(README's text, its text with the generated tables).

    Raises:
        ValueError: a file cannot be read, or the tables cannot be made from the results
            (the message names the files)."""
    text = _read("--readme", args.readme, parse=False)
    results = _read("--results", args.results)
    model_results = _read("--model-results", args.model_results)
    try:
        return text, readme.render(text, results, model_results)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError,
            ArithmeticError) as exc:
        raise ValueError(f"cannot make the tables from --results {args.results} and "
                         f"--model-results {args.model_results} into --readme {args.readme}: "
                         f"{type(exc).__name__}: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    """Check or write; returns 0, 1 when ``--check`` finds a difference, 4 when a file is
    missing, cannot be read, used or written (named with its option)."""
    files = {"--readme": args.readme, "--results": args.results,
             "--model-results": args.model_results}
    missing = {option: path for option, path in files.items() if not path.is_file()}
    for option, path in missing.items():
        print(f"readme: {option}: no such file: {path} (README.md and the committed results "
              f"are in a clone of the repository: run there, or give the path with {option})",
              file=sys.stderr)
    if missing:
        return UNUSABLE
    try:
        text, new = _rendered(args)
        if args.write:
            write_atomic(args.readme, new)
            return 0
    except ValueError as exc:
        print(f"readme: {exc}", file=sys.stderr)
        return UNUSABLE
    except OSError as exc:
        print(f"readme: --readme {args.readme}: cannot write it: {exc.strerror or exc}",
              file=sys.stderr)
        return UNUSABLE
    if new != text:
        print(f"readme: tables in {_shown(args.readme)} differ from {_shown(args.results)} and "
              f"{_shown(args.model_results)}; run `flashrepro readme --write`")
        return 1
    print(f"readme: the tables in {_shown(args.readme)} match {_shown(args.results)} and "
          f"{_shown(args.model_results)}")
    return 0
