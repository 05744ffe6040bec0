"""``flashrepro sass``: SASS counts per arch against the model, the article and the golden file
(:mod:`flashrepro_harness.analysis.sass`), compiled without a GPU. Exit 0 when every count
matches the golden file, 1 on drift (the diff on stderr), 2 for unusable options."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flashrepro_harness.analysis import golden, sass
from flashrepro_harness.analysis.offline_compile import TARGETS
from flashrepro_harness.env import positive_int
from flashrepro_harness.outputs import OutputError, output_file, write_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", action="append", choices=list(TARGETS), dest="archs",
                        help="target to compile for (repeatable; default: all of "
                             f"{', '.join(TARGETS)})")
    parser.add_argument("--update", action="store_true",
                        help="rewrite the golden file with this run's counts (targets run only)")
    parser.add_argument("--golden", type=Path, default=None,
                        help="golden file (default: reproduce/golden/sass-triton-<version>.json)")
    parser.add_argument("--torch-lib", type=Path, default=None,
                        help="libtorch_cuda.so of a CUDA build of torch (default: the installed "
                             "torch's, if it is a CUDA build)")
    parser.add_argument("--markdown", type=output_file, default=None,
                        help="also write the full tables (every class) as GitHub markdown to "
                             "this file (missing folders are created)")
    parser.add_argument("--json", type=output_file, default=None,
                        help="also write the report (without the rendered tables) as JSON")
    parser.add_argument("--wide", action="store_true",
                        help="print every instruction class (about 235 columns) instead of the "
                             "compact table")
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="parallel compile processes (default: CPU count)")


def run(args: argparse.Namespace) -> int:
    """Print the tables; exit 1 on drift against the golden file (0 after ``--update``)."""
    if args.torch_lib is not None and not args.torch_lib.is_file():
        print(f"--torch-lib: no such file: {args.torch_lib}", file=sys.stderr)
        return 2
    if args.golden is not None and not args.golden.is_file() and not args.update:
        print(f"--golden: no such file: {args.golden} (--update creates it)", file=sys.stderr)
        return 2
    try:
        report = sass.sass_report(args.archs, args.torch_lib, args.golden, args.workers,
                                  args.update)
    except (ValueError, RuntimeError) as exc:  # a bad golden file, a library cuobjdump rejects
        print(f"sass: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.update:
        print(f"wrote {report['golden']['path']}")
    print(sass.format_tables(report, wide=True) if args.wide else report["text"])
    try:
        if args.markdown:
            write_text("--markdown", args.markdown, report["markdown"])
        if args.json:
            data = {k: v for k, v in report.items() if k not in ("text", "markdown")}
            write_text("--json", args.json, json.dumps(data, indent=1) + "\n")
    except OutputError as exc:
        print(f"sass: {exc}", file=sys.stderr)
        return 2
    if not report["golden"]["ok"]:
        print(golden.format_diff(report["golden"]["diff"], Path(report["golden"]["path"])),
              file=sys.stderr)
        return 1
    return 0
