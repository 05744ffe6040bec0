"""``python -m flashrepro_harness reproduce``: the article run.

On a CUDA GPU: checks every kernel's output against a float32 reference, times flashrepro,
torch SDPA's flash, cuDNN and efficient backends and the optional peers
(:mod:`flashrepro_harness.bench.peers`: FA4's CuTe kernel where it imports, a skipped row
elsewhere) at the article config in interleaved rounds (:mod:`flashrepro_harness.bench.timing`),
records each one's host µs and eager back-to-back µs per call, then the same kernels on the article
problem without the causal mask (records suffixed `` (non-causal)``, issue 7's second target),
optionally repeats the flashrepro rows on the mma.sync path (``DISABLE_MMA_V3=1``, in a child
process: Triton reads it at compile time), and writes ``reproduce.json`` and ``reproduce.md``
under ``reproduce/results/<gpu-key>/``. Everywhere: the
SASS table. Without a GPU the timing part is one line, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from flashrepro.configs import MMA_V3_ARCHS, default_config, launch_arch
from flashrepro_harness import env
from flashrepro_harness.bench import impls as K
from flashrepro_harness.bench import peers
from flashrepro_harness.bench.reference import PREFIX, Reference
from flashrepro_harness.bench.reference import load as load_reference
from flashrepro_harness.bench.timing import (
    EAGER_METHOD,
    HOST_METHOD,
    SLEEP_CYCLES,
    Summary,
    busy_wait_us,
    host_and_eager_rounds,
    interleaved_rounds,
)
from flashrepro_harness.problem import Problem, load_article
from flashrepro_harness.report import reproduce_markdown, reproduce_table, write_summary
from flashrepro_harness.results import RESULTS_SCHEMA, baseline_dir, results_dir

SCHEMA = RESULTS_SCHEMA
NON_CAUSAL = " (non-causal)"
"""Suffix of the records timed on the article problem without its causal mask."""
KERNELS = [*K.FLASHREPRO, *K.TORCH_BACKENDS, *peers.PEERS]
"""The rows of the main table (and of its non-causal twin)."""


def check_outputs(problem: Problem, calls: dict[str, Callable[[], object]],
                  inputs: K.Inputs) -> dict[str, float]:
    """Max |o - ref| of each call (name -> callable of :func:`flashrepro_harness.bench.impls.
    make_call`) against a float32 reference on the timing inputs; a peer's output is viewed
    back as (B, H, L, D) (:func:`flashrepro_harness.bench.impls.output`) and checked element for
    element the same way."""
    q, k, v = inputs
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=problem.causal)
    errors = {}
    for name, call in calls.items():
        out = K.output(name.removeprefix(PREFIX), call())
        if out.shape != ref.shape:
            raise RuntimeError(f"{name} returned shape {tuple(out.shape)}, expected "
                               f"{tuple(ref.shape)} (B, H, L, D)")
        errors[name] = (out.float() - ref).abs().max().item()
    return errors


def measure(problem: Problem, names: list[str], rounds: int, calls: int,
            suffix: str = "", reference: Reference | None = None,
            host_cost: bool = True) -> list[dict[str, Any]]:
    """Time ``names`` on ``problem`` in interleaved rounds; one record per kernel.

    Returns records with per-round medians (µs), their summary, TFLOP/s of the median, the ratio
    to ``torch-flash`` (median of per-round ratios), the max error vs float32, ``host_us`` and
    ``eager_us`` (µs per call, the kernels interleaved:
    :func:`flashrepro_harness.bench.timing.host_and_eager_rounds`; left out when not ``host_cost``)
    and ``causal`` (the mask of ``problem``); names get ``suffix``. With a ``reference``
    (:mod:`flashrepro_harness.bench.reference`), every flashrepro row of ``names``
    (:data:`~flashrepro_harness.bench.impls.PAIRABLE`) also gets a twin record ``reference:<name>``,
    the reference checkout's code on the same inputs, timed in the same rounds (no host cost)
    and checked like the others; a row the reference cannot pair (its KernelConfig has other
    fields) gets a ``skipped`` twin, and the gate judges it against the baseline. Kernels that
    cannot run here (e.g. a torch backend unsupported on this GPU) get a record with ``skipped``
    set to the reason.
    """
    inputs = problem.inputs()
    skipped = {n: r for n in names if (r := K.available(n, inputs, problem.causal))}
    runnable = [n for n in names if n not in skipped]
    fns = {n: K.make_call(n, inputs, problem.causal) for n in runnable}
    for n in (n for n in runnable if n in K.PAIRABLE and reference is not None):
        try:
            fns[PREFIX + n] = K.make_call(n, inputs, problem.causal, reference=reference)
        except ValueError as exc:  # e.g. the reference's KernelConfig has other fields
            skipped[PREFIX + n] = f"no reference twin: {exc}"
    errors = check_outputs(problem, fns, inputs)
    per_round = interleaved_rounds(fns, rounds=rounds, calls_per_round=calls)
    host = host_and_eager_rounds({n: fns[n] for n in runnable}) if host_cost else {}
    peer = per_round.get("torch-flash")
    records = []
    twins = [PREFIX + n for n in runnable if PREFIX + n in fns or PREFIX + n in skipped]
    for name in [*names, *twins]:
        base = name.removeprefix(PREFIX)
        rec: dict[str, Any] = {"name": name + suffix, "description": K.DESCRIPTIONS[base],
                               "causal": problem.causal}
        if name != base:
            rec["description"] += f" (reference code, {reference.commit or reference.src})"
            rec["reference_of"] = base + suffix
        if name in skipped:
            records.append({**rec, "skipped": skipped[name]})
            continue
        summary = Summary.of(per_round[name])
        rec.update(summary.as_dict(keep_samples=False))
        rec["round_medians_us"] = per_round[name]
        rec["tflops"] = problem.flops() / (summary.median_us * 1e-6) / 1e12
        rec["max_abs_err"] = errors[name]
        if name in host:
            rec["host_us"], rec["eager_us"] = host[name]
        if peer is not None:
            ratios = [a / b for a, b in zip(per_round[name], peer, strict=True)]
            rec["ratio_vs_torch_flash"] = statistics.median(ratios)
            rec["ratio_rounds"] = ratios
        if base == "flashrepro" and name == base:
            rec["config"] = default_config(problem.head_dim, problem.causal, problem.seqlen_q,
                                           launch_arch()).as_dict()
        elif base in K.LAUNCHES:
            rec["config"] = K.LAUNCHES[base].as_dict()
        records.append(rec)
    return records


def timing_method(rounds: int, calls: int) -> dict[str, Any]:
    """The results' ``method`` block: timer, L2 handling, busy-wait, statistic, ``rounds`` and
    ``calls_per_round`` (the gate compares timer, l2, calls_per_round and busy_wait_cycles with
    its baseline's). Measures the busy-wait on the current GPU (:func:`busy_wait_us`).

    Raises:
        RuntimeError: when no CUDA device is available.
    """
    return {
        "timer": "cuda-events per call (flashrepro_harness.bench.timing.time_calls)",
        "l2": "flushed before every call (256 MiB buffer zeroed)",
        "launch": (f"GPU busy-wait ({busy_wait_us():.0f} µs) queued before each call "
                   "hides host launch overhead"),
        "busy_wait_cycles": SLEEP_CYCLES,
        "statistic": "median of per-round medians; ratio = median of per-round ratios",
        "rounds": rounds,
        "calls_per_round": calls,
    }


def _mma_sync_records(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The flashrepro rows and torch flash, re-timed in a child with ``DISABLE_MMA_V3=1``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "child.json"
        cmd = [sys.executable, "-m", "flashrepro_harness", "reproduce", "--child-json", str(path),
               "--rounds", str(args.rounds), "--calls", str(args.calls), "--no-sass"]
        if args.reference_src is not None:
            cmd += ["--reference-src", str(args.reference_src)]
        subprocess.run(cmd, check=True, env={**os.environ, "DISABLE_MMA_V3": "1"})
        return json.loads(path.read_text())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=env.positive_int, default=100,
                        help="interleaved rounds (default 100, as the gate experiment)")
    parser.add_argument("--calls", type=env.positive_int, default=10,
                        help="timed calls per kernel per round (default 10)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default $FLASHREPRO_RESULTS_DIR or "
                             "reproduce/results/<gpu-key>)")
    parser.add_argument("--no-mma-sync", action="store_true",
                        help="skip the DISABLE_MMA_V3=1 (mma.sync path) rows on sm_90")
    parser.add_argument("--no-sass", action="store_true", help="skip the SASS table")
    parser.add_argument("--gate", action="store_true",
                        help="judge the run: rows with a --reference-src twin by their ratio "
                             "to it, the others against reproduce/baselines/<gpu>/ (exit 0 "
                             "pass, 1 regression, 2 no baseline, 3 environment mismatch; "
                             "docs/gate.md)")
    parser.add_argument("--update-baseline", action="store_true",
                        help="make this run the baseline of its GPU (appends to its history)")
    parser.add_argument("--baseline-dir", type=Path, default=baseline_dir(),
                        help="folder of per-GPU baselines for --gate and --update-baseline "
                             "(default $FLASHREPRO_BASELINE_DIR or reproduce/baselines)")
    parser.add_argument("--reference-src", type=Path, default=None, metavar="DIR",
                        help="the src folder of another flashrepro checkout (a PR's base, a "
                             "push's parent): its flashrepro rows are timed beside this one's "
                             "in the same rounds, and --gate judges the pair (docs/gate.md)")
    parser.add_argument("--child-json", type=Path, default=None, help=argparse.SUPPRESS)


Judge = Callable[[dict, Path, bool], Any]
"""``judge(results, baseline_dir, update)``: the gate's verdict on a results dict (``update``: make
it the baseline instead), an object with ``as_dict()``, ``markdown`` and ``exit_code``
(:class:`flashrepro_harness.gate.Verdict`). Passed in by :mod:`flashrepro_harness.gate.reproduce`,
the ``reproduce`` subcommand, so this module does not import the gate that reads its results."""


def run(args: argparse.Namespace, judge: Judge | None = None) -> int:
    """The article run (module docstring); ``--gate``/``--update-baseline`` need ``judge``.

    Returns the process exit code. Raises ValueError when ``--gate`` or ``--update-baseline``
    is asked for without a ``judge``."""
    if (args.gate or args.update_baseline) and judge is None:
        raise ValueError("reproduce: --gate/--update-baseline need judge= (run it as "
                         "`python -m flashrepro_harness reproduce`, which passes the gate's)")
    problem, published = load_article()
    reference, reference_error = None, None
    if args.reference_src is not None:  # checked on every host: bad input is never ignored
        try:
            reference = load_reference(args.reference_src)
        except ValueError as exc:  # not a flashrepro checkout's src folder: the caller's error
            print(f"reproduce: --reference-src: {exc}", file=sys.stderr)
            return 2
        except ImportError as exc:
            # The run goes on unpaired (the gate then judges every record against the committed
            # baseline and says why): a base commit that does not import here, e.g. one needing
            # other dependencies, must not stop the check of the head.
            reference_error = str(exc)
            print(f"reproduce: --reference-src: {exc}; timing without a reference",
                  file=sys.stderr)
    if args.child_json is not None:  # the mma.sync child: flashrepro rows + torch flash only
        names = [*K.FLASHREPRO, K.P_IN_REGISTERS, "torch-flash"]
        records = measure(problem, names, args.rounds, args.calls, suffix=" (mma.sync)",
                          reference=reference)
        args.child_json.write_text(json.dumps(records))
        return 0
    if not torch.cuda.is_available() and (args.gate or args.update_baseline
                                          or env.require_gpu()):
        # Refused before the SASS compiles (minutes without a GPU), not after them.
        print("reproduce: timing needs a CUDA GPU (torch sees none), and --gate, "
              "--update-baseline and FLASHREPRO_REQUIRE_GPU=1 need the timings: failing "
              "(without them the run prints the SASS table and exits 0)", file=sys.stderr)
        return 1
    sass = None
    if not args.no_sass:
        from flashrepro_harness.analysis.sass import sass_report
        sass = sass_report()
    if not torch.cuda.is_available():
        print("reproduce: timing needs a CUDA GPU (torch sees none); "
              + ("SASS table only." if sass is not None else "nothing to time (--no-sass)."))
        if args.out is not None or os.environ.get("FLASHREPRO_RESULTS_DIR"):  # asked for files
            print(f"reproduce: nothing written to {results_dir(args.out, '')} (--out or "
                  "$FLASHREPRO_RESULTS_DIR): the results files need the timings", file=sys.stderr)
        if sass is not None:
            print(sass["text"])
        return 0
    environment = env.capture()
    clocks_before = env.nvml_clocks()
    records = measure(problem, KERNELS, args.rounds, args.calls, reference=reference)
    if problem.causal:
        records += measure(dataclasses.replace(problem, causal=False), KERNELS, args.rounds,
                           args.calls, suffix=NON_CAUSAL, reference=reference)
    if not args.no_mma_sync and launch_arch() in MMA_V3_ARCHS:  # Hopper: wgmma unless disabled
        records += _mma_sync_records(args)
    results = {
        "schema": SCHEMA,
        "kind": "reproduce",
        "env": environment,
        "clocks_before": clocks_before,
        "clocks_after": env.nvml_clocks(),
        "problem": problem.as_dict(),
        "published": published,
        "method": {**timing_method(args.rounds, args.calls),
                   "layouts": peers.layouts_note(KERNELS), "host_us": HOST_METHOD,
                   "eager_us": EAGER_METHOD},
        "records": records,
    }
    if reference is not None:
        results["reference"] = {**reference.describe(), "src": env.shown_path(reference.src)}
    elif reference_error is not None:
        results["reference"] = {"src": env.shown_path(args.reference_src),
                                "error": reference_error}
    if sass is not None:
        results["sass"] = {k: v for k, v in sass.items() if k not in ("text", "markdown")}
    out_dir = results_dir(args.out, environment["gpu"]["key"])
    out_dir.mkdir(parents=True, exist_ok=True)
    print(reproduce_table(results))
    if sass is not None:
        print(sass["text"])
    summary = reproduce_markdown(results, sass_text=sass["markdown"] if sass else None)
    (out_dir / "reproduce.md").write_text(summary)
    exit_code = 0
    if args.gate or args.update_baseline:
        verdict = judge(results, args.baseline_dir, args.update_baseline)
        results["gate"] = verdict.as_dict()
        summary += "\n" + verdict.markdown + "\n"
        print(verdict.markdown)
        exit_code = 0 if args.update_baseline else int(verdict.exit_code)
    write_results(out_dir, results, summary)
    print(f"wrote reproduce.json, reproduce.md and summary.md under {out_dir}")
    return exit_code


def write_results(out_dir: Path, results: dict, summary: str) -> None:
    """Write ``reproduce.json`` and ``summary.md`` under ``out_dir``; the summary also goes to
    the job summary (:func:`flashrepro_harness.report.write_summary`)."""
    (out_dir / "reproduce.json").write_text(json.dumps(results, indent=1) + "\n")
    write_summary(summary, out_dir / "summary.md")
