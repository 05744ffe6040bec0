"""The gate experiment's measurement: kernels of one problem in interleaved rounds, as a results
dict in the reproduce format (docs/design.md, "File formats"). It takes callables, so
flashrepro's can be wrapped in the slowdown test hook (:mod:`flashrepro_harness.gate.inject`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from flashrepro_harness.bench.impls import make_call, output_errors
from flashrepro_harness.bench.timing import SLEEP_CYCLES, interleaved_rounds
from flashrepro_harness.env import capture, nvml_clocks
from flashrepro_harness.gate.baseline import FLASHREPRO_RECORDS, REFERENCE_RECORD
from flashrepro_harness.gate.inject import apply_from_env
from flashrepro_harness.problem import Problem
from flashrepro_harness.results import COMPLETE, output_tolerance

METHOD = {"timer": "cuda-events", "l2": "flushed before each call (256 MiB zeroed)",
          "statistic": "median of per-round medians", "busy_wait_cycles": SLEEP_CYCLES}


def kernels(problem: dict[str, Any], names: tuple[str, ...], seed: int = 0
            ) -> dict[str, Callable[[], object]]:
    """Zero-argument callables running each named kernel on fresh random inputs.

    Args:
        problem: the fields of :class:`flashrepro_harness.problem.Problem`.
        names: names of :data:`flashrepro_harness.bench.impls.DESCRIPTIONS` (``flashrepro``,
            ``torch-flash``, ...).
        seed: seed of the inputs (:meth:`~flashrepro_harness.problem.Problem.inputs`).

    Raises:
        KeyError: an unknown name; TypeError: a problem field missing or unknown.
    """
    p = Problem(**problem)
    inputs = p.inputs(seed=seed)
    return {name: make_call(name, inputs, p.causal) for name in names}


def measure(fns: dict[str, Callable[[], object]], problem: dict[str, Any], *, rounds: int,
            calls_per_round: int, env: dict[str, Any] | None = None,
            seed: int = 0) -> dict[str, Any]:
    """Check the outputs of ``fns``, time them in interleaved rounds; return a complete results
    dict.

    Args:
        fns: record name -> zero-argument callable (:func:`kernels`).
        problem: the problem dict stored in the results.
        rounds, calls_per_round: interleaved rounds (>= 1); a round's value is the median of
            its calls.
        env: environment block; default :func:`flashrepro_harness.env.capture` now.
        seed: the seed :func:`kernels` made the inputs with; outputs are checked against
            float32 attention on those inputs (callables on other inputs read as wrong).

    With ``FLASHREPRO_INJECT_SLOWDOWN`` set, flashrepro records are slowed by the test hook and
    the results carry ``"injection"``.

    Returns:
        A complete results dict in the reproduce format, with ``clocks_before`` and
        ``clocks_after``.

    Raises:
        flashrepro_harness.bench.impls.KernelFailed: a callable raised in the output check.
    """
    p = Problem(**problem)
    errors = output_errors(p.causal, fns, p.inputs(seed=seed))
    fns, injections = apply_from_env(fns, FLASHREPRO_RECORDS)
    clocks_before = nvml_clocks()
    rounds_us = interleaved_rounds(fns, rounds, calls_per_round)
    clocks_after = nvml_clocks()
    flops = p.flops()
    ref = rounds_us.get(REFERENCE_RECORD)
    records = []

    def ratio(values: list[float]) -> float | None:
        if ref is None:
            return None
        return statistics.median(a / b for a, b in zip(values, ref, strict=True))

    for name, values in rounds_us.items():
        q25, _, q75 = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        med = statistics.median(values)
        records.append({
            "name": name, "round_medians_us": values, "median_us": med, "q25_us": q25,
            "q75_us": q75, "tflops": flops / med / 1e6,
            "ratio_vs_torch_flash": ratio(values), "config": None,
            "max_abs_err": errors[name], "tolerance": output_tolerance(p.dtype)})
    return {"schema": "flashrepro.results/1", "kind": "reproduce", COMPLETE: True,
            "env": env if env is not None else capture(),
            "clocks_before": clocks_before, "clocks_after": clocks_after,
            "problem": dict(problem),
            "method": {**METHOD, "rounds": rounds, "calls_per_round": calls_per_round},
            "records": records,
            **({"injection": {n: i.as_dict() for n, i in injections.items()}}
               if injections else {})}
