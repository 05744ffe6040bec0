"""Gate experiment on one GPU: timing spread, A/A false alarms, injected slowdowns.

Run from the repository root on the GPU machine (about 2 minutes on an H200):

    OUT=/path/to/out PYTHONPATH=src python scripts/gate_experiment.py

Steps, all at the article config (``reproduce/article.toml``):

1. Spread of the timing methods: ``--repeats`` repeats of the median per-call time of
   flashrepro and torch-flash by ``events`` (:func:`flashrepro_harness.bench.timing.time_calls`, L2
   flushed, 100 calls) and ``graph`` (:func:`~flashrepro_harness.bench.timing.time_graph`, hot L2);
   CV of the medians and of their ratio.
2. Calibrate the slowdown hook (:mod:`flashrepro_harness.gate.inject`) for 3 % and 5 %.
3. Baseline: ``--baseline-runs`` runs (``--rounds`` interleaved rounds of flashrepro with the
   hook at 0 and torch-flash, ``--calls`` calls each per round), each in a fresh process,
   pooled with :func:`flashrepro_harness.gate.update_baseline` into ``$OUT/baselines``.
4. Gate runs: ``--runs`` each of A/A (hook at 0), +3 % and +5 %, every run a fresh measurement
   judged by :func:`flashrepro_harness.gate.check` against that baseline at each of
   ``--thresholds``. They run in ``--workers`` fresh processes (in turn, never at once), so
   process-to-process variance is in the figures; scenarios are interleaved in time.

Writes ``$OUT/gate_experiment.json`` (everything, per run) and ``$OUT/gate_experiment.md``
(the tables of lab/2026-11-29-gate-false-alarms/); the baseline under ``$OUT/baselines`` carries the
hook, so the gate never compares it with reproduce runs (do not commit it).
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


def _problem() -> dict[str, Any]:
    """The article config (reproduce/article.toml)."""
    from flashrepro_harness.problem import load_article
    return load_article()[0].as_dict()

RECORD = "flashrepro"
SCENARIOS = (0.0, 0.03, 0.05)


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def spread(repeats: int) -> dict[str, Any]:
    """CV of the median per-call time over ``repeats`` repeats, per kernel and method."""
    from flashrepro_harness.bench.timing import time_calls, time_graph
    from flashrepro_harness.gate.measure import kernels
    fns = kernels(_problem(), (RECORD, "torch-flash"))
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


def _measure(slowdown: float, cycles: int, rounds: int, calls: int) -> dict[str, Any]:
    """One run with the hook on flashrepro; labelled, so the gate never mixes it with runs
    made without the hook (its fixed cost would hide a slowdown of that size)."""
    from flashrepro_harness.gate.inject import with_busy_wait
    from flashrepro_harness.gate.measure import kernels, measure
    problem = _problem()
    fns = kernels(problem, (RECORD, "torch-flash"))
    fns[RECORD] = with_busy_wait(fns[RECORD], cycles)
    results = measure(fns, problem, rounds=rounds, calls_per_round=calls)
    results["injection"] = {RECORD: {"fraction": slowdown, "cycles": cycles}}
    return results


def worker(spec_path: Path) -> None:
    """In a fresh process: one baseline run written to ``baseline_out``, or the gate runs
    listed in the spec file, one JSON line per run on stdout."""
    from flashrepro_harness.gate import check
    spec = json.loads(spec_path.read_text())
    if spec.get("baseline_out"):
        results = _measure(0.0, 0, spec["rounds"], spec["calls"])
        Path(spec["baseline_out"]).write_text(json.dumps(results))
        return
    for run in spec["runs"]:
        t0 = time.perf_counter()
        results = _measure(run["slowdown"], spec["cycles"][str(run["slowdown"])],
                           spec["rounds"], spec["calls"])
        verdicts = [check(results, Path(spec["baseline_dir"]), threshold=t)
                    for t in spec["thresholds"]]
        v = verdicts[0]
        primary = v.comparisons[0] if v.comparisons else None
        recs = {r["name"]: r for r in results["records"]}
        print(json.dumps({
            **run, "worker": spec["worker"], "status": v.status, "exit_code": int(v.exit_code),
            "flagged": {f"{t:g}": x.exit_code == 1
                        for t, x in zip(spec["thresholds"], verdicts, strict=True)},
            "comparison": primary.as_dict() if primary else None,
            "flashrepro_median_us": recs[RECORD]["median_us"],
            "torch_flash_median_us": recs["torch-flash"]["median_us"],
            "median_ratio": recs[RECORD]["ratio_vs_torch_flash"],
            "clocks_after": results["clocks_after"], "seconds": time.perf_counter() - t0}),
            flush=True)


def _schedule(runs: int, workers: int) -> list[list[dict[str, Any]]]:
    """Run indices split into ``workers`` contiguous blocks; each index runs every scenario
    (order rotated by the index), so scenarios alternate in time and every process has all."""
    bounds = [round(w * runs / workers) for w in range(workers + 1)]
    return [[{"slowdown": SCENARIOS[(i + j) % len(SCENARIOS)], "index": i}
             for i in range(bounds[w], bounds[w + 1]) for j in range(len(SCENARIOS))]
            for w in range(workers)]


def _processes(runs: list[dict[str, Any]], baseline_levels: list[float]) -> dict[str, Any]:
    """Process-to-process spread of the ratio, from the baseline runs and the A/A runs.

    ``levels``: median ratio of each process (each baseline run; each worker's A/A runs);
    ``sd``: their relative standard deviation; ``offsets``: median A/A change of each worker
    against the pooled baseline; ``ci_half_width``: median of change - CI low over A/A runs;
    ``min_quiet_threshold``: 3·sd·√(1 + 1/k) - ci_half_width for a baseline pooled from k
    processes, the smallest threshold at which A/A runs stay quiet at 3 sd
    (lab/2026-11-29-gate-false-alarms/. A rough figure: it rests on a handful of processes.
    """
    aa = [r for r in runs if r["slowdown"] == 0 and r["comparison"]]
    workers = sorted({r["worker"] for r in aa})
    levels = {**{f"baseline {i}": x for i, x in enumerate(baseline_levels)},
              **{f"worker {w}": statistics.median(r["median_ratio"] for r in aa
                                                  if r["worker"] == w) for w in workers}}
    offsets = {str(w): statistics.median(r["comparison"]["change"] for r in aa
                                         if r["worker"] == w) for w in workers}
    values = list(levels.values())
    sd = statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else None
    half = (statistics.median(r["comparison"]["change"] - r["comparison"]["ci_low"]
                              for r in aa) if aa else None)
    k = max(1, len(baseline_levels))
    return {"levels": levels, "sd": sd, "offsets": offsets, "ci_half_width": half,
            "baseline_runs": k,
            "min_quiet_threshold": (max(0.0, 3 * sd * (1 + 1 / k) ** 0.5 - half)
                                    if sd is not None and half is not None else None)}


def _summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario: runs, runs flagged at each threshold, and the spread of the change."""
    rows = []
    for s in SCENARIOS:
        sel = [r for r in runs if r["slowdown"] == s]
        changes = [r["comparison"]["change"] for r in sel if r["comparison"]]
        flagged = {t: sum(r["flagged"][t] for r in sel) for t in sel[0]["flagged"]}
        rows.append({"slowdown": s, "runs": len(sel), "flagged": flagged,
                     "median_change": statistics.median(changes) if changes else None,
                     "sd_change": statistics.stdev(changes) if len(changes) > 1 else None,
                     "ci_low_range": ([min(lows), max(lows)] if (lows := [
                         r["comparison"]["ci_low"] for r in sel if r["comparison"]]) else None)})
    return rows


def _markdown(result: dict[str, Any]) -> str:
    sp = result["spread"]
    spread_rows = [[m, name, f"{d['median_us']:.2f}", f"{d['cv_of_median']:.2%}"]
                   for m, per in sp.items() for name, d in per.items() if name != "ratio"]
    spread_rows += [[m, "ratio flashrepro / torch-flash", f"{per['ratio']['median']:.4f}",
                     f"{per['ratio']['cv']:.2%}"] for m, per in sp.items()]
    inj = [[f"{float(f):.0%}", d["cycles"], f"{d['base_us']:.2f}",
            f"{d['measured_fraction']:+.2%}"] for f, d in result["injection"].items()]
    thresholds = list(result["summary"][0]["flagged"])
    gate_rows = [[f"{r['slowdown']:.0%}",
                  *(f"{r['flagged'][t]}/{r['runs']}" for t in thresholds),
                  f"{r['median_change']:+.2%}" if r["median_change"] is not None else "-",
                  f"{r['sd_change']:.2%}" if r["sd_change"] is not None else "-",
                  (f"{r['ci_low_range'][0]:+.2%} to {r['ci_low_range'][1]:+.2%}"
                   if r["ci_low_range"] else "-")]
                 for r in result["summary"]]
    b = result["baseline_noise"]
    a = result["args"]
    pr = result["processes"]
    offsets = ", ".join(f"worker {w} {o:+.2%}" for w, o in pr["offsets"].items())
    return "\n".join([
        f"### Gate experiment on {result['gpu']} ({result['date']})", "",
        f"Article config; {a['rounds']} rounds x {a['calls']} calls per run; {a['runs']} runs "
        f"per scenario in {a['workers']} processes; {result['seconds']:.0f} s in all.", "",
        f"Timing spread over {a['repeats']} repeats (CV of the median):", "",
        tabulate(spread_rows, headers=["method", "kernel", "median (µs)", "CV of median"],
                 tablefmt="github", disable_numparse=True), "",
        f"First baseline run, per-round noise (CV of round medians): flashrepro "
        f"{b['flashrepro_cv']:.2%}, torch-flash {b['torch_flash_cv']:.2%}, per-round ratio "
        f"{b['ratio_cv']:.2%}.", "",
        "Injected slowdown (busy-wait after each flashrepro call, hook at 0 as reference):", "",
        tabulate(inj, headers=["requested", "cycles", "base (µs)", "measured"],
                 tablefmt="github", disable_numparse=True), "",
        "Gate runs against the baseline (change = of the median per-round ratio):", "",
        tabulate(gate_rows, headers=["injected", *(f"flagged at {float(t):.1%}"
                                                   for t in thresholds),
                                     "median change", "sd of change", "CI low, min to max"],
                 tablefmt="github", disable_numparse=True), "",
        (f"Processes: median A/A change of each worker against the baseline (pooled from "
         f"{pr['baseline_runs']} processes): {offsets}; relative sd of the median ratio over "
         f"{len(pr['levels'])} processes {pr['sd']:.2%}; typical A/A CI half-width "
         f"{pr['ci_half_width']:.2%}; smallest threshold expected to stay quiet "
         f"(3·sd·√(1 + 1/k) - half-width, rough): {pr['min_quiet_threshold']:.2%}."
         if pr["sd"] is not None else ""),
        ""])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--runs", type=int, default=20, help="gate runs per scenario")
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--calls", type=int, default=10, help="calls per kernel and round")
    p.add_argument("--repeats", type=int, default=15, help="repeats of the spread measurement")
    p.add_argument("--workers", type=int, default=4, help="processes for the gate runs")
    p.add_argument("--baseline-runs", type=int, default=3,
                   help="runs, each in its own process, pooled into the baseline")
    p.add_argument("--thresholds", type=float, nargs="+", default=None,
                   help="thresholds to judge every run at; the first is stored in the "
                        "baseline (default: the gate's default, then 0.015)")
    p.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker is not None:
        worker(a.worker)
        return
    if os.environ.get("FLASHREPRO_INJECT_SLOWDOWN"):
        p.error("unset FLASHREPRO_INJECT_SLOWDOWN: the experiment injects its own slowdowns")
    if (a.runs < 2 or a.repeats < 2 or a.rounds < 5 or a.baseline_runs < 1
            or not 1 <= a.workers <= a.runs):
        p.error("need --runs >= 2, --repeats >= 2, --rounds >= 5, --baseline-runs >= 1 and "
                "1 <= --workers <= --runs")
    import torch

    if not torch.cuda.is_available():
        print("gate_experiment: needs a CUDA GPU (torch sees none)", file=sys.stderr)
        sys.exit(1)
    out = Path(os.environ.get("OUT") or "gate_experiment_out")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    from flashrepro_harness.env import capture
    from flashrepro_harness.gate import Settings, update_baseline
    from flashrepro_harness.gate.inject import calibrate
    from flashrepro_harness.gate.measure import kernels
    thresholds = a.thresholds or [Settings().threshold, 0.015]

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", flush=True)

    log("1/4 spread of the timing methods")
    sp = spread(a.repeats)
    log("2/4 calibrating the slowdown hook")
    inj = calibrate(kernels(_problem(), (RECORD,))[RECORD], SCENARIOS[1:])
    cycles = {"0.0": 0, **{str(f): i.cycles for f, i in inj.items()}}
    log(f"    cycles {cycles}, measured {[f'{i.measured_fraction:+.2%}' for i in inj.values()]}")
    runs: list[dict[str, Any]] = []
    errors: list[str] = []
    baseline_dir = out / "baselines"
    with tempfile.TemporaryDirectory() as tmp:

        def spawn(name: str, spec: dict[str, Any]) -> list[str]:
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps(spec))
            proc = subprocess.run([sys.executable, __file__, "--worker", str(path)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode:
                errors.append(f"{name} exit {proc.returncode}:\n{proc.stderr[-4000:]}")
                log(errors[-1])
            return proc.stdout.splitlines()

        log(f"3/4 baseline: {a.baseline_runs} runs, each in its own process")
        bases = []
        for i in range(a.baseline_runs):
            path = Path(tmp) / f"base{i}-results.json"
            spawn(f"base{i}", {"baseline_out": str(path), "rounds": a.rounds, "calls": a.calls})
            if not path.is_file():
                sys.exit(f"baseline run {i} failed:\n{errors[-1]}")
            bases.append(json.loads(path.read_text()))
        update_baseline(bases, baseline_dir, threshold=thresholds[0])
        levels = [{r["name"]: r for r in b["records"]}[RECORD]["ratio_vs_torch_flash"]
                  for b in bases]
        log(f"4/4 {a.runs} x {len(SCENARIOS)} gate runs in {a.workers} processes")
        for w, share in enumerate(_schedule(a.runs, a.workers)):
            runs += [json.loads(line) for line in spawn(f"worker{w}", {
                "worker": w, "runs": share, "cycles": cycles, "rounds": a.rounds,
                "calls": a.calls, "thresholds": thresholds, "baseline_dir": str(baseline_dir)})
                if line.startswith("{")]
            flagged = {s: sum(r["flagged"][f"{thresholds[0]:g}"] for r in runs
                              if r["slowdown"] == s) for s in SCENARIOS}
            log(f"    worker {w} done: {len(runs)} runs, flagged so far {flagged}")
    recs = {r["name"]: r["round_medians_us"] for r in bases[0]["records"]}
    ratio = [x / y for x, y in zip(recs[RECORD], recs["torch-flash"], strict=True)]
    env = capture()
    result = {
        "date": env["date"], "gpu": (env["gpu"] or {}).get("name"), "env": env,
        "args": {k: v for k, v in vars(a).items() if k != "worker"}, "thresholds": thresholds,
        "spread": sp,
        "injection": {str(f): i.as_dict() for f, i in inj.items()},
        "baseline_noise": {"flashrepro_cv": _cv(recs[RECORD]),
                           "torch_flash_cv": _cv(recs["torch-flash"]), "ratio_cv": _cv(ratio)},
        "summary": _summary(runs) if runs else [], "processes": _processes(runs, levels),
        "runs": runs,
        "worker_errors": errors,
        "seconds": time.perf_counter() - t0,
    }
    (out / "gate_experiment.json").write_text(json.dumps(result, indent=1) + "\n")
    if not runs:
        sys.exit("no gate run finished; see worker_errors in gate_experiment.json")
    (out / "gate_experiment.md").write_text(_markdown(result))
    print(_markdown(result))
    if errors:
        sys.exit(f"{len(errors)} worker(s) failed; the tables hold the runs that finished")


if __name__ == "__main__":
    main()
