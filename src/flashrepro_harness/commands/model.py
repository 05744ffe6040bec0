"""``flashrepro model``: Qwen3-0.6B-shaped prefill tokens/s, flashrepro against torch SDPA's
backends and FlashAttention 4 (:mod:`flashrepro_harness.qwen3`); ``--merge`` joins the
``model.json`` files of separate runs into one table."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flashrepro_harness import env
from flashrepro_harness.qwen3 import IMPLS, MODES, REFERENCE
from flashrepro_harness.results import results_dir


def _csv(choices: tuple[str, ...] | list[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {','.join(choices)}, got {text!r}")
        return list(dict.fromkeys(items))
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modes", type=_csv(MODES), default=list(MODES),
                        help="comma-separated: eager,compile (default: both; eager runs "
                             "first). compile: regional, torch.compile of each decoder layer "
                             "(one graph shared by the layers), the rest eager")
    parser.add_argument("--impls", type=_csv(IMPLS), default=list(IMPLS),
                        help=f"comma-separated subset of {','.join(IMPLS)} (default: all; fa4 "
                             "only where flash_attn.cute imports)")
    parser.add_argument("--compile-impls", type=_csv(IMPLS), default=None,
                        help="the implementations compiled in the compile mode (default: "
                             "those of --impls)")
    parser.add_argument("--lengths", type=env.positive_int, nargs="+",
                        default=[1024, 4096, 16384],
                        help="sequence lengths L, each dividing --tokens (default: %(default)s)")
    parser.add_argument("--tokens", type=env.positive_int, default=16384,
                        help="B·L per shape (default: %(default)s)")
    parser.add_argument("--no-short", dest="short", action="store_false",
                        help="leave out the single short prefill B=1, L=1024")
    parser.add_argument("--layers", type=env.positive_int, default=28,
                        help="decoder layers (default: %(default)s, Qwen3-0.6B's)")
    parser.add_argument("--rounds", type=env.positive_int, default=10,
                        help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--calls", type=env.positive_int, default=3,
                        help="timed forwards per implementation per round (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--merge", nargs="+", metavar="MODEL_JSON", default=None,
                        help="measure nothing: join these model.json files of one machine "
                             "and setup (e.g. an eager and a compile run) into one table")


def run(args: argparse.Namespace) -> int:
    """Measure (or ``--merge``), write ``model.json``, ``model.md`` and ``model.png`` and print
    the table; returns 0, or 2 for unusable options or files. Without a GPU one line, exit 0
    (1 when FLASHREPRO_REQUIRE_GPU=1)."""
    import torch

    from flashrepro_harness.qwen3 import build, measure, tables

    if args.merge:
        try:
            parts = []
            for p in args.merge:
                try:
                    parts.append(json.loads(Path(p).read_text()))
                except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
                    raise ValueError(f"--merge: {p}: {exc}") from exc
            merged = tables.merge(parts, names=[str(p) for p in args.merge])
        except ValueError as exc:
            print(f"model: {exc}")
            return 2
        out_dir = results_dir(args.out, merged["env"]["gpu"]["key"])
        out_dir.mkdir(parents=True, exist_ok=True)
        tables.write_results(out_dir, merged)
        print(tables.table(merged["rows"], "simple"))
        print(f"model: wrote {env.shown_path(out_dir)}/model.{{json,md,png}}")
        return 0
    try:
        shape_list = build.shapes(args.lengths, args.tokens, args.short)
    except ValueError as exc:
        print(f"model: {exc}")
        return 2
    if not torch.cuda.is_available():
        print("model: the benchmark needs a CUDA GPU (torch sees none)")
        return 1 if env.require_gpu() else 0
    try:
        import transformers
        from transformers import Qwen3ForCausalLM  # noqa: F401  (build.build_models)

        import flashrepro.integrations.transformers  # noqa: F401  (registers "frepro")
    except ImportError as exc:
        print(f"model: needs transformers (pip install 'flashrepro[models]'): {exc}")
        return 2
    environment = env.capture()
    environment["transformers"] = transformers.__version__
    impls = list(args.impls)
    skipped: dict[str, str] = {}
    if "fa4" in impls and (why := build.fa4_available()):
        skipped["fa4"] = why
        impls.remove("fa4")
    elif "fa4" in impls:
        build.register_fa4()
    if REFERENCE not in impls:
        impls.append(REFERENCE)  # the logits reference runs (and is timed) always
    config = build.qwen3_0_6b_config(args.layers)
    models = build.build_models(config, impls)
    out_dir = results_dir(args.out, environment["gpu"]["key"])
    out_dir.mkdir(parents=True, exist_ok=True)
    text = tables.caption(environment, args.layers)

    def write(rows: list[dict[str, Any]], errors: dict[str, str]) -> None:
        results = {"schema": tables.SCHEMA, "kind": "model", "env": environment,
                   "model": config.to_dict(),
                   "method": measure.method(args.rounds, args.calls, args.tokens),
                   "skipped": skipped, "errors": errors, "rows": rows}
        tables.write_results(out_dir, results)

    with measure.recompile_room():
        rows, errors = measure.measure(models, args.modes, shape_list, args.rounds, args.calls,
                                       config.vocab_size, checkpoint=write,
                                       compile_impls=args.compile_impls)
    write(rows, errors)
    print(tables.table(rows, "simple"))
    print(text)
    for note in tables.mismatch_notes(rows):
        print(f"BACKEND MISMATCH: {note}")
    for k, v in {**skipped, **errors}.items():
        print(f"left out: {k}: {v[:300]}")
    print(f"model: wrote {env.shown_path(out_dir)}/model.{{json,md,png}}")
    return 0
