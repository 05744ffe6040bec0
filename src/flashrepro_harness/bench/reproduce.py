"""The article run, the measurement behind ``python -m flashrepro_harness reproduce``
(:mod:`flashrepro_harness.commands.reproduce`, which judges it with the gate and writes it).

On a CUDA GPU: checks every kernel's output against float32 attention (every element, the
tolerance of :data:`flashrepro_harness.results.OUTPUT_TOLERANCE` recorded per row); times
flashrepro, torch SDPA's flash, cuDNN and efficient backends and the optional peers at the
article config in interleaved rounds (:mod:`flashrepro_harness.bench.timing`), with host and
eager µs per call; then the same without the causal mask (records suffixed
`` (non-causal)``); on Hopper, the flashrepro rows again on the mma.sync path
(``DISABLE_MMA_V3=1``, in a child process: Triton reads it at compile time). Everywhere: the
SASS table; without a GPU the timing part is one line, never a traceback.

A flashrepro row that raises is ``failed`` (first call) or stops the run (:class:`~flashrepro_
harness.bench.impls.KernelFailed`, later); never skipped. An earlier run's results in the output
folder are deleted before timing and the new ones written atomically once complete, so a failed
run leaves nothing a later ``gate`` or ``readme`` would read as its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from flashrepro.configs import MMA_V3_ARCHS, launch_arch
from flashrepro.select import default_launch
from flashrepro_harness import env
from flashrepro_harness.bench import impls as K
from flashrepro_harness.bench import peers
from flashrepro_harness.bench.impls import KernelFailed, first_line
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
from flashrepro_harness.outputs import write_atomic
from flashrepro_harness.problem import Problem, load_article
from flashrepro_harness.report import reproduce_markdown, reproduce_table, write_summary
from flashrepro_harness.results import (
    COMPLETE,
    MMA_SYNC,
    NON_CAUSAL,
    OUTPUT_TOLERANCE,
    RESULTS_SCHEMA,
    output_tolerance,
    results_dir,
)

SCHEMA = RESULTS_SCHEMA
KERNELS = [*K.FLASHREPRO, *K.TORCH_BACKENDS, *peers.PEERS]
"""The rows of the main table (and of its non-causal twin)."""
OUTPUTS = ("reproduce.json", "reproduce.md", "summary.md")
"""The files a run writes in its results folder (and deletes there before it times)."""
WRONG_OUTPUT = "FLASHREPRO_TEST_WRONG_OUTPUT"
"""Test hook: ``FLASHREPRO_TEST_WRONG_OUTPUT=0.01`` adds 0.01 to one output element of every
call of the ``flashrepro`` row (not its twin, not the library), so the output check can be shown
to fail (docs/gate.md). Unset or empty: no hook. The run records ``test_hooks`` and can never be
a baseline."""


def wrong_output_shift(environ: Mapping[str, str] = os.environ) -> float | None:
    """The value of :data:`WRONG_OUTPUT`, or None when unset or empty.

    Raises:
        ValueError: not a number > 0 or ``nan`` (a hook that changes nothing is refused).
    """
    text = environ.get(WRONG_OUTPUT, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 or math.isnan(value)):
        raise ValueError(f"{WRONG_OUTPUT} must be a number > 0 (added to one output element of "
                         f"the flashrepro row) or nan, got {text!r}")
    return value


def _shifted(call: Callable[[], Any], amount: float) -> Callable[[], Any]:
    """``call`` with ``amount`` added to the last element of its output (:data:`WRONG_OUTPUT`)."""
    def shifted() -> Any:
        out = call()
        out[(-1,) * out.dim()] += amount
        return out
    return shifted


def _guarded(name: str, call: Callable[[], Any]) -> Callable[[], Any]:
    """``call``, whose exceptions name the row (:class:`KernelFailed`)."""
    def guarded() -> Any:
        try:
            return call()
        except Exception as exc:
            raise KernelFailed(name, f"in the timing rounds: {first_line(exc)}") from exc
    return guarded


def measure(problem: Problem, names: list[str], rounds: int, calls: int,
            suffix: str = "", reference: Reference | None = None,
            host_cost: bool = True, wrong_output: float | None = None) -> list[dict[str, Any]]:
    """Time ``names`` on ``problem`` in interleaved rounds; one record per kernel.

    Records hold per-round medians (µs) and their summary, TFLOP/s of the median, the median
    per-round ratio to ``torch-flash``, the max error against float32 and its tolerance,
    ``host_us`` and ``eager_us`` (unless not ``host_cost``) and ``causal``; names get
    ``suffix``. With a ``reference``, each :data:`~flashrepro_harness.bench.impls.PAIRABLE` row
    gets a twin ``reference:<name>`` (the reference's code, same inputs and rounds, no host
    cost). A peer or backend that cannot run gets ``skipped`` (the reason); a flashrepro row or
    twin whose first call raises, ``failed``. ``wrong_output``: :data:`WRONG_OUTPUT`'s value.

    Raises:
        KernelFailed: a row raised after its first call (the output check, the timing or the
            host-cost rounds): the rounds are incomplete.
    """
    inputs = problem.inputs()
    state = {n: p for n in names if (p := K.probe(n, inputs, problem.causal))}
    runnable = [n for n in names if n not in state]
    if reference is not None:
        for n in (n for n in runnable if n in K.PAIRABLE):
            if p := K.probe(n, inputs, problem.causal, reference=reference):
                state[PREFIX + n] = (p[0], f"reference twin: {p[1]}")
    fns = {n: K.make_call(n, inputs, problem.causal) for n in runnable}
    if wrong_output is not None and "flashrepro" in fns:
        fns["flashrepro"] = _shifted(fns["flashrepro"], wrong_output)
    if reference is not None:
        fns.update({PREFIX + n: K.make_call(n, inputs, problem.causal, reference=reference)
                    for n in runnable if n in K.PAIRABLE and PREFIX + n not in state})
    errors = K.output_errors(problem.causal, fns, inputs)
    per_round = interleaved_rounds({n: _guarded(n + suffix, f) for n, f in fns.items()},
                                   rounds=rounds, calls_per_round=calls)
    try:
        host = host_and_eager_rounds({n: fns[n] for n in runnable}) if host_cost else {}
    except Exception as exc:
        raise KernelFailed(f"one of {[n + suffix for n in runnable]}",
                           f"in the host-cost rounds: {first_line(exc)}") from exc
    peer = per_round.get("torch-flash")
    tolerance = output_tolerance(problem.dtype)
    records = []
    twins = [PREFIX + n for n in runnable if PREFIX + n in fns or PREFIX + n in state]
    for name in [*names, *twins]:
        base = name.removeprefix(PREFIX)
        rec: dict[str, Any] = {"name": name + suffix, "description": K.DESCRIPTIONS[base],
                               "causal": problem.causal}
        if name != base:
            rec["description"] += f" (reference code, {reference.commit or reference.src})"
            rec["reference_of"] = base + suffix
        if name in state:
            records.append({**rec, state[name][0]: state[name][1]})
            continue
        summary = Summary.of(per_round[name])
        rec.update(summary.as_dict(keep_samples=False))
        rec["round_medians_us"] = per_round[name]
        rec["tflops"] = problem.flops() / (summary.median_us * 1e-6) / 1e12
        rec["max_abs_err"] = errors[name]
        rec["tolerance"] = tolerance
        if name in host:
            rec["host_us"], rec["eager_us"] = host[name]
        if peer is not None:
            ratios = [a / b for a, b in zip(per_round[name], peer, strict=True)]
            rec["ratio_vs_torch_flash"] = statistics.median(ratios)
            rec["ratio_rounds"] = ratios
        if base == "flashrepro" and name == base:
            sms = torch.cuda.get_device_properties("cuda").multi_processor_count
            rec["config"] = default_launch(  # what select() runs
                problem.head_dim, problem.causal, problem.seqlen_q, launch_arch(),
                problem.batch * problem.heads, sms, problem.seqlen_k).as_dict()
        elif base in K.LAUNCHES:
            rec["config"] = K.LAUNCHES[base].as_dict()
        records.append(rec)
    return records


def timing_method(rounds: int, calls: int) -> dict[str, Any]:
    """The results' ``method`` block (the gate matches timer, l2, calls_per_round and
    busy_wait_cycles with its baseline's); measures the busy-wait on the current GPU.

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
        "output_check": ("max |o - ref| over every element, ref = float32 attention on the same "
                         "inputs, at most the row's 'tolerance' (results.OUTPUT_TOLERANCE: "
                         f"{OUTPUT_TOLERANCE})"),
    }


def _mma_sync_records(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The flashrepro rows and torch flash, re-timed in a child with ``DISABLE_MMA_V3=1``.

    Raises:
        KernelFailed: the child failed (its exit status and the reason on its stderr).
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "child.json"
        cmd = [sys.executable, "-m", "flashrepro_harness", "reproduce", "--child-json", str(path),
               "--rounds", str(args.rounds), "--calls", str(args.calls), "--no-sass"]
        if args.reference_src is not None:
            cmd += ["--reference-src", str(args.reference_src)]
        proc = subprocess.run(cmd, env={**os.environ, "DISABLE_MMA_V3": "1"}, check=False)
        if proc.returncode != 0:
            raise KernelFailed("the (mma.sync) rows", "the DISABLE_MMA_V3=1 child exited with "
                               f"status {proc.returncode} (its reason above)")
        return json.loads(path.read_text())


@dataclasses.dataclass
class Outcome:
    """A complete article run (``"complete": true``), not yet written to ``out_dir``."""

    results: dict[str, Any]
    out_dir: Path
    markdown: str


def remove_stale(out_dir: Path) -> None:
    """Delete :data:`OUTPUTS` of an earlier run in ``out_dir``, if any."""
    for name in OUTPUTS:
        (out_dir / name).unlink(missing_ok=True)


def run(args: argparse.Namespace, needs_timings: bool = False) -> Outcome | int:
    """The article run (module docstring) with the options of
    :func:`flashrepro_harness.commands.reproduce.add_arguments`.

    ``needs_timings``: the caller judges them (``--gate``, ``--update-baseline``), so no GPU
    fails at once, as with ``FLASHREPRO_REQUIRE_GPU=1``.

    Returns:
        The :class:`Outcome` to judge and write; or the exit code of a run with nothing to
        write: 0 without a GPU (SASS table printed) and for the mma.sync child, 1 without a GPU
        when the timings are needed, 2 for a bad ``--reference-src`` or :data:`WRONG_OUTPUT`.

    Raises:
        KernelFailed: a flashrepro row failed after its first call, or the mma.sync child
            failed; nothing is written, and earlier results in the output folder are gone.
    """
    problem, published = load_article()
    try:
        wrong_output = wrong_output_shift()
    except ValueError as exc:
        print(f"reproduce: {exc}", file=sys.stderr)
        return 2
    reference, reference_error = None, None
    if args.reference_src is not None:  # checked on every host: bad input is never ignored
        try:
            reference = load_reference(args.reference_src)
        except ValueError as exc:  # not a flashrepro checkout's src folder: the caller's error
            print(f"reproduce: --reference-src: {exc}", file=sys.stderr)
            return 2
        except ImportError as exc:
            # go on unpaired: a base that does not import here must not stop the head's check
            reference_error = str(exc) or type(exc).__name__
            print(f"reproduce: --reference-src: {exc}; timing without a reference",
                  file=sys.stderr)
    if args.child_json is not None:  # the mma.sync child: flashrepro rows + torch flash only
        names = [*K.FLASHREPRO, K.P_IN_REGISTERS, "torch-flash"]
        records = measure(problem, names, args.rounds, args.calls, suffix=MMA_SYNC,
                          reference=reference, wrong_output=wrong_output)
        write_atomic(args.child_json, json.dumps(records))
        return 0
    if not torch.cuda.is_available() and (needs_timings or env.require_gpu()):
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
    if wrong_output is not None:
        print(f"reproduce: test hook {WRONG_OUTPUT}={wrong_output:g}: the flashrepro row's "
              "output is made wrong on purpose; this run must fail its output check",
              file=sys.stderr)
    environment = env.capture()
    out_dir = results_dir(args.out, environment["gpu"]["key"])
    remove_stale(out_dir)
    clocks_before = env.nvml_clocks()
    records = measure(problem, KERNELS, args.rounds, args.calls, reference=reference,
                      wrong_output=wrong_output)
    if problem.causal:
        records += measure(dataclasses.replace(problem, causal=False), KERNELS, args.rounds,
                           args.calls, suffix=NON_CAUSAL, reference=reference,
                           wrong_output=wrong_output)
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
    if wrong_output is not None:
        results["test_hooks"] = {WRONG_OUTPUT: wrong_output}
    if reference is not None:
        results["reference"] = {**reference.describe(), "src": env.shown_path(reference.src)}
    elif reference_error is not None:
        results["reference"] = {"src": env.shown_path(args.reference_src),
                                "error": reference_error}
    if sass is not None:
        results["sass"] = {k: v for k, v in sass.items() if k not in ("text", "markdown")}
    results[COMPLETE] = True  # every row timed and checked
    print(reproduce_table(results))
    if sass is not None:
        print(sass["text"])
    markdown = reproduce_markdown(results, sass_text=sass["markdown"] if sass else None)
    return Outcome(results=results, out_dir=out_dir, markdown=markdown)


def write_results(out_dir: Path, results: dict, summary: str, markdown: str | None = None
                  ) -> None:
    """Write ``reproduce.md`` (when given), ``summary.md`` (also to the job summary) and, last,
    ``reproduce.json`` under ``out_dir``, each atomically.

    Raises:
        OSError: a file cannot be written.
    """
    if markdown is not None:
        write_atomic(out_dir / "reproduce.md", markdown)
    write_summary(summary, out_dir / "summary.md")
    write_atomic(out_dir / "reproduce.json", json.dumps(results, indent=1) + "\n")
