"""Gate experiment on one GPU (issue 4): timing spread, A/A false alarms, injected slowdowns.

Run from the repository root on the GPU machine (about 3 minutes on an H200):

    OUT=/path/to/out PYTHONPATH=src python reproduce/gpu/gate_experiment.py

Steps, all at the article config (B=2, H=16, L=1024, D=128, fp16, causal):

1. Spread of the timing methods: ``--repeats`` repeats of the median per-call time of
   flashrepro and torch-flash by ``events`` (:func:`flashrepro.bench.timing.time_calls`, L2
   flushed, 100 calls) and ``graph`` (:func:`~flashrepro.bench.timing.time_graph`, hot L2);
   CV of the medians and of their ratio.
2. Calibrate the slowdown hook (:mod:`flashrepro.gate.inject`) for 3 % and 5 %.
3. Baseline: one run (``--rounds`` interleaved rounds of flashrepro with the hook at 0 and
   torch-flash, ``--calls`` calls each per round), written with
   :func:`flashrepro.gate.update_baseline` to ``$OUT/baselines``.
4. Gate runs: ``--runs`` each of A/A (hook at 0), +3 % and +5 %, every run a fresh measurement
   judged by :func:`flashrepro.gate.check` against that baseline. They run in ``--workers``
   fresh processes (in turn, never at once), so process-to-process variance is in the
   figures; scenarios are interleaved in time.

Writes ``$OUT/gate_experiment.json`` (everything, per run) and ``$OUT/gate_experiment.md``
(the tables for ``reproduce/NOTES.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tabulate import tabulate

PROBLEM = {"batch": 2, "heads": 16, "seqlen_q": 1024, "seqlen_k": 1024, "head_dim": 128,
           "dtype": "float16", "causal": True}
RECORD = "flashrepro"
SCENARIOS = (0.0, 0.03, 0.05)


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def spread(repeats: int) -> dict[str, Any]:
    """CV of the median per-call time over ``repeats`` repeats, per kernel and method."""
    from flashrepro.bench.timing import time_calls, time_graph
    from flashrepro.gate.measure import kernels
    fns = kernels(PROBLEM, (RECORD, "torch-flash"))
    meds: dict[str, dict[str, list[float]]] = {"events": {}, "graph": {}}
    for _ in range(repeats):
        for name, fn in fns.items():
            meds["events"].setdefault(name, []).append(statistics.median(time_calls(fn, 100)))
            meds["graph"].setdefault(name, []).append(
                statistics.median(time_graph(fn, calls=20, replays=20)))
    out: dict[str, Any] = {}
    for method, per in meds.items():
        ratio = [a / b for a, b in zip(per[RECORD], per["torch-flash"], strict=True)]
        out[method] = {**{name: {"median_us": statistics.median(v), "cv_of_median": _cv(v),
                                 "medians_us": v} for name, v in per.items()},
                       "ratio": {"median": statistics.median(ratio), "cv": _cv(ratio)}}
    return out


def _measure(cycles: int, rounds: int, calls: int) -> dict[str, Any]:
    from flashrepro.gate.inject import with_busy_wait
    from flashrepro.gate.measure import kernels, measure
    fns = kernels(PROBLEM, (RECORD, "torch-flash"))
    fns[RECORD] = with_busy_wait(fns[RECORD], cycles)
    return measure(fns, PROBLEM, rounds=rounds, calls_per_round=calls)


def worker(spec_path: Path) -> None:
    """Run the gate runs listed in the spec file; one JSON line per run on stdout."""
    from flashrepro.gate import check
    spec = json.loads(spec_path.read_text())
    for run in spec["runs"]:
        t0 = time.perf_counter()
        results = _measure(spec["cycles"][str(run["slowdown"])], spec["rounds"], spec["calls"])
        v = check(results, Path(spec["baseline_dir"]), threshold=spec["threshold"])
        primary = v.comparisons[0] if v.comparisons else None
        recs = {r["name"]: r for r in results["records"]}
        print(json.dumps({
            **run, "worker": spec["worker"], "status": v.status, "exit_code": int(v.exit_code),
            "flagged": bool(primary and primary.slower),
            "comparison": primary.as_dict() if primary else None,
            "flashrepro_median_us": recs[RECORD]["median_us"],
            "torch_flash_median_us": recs["torch-flash"]["median_us"],
            "median_ratio": recs[RECORD]["ratio_vs_torch_flash"],
            "clocks_after": results["clocks_after"], "seconds": time.perf_counter() - t0}),
            flush=True)


def _schedule(runs: int, workers: int) -> list[list[dict[str, Any]]]:
    order = [{"slowdown": SCENARIOS[(i + j) % len(SCENARIOS)], "index": i}
             for i in range(runs) for j in range(len(SCENARIOS))]
    per = -(-len(order) // workers)
    return [order[w * per:(w + 1) * per] for w in range(workers)]


def _summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for s in SCENARIOS:
        sel = [r for r in runs if r["slowdown"] == s]
        changes = [r["comparison"]["change"] for r in sel if r["comparison"]]
        rows.append({"slowdown": s, "runs": len(sel), "flagged": sum(r["flagged"] for r in sel),
                     "median_change": statistics.median(changes) if changes else None,
                     "sd_change": statistics.stdev(changes) if len(changes) > 1 else None,
                     "max_ci_low": max((r["comparison"]["ci_low"] for r in sel
                                        if r["comparison"]), default=None)})
    return rows


def _markdown(result: dict[str, Any]) -> str:
    sp = result["spread"]
    spread_rows = [[m, name, f"{d['median_us']:.2f}", f"{d['cv_of_median']:.2%}"]
                   for m, per in sp.items() for name, d in per.items() if name != "ratio"]
    spread_rows += [[m, "ratio flashrepro / torch-flash", f"{per['ratio']['median']:.4f}",
                     f"{per['ratio']['cv']:.2%}"] for m, per in sp.items()]
    inj = [[f"{float(f):.0%}", d["cycles"], f"{d['base_us']:.2f}",
            f"{d['measured_fraction']:+.2%}"] for f, d in result["injection"].items()]
    gate_rows = [[f"{r['slowdown']:.0%}", f"{r['flagged']}/{r['runs']}",
                  f"{r['median_change']:+.2%}" if r["median_change"] is not None else "-",
                  f"{r['sd_change']:.2%}" if r["sd_change"] is not None else "-",
                  f"{r['max_ci_low']:+.2%}" if r["max_ci_low"] is not None else "-"]
                 for r in result["summary"]]
    b = result["baseline_noise"]
    a = result["args"]
    return "\n".join([
        f"### Gate experiment on {result['gpu']} ({result['date']})", "",
        f"Article config; {a['rounds']} rounds x {a['calls']} calls per run, threshold "
        f"{result['threshold']:.1%}; {a['runs']} runs per scenario in {a['workers']} "
        f"processes; {result['seconds']:.0f} s in all.", "",
        f"Timing spread over {a['repeats']} repeats (CV of the median):", "",
        tabulate(spread_rows, headers=["method", "kernel", "median (µs)", "CV of median"],
                 tablefmt="github", disable_numparse=True), "",
        f"Baseline run, per-round noise (CV of round medians): flashrepro "
        f"{b['flashrepro_cv']:.2%}, torch-flash {b['torch_flash_cv']:.2%}, per-round ratio "
        f"{b['ratio_cv']:.2%}.", "",
        "Injected slowdown (busy-wait after each flashrepro call, hook at 0 as reference):", "",
        tabulate(inj, headers=["requested", "cycles", "base (µs)", "measured"],
                 tablefmt="github", disable_numparse=True), "",
        "Gate runs against the baseline:", "",
        tabulate(gate_rows, headers=["injected", "flagged", "median change", "sd of change",
                                     "largest CI low"], tablefmt="github",
                 disable_numparse=True), ""])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="gate runs per scenario")
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--calls", type=int, default=10, help="calls per kernel and round")
    p.add_argument("--repeats", type=int, default=15, help="repeats of the spread measurement")
    p.add_argument("--workers", type=int, default=4, help="processes for the gate runs")
    p.add_argument("--threshold", type=float, default=None, help="default: the gate's")
    p.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker is not None:
        worker(a.worker)
        return
    out = Path(os.environ.get("OUT") or "gate_experiment_out")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    from flashrepro.env import capture
    from flashrepro.gate import Settings, update_baseline
    from flashrepro.gate.inject import calibrate
    from flashrepro.gate.measure import kernels
    threshold = a.threshold if a.threshold is not None else Settings().threshold

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", flush=True)

    log("1/4 spread of the timing methods")
    sp = spread(a.repeats)
    log("2/4 calibrating the slowdown hook")
    inj = calibrate(kernels(PROBLEM, (RECORD,))[RECORD], SCENARIOS[1:])
    cycles = {"0.0": 0, **{str(f): i.cycles for f, i in inj.items()}}
    log(f"    cycles {cycles}, measured {[f'{i.measured_fraction:+.2%}' for i in inj.values()]}")
    log("3/4 baseline run")
    base = _measure(0, a.rounds, a.calls)
    baseline_dir = out / "baselines"
    update_baseline(base, baseline_dir, threshold=threshold)
    recs = {r["name"]: r["round_medians_us"] for r in base["records"]}
    ratio = [x / y for x, y in zip(recs[RECORD], recs["torch-flash"], strict=True)]
    log(f"4/4 {a.runs} x {len(SCENARIOS)} gate runs in {a.workers} processes")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for w, share in enumerate(_schedule(a.runs, a.workers)):
            spec = Path(tmp) / f"spec{w}.json"
            spec.write_text(json.dumps({"worker": w, "runs": share, "cycles": cycles,
                                        "rounds": a.rounds, "calls": a.calls,
                                        "threshold": threshold,
                                        "baseline_dir": str(baseline_dir)}))
            proc = subprocess.run([sys.executable, __file__, "--worker", str(spec)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode:
                sys.exit(f"worker {w} failed:\n{proc.stderr[-4000:]}")
            runs += [json.loads(line) for line in proc.stdout.splitlines()
                     if line.startswith("{")]
            flagged = {s: sum(r["flagged"] for r in runs if r["slowdown"] == s)
                       for s in SCENARIOS}
            log(f"    worker {w} done: {len(runs)} runs, flagged so far {flagged}")
    env = capture()
    result = {
        "date": env["date"], "gpu": (env["gpu"] or {}).get("name"), "env": env,
        "args": {k: v for k, v in vars(a).items() if k != "worker"}, "threshold": threshold,
        "spread": sp,
        "injection": {str(f): i.as_dict() for f, i in inj.items()},
        "baseline_noise": {"flashrepro_cv": _cv(recs[RECORD]),
                           "torch_flash_cv": _cv(recs["torch-flash"]), "ratio_cv": _cv(ratio)},
        "summary": _summary(runs), "runs": runs, "seconds": time.perf_counter() - t0,
    }
    (out / "gate_experiment.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "gate_experiment.md").write_text(_markdown(result))
    print(_markdown(result))


if __name__ == "__main__":
    main()
