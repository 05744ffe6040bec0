"""``flashrepro model``: Qwen3-0.6B-shaped prefill tokens/s, flashrepro against torch SDPA's
backends and FlashAttention 4 (:mod:`flashrepro_harness.qwen3`); ``--merge`` joins the
``model.json`` files of separate runs into one table. ``--generate``: the generate() benchmark
instead (:mod:`flashrepro_harness.qwen3.generate`: prefill and decode tokens/s, eager with a
DynamicCache and compiled with a StaticCache, and a packed-sequence prefill), written to
``generate.json``, ``.md`` and ``.png``; with ``--merge`` it joins ``generate.json`` files."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flashrepro_harness import env
from flashrepro_harness.outputs import output_dir, require_plotting
from flashrepro_harness.qwen3 import IMPLS, MODES, REFERENCE
from flashrepro_harness.qwen3.generate_tables import GEN_IMPLS, GEN_MODES
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
    parser.add_argument("--out", type=output_dir, default=None, help="results folder")
    parser.add_argument("--merge", nargs="+", metavar="MODEL_JSON", default=None,
                        help="measure nothing: join these model.json files (generate.json "
                             "with --generate) of one machine and setup (e.g. an eager and a "
                             "compile run) into one table")
    gen = parser.add_argument_group(
        "generate() benchmark", "greedy generation after a prompt without padding: prefill "
        "and decode tokens/s; the defaults aim at about 6 minutes on an H200, most of it "
        "compiling the static mode's decode step (once per implementation and B)")
    gen.add_argument("--generate", action="store_true",
                     help="run the generate() benchmark instead of the prefill one")
    gen.add_argument("--gen-modes", type=_csv(GEN_MODES), default=list(GEN_MODES),
                     help="comma-separated: eager (DynamicCache), static (StaticCache, decode "
                          "step torch.compile(mode='reduce-overhead')); default both")
    gen.add_argument("--gen-impls", type=_csv(GEN_IMPLS), default=None,
                     help=f"comma-separated subset of {','.join(GEN_IMPLS)} (default: eager "
                          "frepro,sdpa-cudnn,sdpa-flash,fa4; static frepro,sdpa-cudnn,"
                          "sdpa-efficient; pairs a mode cannot run are left out with the "
                          "reason)")
    gen.add_argument("--batches", type=env.positive_int, nargs="+", default=[1, 16],
                     help="batch sizes B (default: %(default)s)")
    gen.add_argument("--prompt", type=env.positive_int, default=1024,
                     help="prompt tokens per sequence (default: %(default)s)")
    gen.add_argument("--new-tokens", type=_at_least_two, default=128,
                     help="tokens generated per sequence, >= 2 (default: %(default)s)")
    gen.add_argument("--gen-rounds", type=env.positive_int, default=3,
                     help="rounds, each one generation per implementation (eager: run "
                          "in lockstep, a forward of each in turn; static: one after "
                          "another) (default: %(default)s)")
    gen.add_argument("--no-packed", dest="packed", action="store_false",
                     help="leave out the packed-sequence prefill")
    gen.add_argument("--packed-seqs", type=env.positive_int, default=16,
                     help="sequences of the packed-sequence prefill (default: %(default)s)")
    gen.add_argument("--packed-lengths", type=env.positive_int, nargs=2, default=[128, 2048],
                     metavar=("MIN", "MAX"),
                     help="their lengths, drawn uniformly (default: %(default)s)")


def _at_least_two(text: str) -> int:
    value = env.positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected an int >= 2, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    """Measure (or ``--merge``), write ``model.json``, ``model.md`` and ``model.png`` and print
    the table; returns 0, 1 when a compile row (measured or merged) is flagged as not
    compiled (:func:`~flashrepro_harness.qwen3.tables.not_compiled`), or 2 for unusable
    options or files. Without a GPU one line, exit 0
    (1 when FLASHREPRO_REQUIRE_GPU=1)."""
    if args.generate:
        return run_generate(args)

    from flashrepro_harness.qwen3 import build, measure, tables

    if args.merge:
        require_plotting()
        try:
            merged = tables.merge(_read_parts(args.merge), names=[str(p) for p in args.merge])
        except ValueError as exc:
            print(f"model: {exc}", file=sys.stderr)
            return 2
        out_dir = _merge_out(args.out, merged)
        if out_dir is None:
            return 2
        tables.write_results(out_dir, merged)
        print(tables.table(merged["rows"], "simple"))
        code = _report_not_compiled(merged["rows"])
        print(f"model: wrote {env.shown_path(out_dir)}/model.{{json,md,png}}")
        return code
    try:
        shape_list = build.shapes(args.lengths, args.tokens, args.short)
    except ValueError as exc:
        print(f"model: {exc}")
        return 2
    refused, transformers_version = _gpu_and_transformers()
    if refused is not None:
        return refused
    require_plotting()
    environment = env.capture()
    environment["transformers"] = transformers_version
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
    code = _report_not_compiled(rows)
    for k, v in {**skipped, **errors}.items():
        print(f"left out: {k}: {v[:300]}")
    print(f"model: wrote {env.shown_path(out_dir)}/model.{{json,md,png}}")
    return code


def _report_not_compiled(rows: list[dict[str, Any]]) -> int:
    """Print a line per compile row flagged as not compiled; the exit code: 1 if any, else 0."""
    from flashrepro_harness.qwen3 import tables

    notes = tables.not_compiled_notes(rows)
    for note in notes:
        print(f"NOT COMPILED: {note}")
    return 1 if notes else 0


def _gpu_and_transformers() -> tuple[int | None, str | None]:
    """(None, transformers' version) where a CUDA GPU and transformers (with the frepro
    attention registered) are at hand; else the exit code, after one line saying why: 0
    without a GPU (1 when FLASHREPRO_REQUIRE_GPU=1), 2 without transformers."""
    import torch

    if not torch.cuda.is_available():
        print("model: the benchmark needs a CUDA GPU (torch sees none)")
        return (1 if env.require_gpu() else 0), None
    try:
        import transformers
        from transformers import Qwen3ForCausalLM  # noqa: F401  (build.build_models)

        import flashrepro.integrations.transformers  # noqa: F401  (registers "frepro")
    except ImportError as exc:
        print(f"model: needs transformers (pip install 'flashrepro[models]'): {exc}")
        return 2, None
    return None, transformers.__version__


def _read_parts(paths: list[str]) -> list[Any]:
    """The ``--merge`` files' JSON. Raises ValueError naming the file (unreadable, not UTF-8,
    not JSON, nested too deeply: :func:`flashrepro_harness.gate.inputs.read_json`)."""
    from flashrepro_harness.gate.inputs import read_json

    return [read_json(Path(p), f"--merge {p}") for p in paths]


def _merge_out(out: Path | None, merged: dict[str, Any]) -> Path | None:
    """The merged table's folder (``--out``, else the merged GPU's results folder), made;
    None (the reason printed) where it cannot be written (:func:`output_dir`'s rule)."""
    out_dir = results_dir(out, merged["env"]["gpu"]["key"])
    try:
        output_dir(str(out_dir))
        out_dir.mkdir(parents=True, exist_ok=True)
    except (argparse.ArgumentTypeError, OSError) as exc:
        print(f"model: --out {out_dir}: {getattr(exc, 'strerror', None) or exc}",
              file=sys.stderr)
        return None
    return out_dir


def run_generate(args: argparse.Namespace) -> int:
    """``--generate``: measure (or ``--merge``), write ``generate.json``, ``.md`` and ``.png``,
    print the tables; 0, 2 for unusable options or files, 1 without a GPU when
    FLASHREPRO_REQUIRE_GPU=1 (else 0)."""
    from flashrepro_harness.qwen3 import generate_tables

    if args.merge:
        require_plotting()
        try:
            merged = generate_tables.merge(_read_parts(args.merge),
                                           names=[str(p) for p in args.merge])
        except ValueError as exc:
            print(f"model: {exc}", file=sys.stderr)
            return 2
        out_dir = _merge_out(args.out, merged)
        if out_dir is None:
            return 2
        generate_tables.write_results(out_dir, merged)
        print(generate_tables.table_generate(merged["rows"], "simple"))
        print(f"model: wrote {env.shown_path(out_dir)}/generate.{{json,md,png}}")
        return 0
    lo, hi = args.packed_lengths
    if lo > hi:
        print(f"model: --packed-lengths: MIN {lo} > MAX {hi}")
        return 2
    refused, transformers_version = _gpu_and_transformers()
    if refused is not None:
        return refused
    require_plotting()
    from flashrepro_harness.qwen3 import build, generate, measure

    started = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {line}", flush=True)

    environment = env.capture()
    environment["transformers"] = transformers_version
    wanted = {m: list(args.gen_impls or generate.DEFAULT_IMPLS[m]) for m in args.gen_modes}
    packed_runs = [(lay, i) for lay, i in generate.PACKED_RUNS
                   if args.gen_impls is None or i in args.gen_impls] if args.packed else []
    every = sorted({i for v in wanted.values() for i in v} | {i for _, i in packed_runs},
                   key=GEN_IMPLS.index)
    runnable, skipped = generate.registered(every)
    impls = {}
    for mode, names in wanted.items():
        impls[mode] = []
        for name in names:
            why = skipped.get(name) or generate.skip_reason(name, mode)
            if why:
                skipped[f"{mode} {name}"] = why
            else:
                impls[mode].append(name)
    packed_runs = [(lay, i) for lay, i in packed_runs if i in runnable
                   and not generate.skip_reason(i, lay)]
    config = build.qwen3_0_6b_config(args.layers)
    progress(f"building {len(runnable)} copies of the model ({args.layers} layers)")
    models = build.build_models(config, runnable)
    out_dir = results_dir(args.out, environment["gpu"]["key"])
    out_dir.mkdir(parents=True, exist_ok=True)
    packed_info = (None if not args.packed else
                   {"seqs": args.packed_seqs, "lo": lo, "hi": hi, "calls": 3,
                    "rounds": max(args.gen_rounds, 5)})
    errors: dict[str, str] = {}
    extra_rows: list[dict[str, Any]] = []

    def write(rows: list[dict[str, Any]]) -> None:
        results = {"schema": generate_tables.SCHEMA, "kind": "generate", "env": environment,
                   "model": config.to_dict(),
                   "method": generate.method(args.prompt, args.new_tokens, args.gen_rounds,
                                             packed_info),
                   "skipped": skipped, "errors": errors, "rows": rows + extra_rows}
        generate_tables.write_results(out_dir, results)

    with measure.recompile_room():
        rows, gen_errors = generate.measure_generate(
            models, list(args.gen_modes), args.batches, args.prompt, args.new_tokens,
            args.gen_rounds, impls, config.vocab_size, progress=progress, checkpoint=write)
    errors.update(gen_errors)
    if packed_runs and packed_info is not None:
        packed_rows, packed_errors, lengths = generate.measure_packed(
            models, packed_runs, args.packed_seqs, lo, hi, packed_info["rounds"],
            packed_info["calls"], config.vocab_size, progress=progress)
        errors.update(packed_errors)
        packed_info["lengths"] = lengths
        extra_rows += packed_rows
    write(rows)
    print(generate_tables.table_generate(rows, "simple"))
    if extra_rows:
        print(generate_tables.table_packed(extra_rows, "simple"))
    for k, v in {**skipped, **errors}.items():
        print(f"left out: {k}: {v[:300]}")
    progress(f"model: wrote {env.shown_path(out_dir)}/generate.{{json,md,png}}")
    return 0
