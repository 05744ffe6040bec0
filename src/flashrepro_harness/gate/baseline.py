"""Baselines: where they live, what they record, and how a run's environment is matched to one.

One JSON file per GPU model and problem, ``<baseline_dir>/<gpu-key>/<problem-key>.json`` (e.g.
``nvidia-h200/b2-h16-q1024-k1024-d128-float16-causal.json``): per-round samples, the environment
and timing method, the gate settings and an append-only ``history`` of every baseline run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flashrepro_harness.env import gpu_key
from flashrepro_harness.gate.inputs import BASELINE_SCHEMA, check_baseline, read_json
from flashrepro_harness.gate.refusals import BaselineError, ResultsError
from flashrepro_harness.gate.stats import MAX_ROUNDS
from flashrepro_harness.outputs import write_atomic
from flashrepro_harness.results import (
    COMPLETE,
    PRODUCT_RECORDS,
    REFERENCE_PREFIX,
    is_product,
    split_name,
)

__all__ = ["BaselineError", "ResultsError"]  # re-exported: the gate's refusals of its files

SCHEMA = BASELINE_SCHEMA
FLASHREPRO_RECORDS = PRODUCT_RECORDS
"""Records the gate judges (any other record named ``flashrepro...`` too)."""
REFERENCE_RECORD = "torch-flash"
"""The denominator of the primary metric: torch SDPA's flash backend, timed in the same rounds."""
SOFTWARE_FIELDS = ("driver", "cuda", "torch", "triton", "image_digest")
HARDWARE_FIELDS = ("gpu_key", "gpu_name", "sm_count", "capability")
METHOD_FIELDS = ("timer", "l2", "calls_per_round", "busy_wait_cycles")
HOOK_FIELD = "injection_hook"
"""A baseline's method field: whether its run had the slowdown test hook (even at 0)."""
PROBLEM_FIELDS = ("batch", "heads", "seqlen_q", "seqlen_k", "head_dim", "dtype", "causal")


@dataclass(frozen=True)
class EnvDifference:
    """One field that differs between the baseline's environment and the current run's."""

    field: str
    baseline: Any
    current: Any


def problem_key(problem: dict[str, Any]) -> str:
    """File-name key of a problem: ``b2-h16-q1024-k1024-d128-float16-causal``.

    Raises:
        ResultsError: a field of :data:`PROBLEM_FIELDS` is missing.
    """
    missing = [f for f in PROBLEM_FIELDS if f not in problem]
    if missing:
        raise ResultsError(f"results 'problem' lacks {missing}")
    p = problem
    return (f"b{p['batch']}-h{p['heads']}-q{p['seqlen_q']}-k{p['seqlen_k']}-d{p['head_dim']}-"
            f"{p['dtype']}-{'causal' if p['causal'] else 'full'}")


def fingerprint(env: dict[str, Any]) -> dict[str, Any]:
    """The parts of a results ``env`` block (:func:`flashrepro_harness.env.capture`) a baseline
    keys on.

    Raises:
        ResultsError: ``env.gpu`` is missing or null (the run had no GPU, so no timings).
    """
    gpu = env.get("gpu")
    if not gpu or not gpu.get("key"):
        raise ResultsError("results 'env.gpu' is null or has no 'key': the gate compares GPU "
                           "timings, and this run saw no GPU")
    # The key names a folder: it must be the one the GPU's name gives (no '/' or '..').
    if gpu["key"] != gpu_key(str(gpu.get("name", ""))):
        raise ResultsError(f"results 'env.gpu.key' {gpu['key']!r} is not the key of its GPU "
                           f"name {gpu.get('name')!r} ({gpu_key(str(gpu.get('name', '')))!r})")
    return {"gpu_key": gpu["key"], "gpu_name": gpu.get("name"), "sm_count": gpu.get("sm_count"),
            "capability": gpu.get("capability"), "driver": gpu.get("driver"),
            "cuda": env.get("cuda"), "torch": env.get("torch"), "triton": env.get("triton"),
            "image_digest": env.get("image_digest")}


def baseline_path(baseline_dir: Path, results: dict[str, Any]) -> Path:
    """``<baseline_dir>/<gpu-key>/<problem-key>.json`` for a results dict."""
    return Path(baseline_dir) / fingerprint(results["env"])["gpu_key"] / (
        problem_key(results["problem"]) + ".json")


def differences(baseline: dict[str, Any], results: dict[str, Any]) -> list[EnvDifference]:
    """What differs between a baseline and a run: hardware, software, problem, timing method.

    Software and hardware fields must be equal (known against unknown differs), except
    ``image_digest``, compared when both sides have one; method fields likewise (a field
    stated on one side only differs; ``rounds`` may differ). The slowdown test hook, even at 0,
    is a difference (fixed cost).
    """
    out: list[EnvDifference] = []
    base_env, cur_env = baseline["env"], fingerprint(results["env"])
    for f in (*HARDWARE_FIELDS, *SOFTWARE_FIELDS):
        b, c = base_env.get(f), cur_env.get(f)
        if f == "image_digest" and (b is None or c is None):
            continue
        if b != c:
            out.append(EnvDifference(f, b, c))
    for f in PROBLEM_FIELDS:
        b, c = baseline["problem"].get(f), results["problem"].get(f)
        if b != c:
            out.append(EnvDifference(f"problem.{f}", b, c))
    for f in METHOD_FIELDS:  # stated on one side only is a difference too
        b, c = baseline.get("method", {}).get(f), results.get("method", {}).get(f)
        if b != c:
            out.append(EnvDifference(f"method.{f}", b, c))
    b, c = baseline.get("method", {}).get(HOOK_FIELD, False), has_hook(results)
    if b != c:
        out.append(EnvDifference(f"method.{HOOK_FIELD}", b, c))
    return out


def has_hook(results: dict[str, Any]) -> bool:
    """Whether a run had the slowdown test hook (``"injection"`` in the results), even at 0."""
    return bool(results.get("injection"))


def timed(results: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per-round medians (µs) of every record that was timed (``skipped`` and ``failed``
    records left out) of a results dict that passed
    :func:`flashrepro_harness.gate.inputs.check_results`."""
    return {rec["name"]: np.asarray(rec["round_medians_us"], dtype=np.float64)
            for rec in results["records"] if "skipped" not in rec and "failed" not in rec}


def _judged(name: str) -> str | None:
    """The suffix of a flashrepro record name (``"flashrepro (mma.sync)"`` -> ``" (mma.sync)"``),
    None for any other record (torch's and the peers' rows, reference twins)."""
    return split_name(name)[1] if is_product(name) else None


def paired_run(results: dict[str, Any]) -> bool:
    """Whether a results dict was timed beside a reference checkout that loaded
    (``reproduce --reference-src``): its flashrepro rows are judged by their twins."""
    reference = results.get("reference") or {}
    return bool(reference) and "error" not in reference


def round_samples(results: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """Per-round samples of a results dict: ``{record: {"us": [...], "ratio": [...]}}``.

    A flashrepro record's ``ratio`` is ``record_r / torch-flash_r`` per interleaved round r, with
    the torch-flash record of the same suffix (``flashrepro (mma.sync)`` with ``torch-flash
    (mma.sync)``). References get ``us`` only; other records are left out, as are ``skipped`` and
    ``failed`` ones. A record with a reference twin (``reference:<name>``, from ``reproduce
    --reference-src``) also gets ``reference_us`` and ``paired`` (record / twin per round). In a
    run paired with a reference checkout (``results["reference"]`` without ``error``), every
    flashrepro row must have a timed twin.

    Raises:
        ResultsError: no ``torch-flash`` record, a flashrepro record without the torch-flash
            record of its suffix, a record whose round count differs from its reference's or
            its twin's, a paired row without a timed twin, a twin in a run whose reference
            did not load or is not recorded, or no flashrepro record at all.
    """
    rounds = timed(results)
    if REFERENCE_RECORD not in rounds:
        raise ResultsError(f"results have no {REFERENCE_RECORD!r} record, the reference of the "
                           "gate's primary metric")
    reference = results.get("reference") or {}
    paired = paired_run(results)
    reasons = {r["name"]: r.get("skipped") or r.get("failed") for r in results["records"]}
    out: dict[str, dict[str, list[float]]] = {}
    for name, us in rounds.items():
        suffix = _judged(name)
        if suffix is None:
            continue
        ref_name = REFERENCE_RECORD + suffix
        if ref_name not in rounds:
            raise ResultsError(f"flashrepro record {name!r} has no timed {ref_name!r} record "
                               "in its rounds, the reference of its ratio")
        ref = rounds[ref_name]
        if us.size != ref.size:
            raise ResultsError(f"record {name!r} has {us.size} rounds but {ref_name!r} "
                               f"has {ref.size}: per-round ratios need the same rounds")
        out.setdefault(ref_name, {"us": ref.tolist()})
        out[name] = {"us": us.tolist(), "ratio": (us / ref).tolist()}
        twin = rounds.get(REFERENCE_PREFIX + name)
        if twin is None and paired:
            why = reasons.get(REFERENCE_PREFIX + name) or "no such record"
            raise ResultsError(f"record {name!r} has no timed reference twin "
                               f"'{REFERENCE_PREFIX}{name}' ({why}): in a run paired with "
                               f"{reference.get('commit') or reference.get('src')}, every "
                               "flashrepro row is judged by its twin, never left to the baseline")
        if twin is not None:
            if not paired:
                state = (f"did not load ({reference['error']})" if reference.get("error")
                         else "is not recorded")
                raise ResultsError(f"record {name!r} has a reference twin, but the run's "
                                   f"reference checkout {state}: a twin without the "
                                   "reference it was timed with is not judged")
            if twin.size != us.size:
                raise ResultsError(f"record {name!r} has {us.size} rounds but its reference "
                                   f"twin has {twin.size}: paired ratios need the same rounds")
            out[name]["reference_us"] = twin.tolist()
            out[name]["paired"] = (us / twin).tolist()
    if not any("ratio" in s for s in out.values()):
        raise ResultsError(f"results have none of the records {list(FLASHREPRO_RECORDS)}")
    return out


def pool(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs of one environment as one results dict: each record's rounds concatenated.

    Pooling runs of separate processes averages out each process's offset of the ratio
    (lab/2026-11-29-gate-false-alarms/); per-round ratios stay paired. The env block is the last
    run's; ``method`` gets the total ``rounds`` and ``pooled_runs``.

    Raises:
        ResultsError: no runs; runs whose hardware, software, problem or timing method differ
            (named); or whose timed records differ.
    """
    if not runs:
        raise ResultsError("pool needs at least one results dict")
    first = runs[0]
    ref = {"env": fingerprint(first["env"]), "problem": first["problem"],
           "method": {**first.get("method", {}), HOOK_FIELD: has_hook(first)}}
    names = list(timed(first))
    rounds = []
    for i, run in enumerate(runs):
        diffs = differences(ref, run)
        if diffs:
            raise ResultsError(f"run {i} differs from run 0 in "
                               + ", ".join(f"{d.field} ({d.baseline} vs {d.current})"
                                           for d in diffs) + "; pool runs of one environment")
        rounds.append(timed(run))
        if list(rounds[-1]) != names:
            raise ResultsError(f"run {i} timed {list(rounds[-1])}, run 0 timed {names}")
    errors = {rec["name"]: [] for rec in first["records"] if rec["name"] in names}
    for run in runs:
        for rec in run["records"]:
            if rec["name"] in errors:
                errors[rec["name"]].append(rec["max_abs_err"])
    last = runs[-1]
    pooled = sum(r[names[0]].size for r in rounds)
    if pooled > MAX_ROUNDS:
        raise ResultsError(f"{len(runs)} runs pool to {pooled} rounds; a baseline holds at most "
                           f"{MAX_ROUNDS} (gate.stats.MAX_ROUNDS)")
    return {**last, "method": {**last.get("method", {}), "rounds": pooled,
                               "pooled_runs": len(runs)}, COMPLETE: True,
            "records": [{"name": n, "round_medians_us": np.concatenate([r[n] for r in rounds]
                                                                       ).tolist(),
                         "max_abs_err": _worst(errors[n])}
                        for n in names]}


def _worst(errors: list[float]) -> float:
    """The largest error, NaN if any is NaN (a failed check stays failed)."""
    return math.nan if any(math.isnan(e) for e in errors) else max(errors)


def load(path: Path) -> dict[str, Any] | None:
    """The baseline at ``path``, or None when there is no file there.

    Raises:
        BaselineError: something other than a file is there, or a file that breaks the rules
            of :func:`flashrepro_harness.gate.inputs.check_baseline` (schema, types, samples).
    """
    if not path.exists():
        return None
    return check_baseline(read_json(path, f"baseline {path}", BaselineError), path)


def history_entry(results: dict[str, Any], samples: dict[str, dict[str, list[float]]]
                  ) -> dict[str, Any]:
    """One history line: when, which commit, which software, and the medians of each record."""
    env = results["env"]
    fp = fingerprint(env)
    return {
        "date": env.get("date"),
        "git_commit": env.get("git_commit"),
        "runs": results.get("method", {}).get("pooled_runs", 1),
        "env": {f: fp[f] for f in SOFTWARE_FIELDS},
        "median_ratio": {n: float(np.median(s["ratio"])) for n, s in samples.items()
                         if "ratio" in s},
        "median_us": {n: float(np.median(s["us"])) for n, s in samples.items()},
    }


def build(results: dict[str, Any], previous: dict[str, Any] | None, settings: dict[str, Any]
          ) -> dict[str, Any]:
    """A new baseline from ``results``; ``previous``'s history is kept and one entry appended.

    Args:
        results: a results dict (docs/design.md, "File formats").
        previous: the baseline being replaced, or None.
        settings: the gate settings to store (threshold, confidence, ...).
    """
    samples = round_samples(results)
    history = list(previous["history"]) if previous else []
    history.append(history_entry(results, samples))
    return {
        "schema": SCHEMA,
        "gpu_key": fingerprint(results["env"])["gpu_key"],
        "problem_key": problem_key(results["problem"]),
        "problem": {f: results["problem"][f] for f in PROBLEM_FIELDS},
        "env": {**fingerprint(results["env"]), "date": results["env"].get("date"),
                "git_commit": results["env"].get("git_commit"),
                "python": results["env"].get("python")},
        "method": {**results.get("method", {}), HOOK_FIELD: has_hook(results)},
        "gate": settings,
        "records": {n: {"round_medians_us": s["us"], **({"round_ratios": s["ratio"]}
                                                        if "ratio" in s else {})}
                    for n, s in samples.items()},
        # shown beside later runs, never gated (gate.host)
        "host_cost": {rec["name"]: {f: rec[f] for f in ("host_us", "eager_us")}
                      for rec in results["records"]
                      if not rec.get("skipped") and "host_us" in rec and "eager_us" in rec},
        "history": history,
    }


def write(path: Path, baseline: dict[str, Any]) -> None:
    """Write ``baseline`` to ``path`` as indented JSON, atomically (parents created).

    Raises:
        BaselineError: the folder or the file cannot be made or written.
    """
    try:
        write_atomic(path, json.dumps(baseline, indent=1) + "\n")
    except OSError as exc:
        raise BaselineError(f"--baseline-dir: cannot write the baseline {path}: "
                            f"{exc.strerror or exc}") from exc
