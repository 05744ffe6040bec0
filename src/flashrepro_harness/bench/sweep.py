"""The L x D x causal x dtype sweep against torch's backends (``flashrepro bench``,
:mod:`flashrepro_harness.commands.bench`).

Every point has H = 16 and B·L = ``--tokens`` (16384 by default, B >= 1). Each times
flashrepro (per-arch default), torch flash, cuDNN and the optional peers in interleaved rounds,
and reports TFLOP/s of the medians and flashrepro's time over the best peer's (the fastest of
cuDNN and the peers that ran). Outputs under ``reproduce/results/<gpu-key>/``: ``bench.json``,
``bench.md`` and ``bench.png`` (TFLOP/s vs L per kernel, one panel per D x causal x dtype,
flashrepro / best peer on the right axis).
"""

from __future__ import annotations

import itertools
import json
import statistics
import textwrap
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashrepro_harness.bench import impls as K
from flashrepro_harness.bench import peers
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.outputs import replaced_on_success, write_atomic
from flashrepro_harness.problem import Problem
from flashrepro_harness.progress import progress
from flashrepro_harness.results import RESULTS_SCHEMA

KERNELS = ["flashrepro", "torch-flash", "torch-cudnn", *peers.PEERS]


def sweep_problems(lengths: list[int], head_dims: list[int], dtypes: list[str],
                   tokens: int) -> list[Problem]:
    """Every (L, D, causal, dtype) point with H = 16 and B = tokens / L."""
    return [Problem(batch=max(1, tokens // length), heads=16, seqlen_q=length, seqlen_k=length,
                    head_dim=d, dtype=dtype, causal=causal)
            for dtype, d, causal, length in itertools.product(dtypes, head_dims, (False, True),
                                                              lengths)]


def measure_point(problem: Problem, rounds: int, calls: int) -> dict[str, Any]:
    """TFLOP/s of each kernel at one point (median over rounds of per-round medians)."""
    inputs = problem.inputs()
    skipped = {n: r for n in KERNELS if (r := K.available(n, inputs, problem.causal))}
    fns = {n: K.make_call(n, inputs, problem.causal) for n in KERNELS if n not in skipped}
    per_round = interleaved_rounds(fns, rounds=rounds, calls_per_round=calls)
    point: dict[str, Any] = {"problem": problem.as_dict(), "skipped": skipped, "kernels": {}}
    for name, samples in per_round.items():
        us = statistics.median(samples)
        point["kernels"][name] = {"median_us": us, "round_medians_us": samples,
                                  "tflops": problem.flops() / (us * 1e-6) / 1e12}
    point["best_peer"] = best_peer(point["kernels"])
    return point


def sweep(environment: dict[str, Any], lengths: list[int], head_dims: list[int],
          dtypes: list[str], tokens: int, rounds: int, calls: int) -> dict[str, Any]:
    """Time every point of :func:`sweep_problems` (:func:`measure_point`, progress on stderr);
    returns the results dict of ``bench.json`` with ``environment`` (:func:`flashrepro_harness.
    env.capture`) and the method."""
    points = [measure_point(p, rounds, calls)
              for p in progress(sweep_problems(lengths, head_dims, dtypes, tokens),
                                "bench points", unit="point")]
    return {"schema": RESULTS_SCHEMA, "kind": "bench", "env": environment,
            "method": {"timer": "cuda-events per call, L2 flushed", "rounds": rounds,
                       "layouts": peers.layouts_note(KERNELS),
                       "best_peer": "per round, flashrepro's median µs over the smallest "
                                    "median µs of " + ", ".join(K.BEST_PEER_CANDIDATES)
                                    + " (those that ran); median over rounds [range]",
                       "calls_per_round": calls,
                       "statistic": "median of per-round medians",
                       "flops": "4·B·H·L²·D, halved when causal", "tokens": tokens},
            "points": points}


def write_results(out_dir: Path, results: dict[str, Any]) -> None:
    """``bench.json``, ``bench.md`` (:func:`table`) and ``bench.png`` (:func:`plot`, needs
    matplotlib: the ``plot`` extra) of a :func:`sweep` results dict under ``out_dir``
    (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "bench.json", json.dumps(results, indent=1) + "\n")
    text = caption(results["env"], results["method"]["tokens"])
    write_atomic(out_dir / "bench.md",
                 f"# Sweep\n\n{text}\n\n{summary(results['points'])}\n\n"
                 f"{table(results['points'], 'github')}\n")
    plot(results["points"], out_dir / "bench.png", text)


def best_peer(kernels: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest of :data:`flashrepro_harness.bench.impls.BEST_PEER_CANDIDATES` that ran (by
    median), and flashrepro's time over the best candidate's (> 1 means flashrepro is behind),
    computed round by round: in each round flashrepro's median over the fastest candidate's
    median of that round (issue 32's method; the minimum of several candidates' noisy times
    leans low, so the ratio leans against flashrepro). ``ratio`` is the median of those,
    ``low``/``high`` their range, over the candidates with flashrepro's number of rounds; a
    point without them has the ratio of the medians and no range. None when flashrepro or
    every candidate is missing.

    Args:
        kernels: a point's ``kernels``: name -> {"median_us": µs, "round_medians_us": [...]}.
    """
    ran = [n for n in K.BEST_PEER_CANDIDATES if n in kernels]
    if "flashrepro" not in kernels or not ran:
        return None
    name = min(ran, key=lambda n: kernels[n]["median_us"])
    mine = kernels["flashrepro"].get("round_medians_us") or []
    theirs = [r for n in ran if len(r := kernels[n].get("round_medians_us") or []) == len(mine)]
    if not mine or not theirs:
        return {"name": name,
                "ratio": kernels["flashrepro"]["median_us"] / kernels[name]["median_us"]}
    per_round = [t / min(peer) for t, *peer in zip(mine, *theirs, strict=True)]
    return {"name": name, "ratio": statistics.median(per_round), "low": min(per_round),
            "high": max(per_round)}


def _ratio_cell(best: dict[str, Any] | None) -> str:
    if best is None:
        return "n/a"
    if "low" not in best:
        return f"{best['ratio']:.3f}"
    return f"{best['ratio']:.3f} [{best['low']:.3f}-{best['high']:.3f}]"


def table(points: list[dict[str, Any]], fmt: str) -> str:
    """One row per point: TFLOP/s per kernel, flashrepro's ratio to cuDNN's TFLOP/s, and
    flashrepro's time over the best peer's (:func:`best_peer`: median over rounds [range]) with
    that peer's name."""
    rows = []
    for pt in points:
        p, ks = pt["problem"], pt["kernels"]
        tf = {n: ks[n]["tflops"] if n in ks else None for n in KERNELS}
        gap = (f"{tf['flashrepro'] / tf['torch-cudnn']:.2f}"
               if tf["flashrepro"] and tf["torch-cudnn"] else "n/a")
        best = best_peer(ks)
        rows.append([p["dtype"], p["head_dim"], "yes" if p["causal"] else "no", p["seqlen_q"],
                     p["batch"], *(f"{v:.0f}" if v else "n/a" for v in tf.values()), gap,
                     _ratio_cell(best), best["name"] if best else ""])
    headers = ["dtype", "D", "causal", "L", "B", *(f"{n} TFLOP/s" for n in KERNELS),
               "flashrepro / cuDNN (TFLOP/s)", "flashrepro / best peer (time)", "best peer"]
    return tabulate(rows, headers, tablefmt=fmt)


def summary(points: list[dict[str, Any]]) -> str:
    """Per dtype: the geometric mean of flashrepro / best peer, how many points are behind
    (ratio above 1.00) and how many of those in every round (the whole range above 1.00; a
    point without per-round times is not counted there), and flashrepro's peak TFLOP/s with
    its point."""
    lines = []
    for dtype in sorted({p["problem"]["dtype"] for p in points}):
        sel = [p for p in points if p["problem"]["dtype"] == dtype]
        bests = [b for p in sel if (b := best_peer(p["kernels"]))]
        if not bests:
            continue
        geo = statistics.geometric_mean([b["ratio"] for b in bests])
        behind = sum(b["ratio"] > 1.0 for b in bests)
        surely = sum(b["low"] > 1.0 for b in bests if "low" in b)
        peak = max((p for p in sel if "flashrepro" in p["kernels"]),
                   key=lambda p: p["kernels"]["flashrepro"]["tflops"])
        pp = peak["problem"]
        lines.append(
            f"- {dtype}: flashrepro / best peer, geometric mean {geo:.3f} over {len(bests)} "
            f"points; behind (median > 1.00) at {behind}, every round behind at {surely}. "
            f"Peak {peak['kernels']['flashrepro']['tflops']:.0f} TFLOP/s (D={pp['head_dim']}, "
            f"{'causal' if pp['causal'] else 'full'}, L={pp['seqlen_q']}).")
    return "\n".join(lines)


def plot(points: list[dict[str, Any]], path: Path, title: str) -> None:
    """TFLOP/s vs L, one line per kernel, one panel per (dtype, D, causal)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(p["problem"]["dtype"], p["problem"]["head_dim"], p["problem"]["causal"])
                     for p in points})
    cols = 4
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, (dtype, d, causal) in zip(axes.flat, panels, strict=False):
        sel = [p for p in points if (p["problem"]["dtype"], p["problem"]["head_dim"],
                                     p["problem"]["causal"]) == (dtype, d, causal)]
        for name in KERNELS:
            xs = [p["problem"]["seqlen_q"] for p in sel if name in p["kernels"]]
            ys = [p["kernels"][name]["tflops"] for p in sel if name in p["kernels"]]
            ax.plot(xs, ys, marker="o", label=name)
        ratios = [(p["problem"]["seqlen_q"], p["best_peer"]["ratio"]) for p in sel
                  if p.get("best_peer")]
        if ratios:
            twin = ax.twinx()
            twin.plot(*zip(*ratios, strict=True), color="black", linestyle="--", marker="x",
                      label="flashrepro / best peer (time, right axis)")
            twin.axhline(1.0, color="grey", linewidth=0.8)
            twin.set_ylabel("flashrepro / best peer (time, lower is better)", fontsize=8)
            if ax is axes.flat[0]:
                twin.legend(fontsize=7, loc="lower right")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{dtype} D={d} {'causal' if causal else 'non-causal'}", fontsize=9)
        ax.set_xlabel("L (tokens per sequence)")
        ax.set_ylabel("TFLOP/s (higher is better)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(textwrap.fill(title, 200), fontsize=10)
    fig.tight_layout()
    with replaced_on_success(path) as tmp:
        fig.savefig(tmp, dpi=110)


def caption(environment: dict[str, Any], tokens: int) -> str:
    """The table's and the plot's caption: GPU, versions, date, the grid's shape
    (``tokens``: B·L per point, as :func:`sweep_problems`) and the timing method."""
    gpu = environment["gpu"]
    return (f"{gpu['name']}, driver {gpu.get('driver', '?')}, torch {environment['torch']}, "
            f"triton {environment['triton']}, {environment['date']}; H=16, B·L={tokens} "
            "(B at least 1); CUDA events, L2 flushed, median of per-round medians; "
            f"{peers.layouts_note(KERNELS)}; best peer: the fastest of "
            f"{', '.join(K.BEST_PEER_CANDIDATES)} that ran.")
