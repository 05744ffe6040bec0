"""``flashrepro readme --check|--write``: README.md's tables against the committed results
JSON (:mod:`flashrepro_harness.readme`).

README.md and the results exist only in a clone of the repository: outside one, each file is
named with the option that takes its path, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flashrepro_harness import readme
from flashrepro_harness.paths import CHECKOUT


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


def run(args: argparse.Namespace) -> int:
    """Check or write; returns 0, 1 when ``--check`` finds a difference, 2 when a file is
    missing (named with its option)."""
    files = {"--readme": args.readme, "--results": args.results,
             "--model-results": args.model_results}
    missing = {option: path for option, path in files.items() if not path.is_file()}
    for option, path in missing.items():
        print(f"readme: {option}: no such file: {path} (README.md and the committed results "
              f"are in a clone of the repository: run there, or give the path with {option})",
              file=sys.stderr)
    if missing:
        return 2
    text = args.readme.read_text()
    new = readme.render(text, json.loads(args.results.read_text()),
                        json.loads(args.model_results.read_text()))
    if args.write:
        args.readme.write_text(new)
        return 0
    if new != text:
        print(f"readme: tables in {_shown(args.readme)} differ from {_shown(args.results)} and "
              f"{_shown(args.model_results)}; run `python -m flashrepro_harness readme --write`")
        return 1
    print(f"readme: the tables in {_shown(args.readme)} match {_shown(args.results)} and "
          f"{_shown(args.model_results)}")
    return 0
