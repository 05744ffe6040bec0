"""Synthetic runs for the gate: results dicts with realistic timing noise, and the gate's
false-alarm and detection rates on them.

Noise model of one run (per-round medians, µs): kernel k in round r of run j is

    mean_k · machine_j · drift_j(r) · (1 + slowdown_k) · offset_kj · (1 + round_cv · e_kr)

* ``machine_j`` ~ 1 + N(0, machine_cv) (clocks, power) and ``drift_j(r)`` = 1 + drift ·
  sin(2π r / R + φ_j) (drift within the run) are shared by all kernels and cancel in the ratio.
* ``offset_kj`` ~ 1 + N(0, ratio_cv) for flashrepro records (1 for torch-flash): the run-to-run
  offset the ratio does not cancel, which the threshold must absorb.
* ``e_kr``: Student-t with ``tail_df`` degrees of freedom at unit variance (outlier rounds).

Means: the article config on an H200 (docs/article.md, "Measured here"). ``python -m
flashrepro_harness.gate.simulate`` prints the table of lab/2026-11-29-gate-false-alarms/.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import numpy as np
from tabulate import tabulate

from flashrepro_harness.gate.baseline import REFERENCE_RECORD, pool, round_samples
from flashrepro_harness.gate.stats import DEFAULT_THRESHOLD, compare
from flashrepro_harness.problem import load_article
from flashrepro_harness.results import COMPLETE, output_tolerance

MEANS_US = {"flashrepro": 47.0, "flashrepro-article-config": 47.0, "article-kernel": 47.0,
            REFERENCE_RECORD: 61.0}


@dataclass(frozen=True)
class Noise:
    """Noise model parameters (relative; see the module docstring)."""

    round_cv: float = 0.01
    tail_df: float = 5.0
    drift: float = 0.03
    machine_cv: float = 0.02
    ratio_cv: float = 0.0025


def synthetic_env(gpu_key: str = "nvidia-h200", **software: Any) -> dict[str, Any]:
    """An ``env`` block like :func:`flashrepro_harness.env.capture`'s on an H200; ``software``
    overrides top-level fields (``torch=...``) or, for ``driver``, ``sm_count`` and
    ``capability``, the GPU's."""
    env: dict[str, Any] = {
        "date": "2026-11-29T00:00:00+00:00", "git_commit": "0" * 40, "python": "3.12.3",
        "torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0", "cudnn": 91300,
        "image_digest": None,
        # a name whose flashrepro_harness.env.gpu_key is `gpu_key` ("NVIDIA H200" for the default)
        "gpu": {"name": gpu_key.replace("-", " ").upper(), "key": gpu_key, "capability": "9.0",
                "sm_count": 132,
                "memory_gib": 139.8, "driver": "580.159.03"},
    }
    for key, value in software.items():
        if key in ("driver", "sm_count", "capability"):
            env["gpu"][key] = value
        else:
            env[key] = value
    return env


SYNTHETIC_ERROR = 5e-4
"""``max_abs_err`` of every synthetic record: a correct float16 output (below the tolerance of
:data:`flashrepro_harness.results.OUTPUT_TOLERANCE`)."""


def results_from_rounds(rounds_us: dict[str, list[float]], env: dict[str, Any],
                        calls_per_round: int = 10) -> dict[str, Any]:
    """A complete results dict (the reproduce format) from per-round medians (µs) of each
    record, every output correct (:data:`SYNTHETIC_ERROR`)."""
    ref = np.asarray(rounds_us[REFERENCE_RECORD])
    problem = load_article()[0]
    records = []
    for name, values in rounds_us.items():
        v = np.asarray(values, dtype=np.float64)
        q25, med, q75 = np.percentile(v, [25, 50, 75])
        records.append({"name": name, "round_medians_us": v.tolist(), "median_us": float(med),
                        "q25_us": float(q25), "q75_us": float(q75),
                        "ratio_vs_torch_flash": float(np.median(v / ref)), "config": None,
                        "max_abs_err": SYNTHETIC_ERROR,
                        "tolerance": output_tolerance(problem.dtype)})
    return {"schema": "flashrepro.results/1", "kind": "reproduce", COMPLETE: True, "env": env,
            "problem": problem.as_dict(),
            "method": {"timer": "cuda-events", "l2": "flushed before each call",
                       "statistic": "median of per-round medians", "rounds": len(ref),
                       "calls_per_round": calls_per_round, "busy_wait_cycles": 2_000_000},
            "records": records}


def synthetic_rounds(rng: np.random.Generator, *, rounds: int, noise: Noise = Noise(),
                     slowdown: float = 0.0, records: tuple[str, ...] = ("flashrepro",)
                     ) -> dict[str, list[float]]:
    """Per-round medians (µs) of one synthetic run of ``records`` and torch-flash.

    ``slowdown`` (0.05 = 5 % slower) applies to every flashrepro record.
    """
    machine = 1.0 + rng.normal(0.0, noise.machine_cv)
    drift = 1.0 + noise.drift * np.sin(2 * np.pi * np.arange(rounds) / rounds
                                       + rng.uniform(0, 2 * np.pi))
    scale = np.sqrt(noise.tail_df / (noise.tail_df - 2.0))
    out = {}
    for name in (*records, REFERENCE_RECORD):
        e = rng.standard_t(noise.tail_df, rounds) / scale
        factor = 1.0
        if name != REFERENCE_RECORD:
            factor = (1.0 + slowdown) * (1.0 + rng.normal(0.0, noise.ratio_cv))
        out[name] = (MEANS_US[name] * machine * drift * factor
                     * (1.0 + noise.round_cv * e)).tolist()
    return out


def synthetic_results(rng: np.random.Generator, *, rounds: int = 100, noise: Noise = Noise(),
                      slowdown: float = 0.0, records: tuple[str, ...] = ("flashrepro",),
                      env: dict[str, Any] | None = None) -> dict[str, Any]:
    """A synthetic results dict: :func:`synthetic_rounds` in the reproduce format."""
    return results_from_rounds(synthetic_rounds(rng, rounds=rounds, noise=noise,
                                                slowdown=slowdown, records=records),
                               env if env is not None else synthetic_env())


def flag_counts(*, slowdowns: tuple[float, ...], round_cvs: tuple[float, ...], rounds: int,
                baselines: int, runs_per_baseline: int, threshold: float = DEFAULT_THRESHOLD,
                noise: Noise = Noise(), baseline_runs: int = 1, seed: int = 0
                ) -> list[dict[str, Any]]:
    """How often the gate flags the ``flashrepro`` record, per (round noise, true slowdown).

    Per noise level, ``baselines`` baselines (each pooled from ``baseline_runs`` runs) are each
    compared with ``runs_per_baseline`` fresh runs per slowdown. Each row: runs, runs flagged,
    and the worst baseline's count (most flagged at slowdown 0, fewest otherwise).
    """
    rng = np.random.default_rng(seed)
    out = []
    for cv in round_cvs:
        nz = Noise(cv, noise.tail_df, noise.drift, noise.machine_cv, noise.ratio_cv)
        counts = {s: [] for s in slowdowns}
        for _ in range(baselines):
            base = round_samples(pool([synthetic_results(rng, rounds=rounds, noise=nz)
                                       for _ in range(baseline_runs)]))
            for s in slowdowns:
                n = 0
                for _ in range(runs_per_baseline):
                    cur = round_samples(synthetic_results(rng, rounds=rounds, noise=nz,
                                                          slowdown=s))
                    n += compare(cur["flashrepro"]["ratio"], base["flashrepro"]["ratio"],
                                 record="flashrepro", metric="ratio",
                                 threshold=threshold).slower
                counts[s].append(n)
        for s in slowdowns:
            out.append({"round_cv": cv, "slowdown": s, "runs": baselines * runs_per_baseline,
                        "flagged": int(sum(counts[s])),
                        "worst_set": int(max(counts[s]) if s <= 0 else min(counts[s])),
                        "set_size": runs_per_baseline})
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Simulated false-alarm and detection rates",
                                allow_abbrev=False)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--baselines", type=int, default=25)
    p.add_argument("--runs", type=int, default=20, help="runs per baseline and slowdown")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    p.add_argument("--ratio-cv", type=float, default=Noise().ratio_cv,
                   help="run-to-run sd of the ratio (relative), not cancelled by it")
    p.add_argument("--baseline-runs", type=int, default=1,
                   help="runs pooled into each baseline")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    rows = flag_counts(slowdowns=(0.0, 0.03, 0.05), round_cvs=(0.005, 0.01, 0.02),
                       rounds=a.rounds, baselines=a.baselines, runs_per_baseline=a.runs,
                       threshold=a.threshold, noise=Noise(ratio_cv=a.ratio_cv),
                       baseline_runs=a.baseline_runs, seed=a.seed)
    print(tabulate([[f"{r['round_cv']:.1%}", f"{r['slowdown']:.0%}",
                     f"{r['flagged']}/{r['runs']} ({r['flagged'] / r['runs']:.1%})",
                     f"{r['worst_set']}/{r['set_size']}"] for r in rows],
                   headers=["per-round noise (each kernel)", "true slowdown", "runs flagged",
                            f"worst set of {a.runs} (one baseline)"],
                   tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    main()
