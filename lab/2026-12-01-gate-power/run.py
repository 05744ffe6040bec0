"""Gate power with real slowdowns: does the gate catch kernels slower by ~2, 3 and 5 % in their
code, and stay quiet on the unmodified kernel, each run in a fresh process, paired with the
unmodified code as its reference (``reproduce --reference-src``), and what would the committed
baseline alone have said? (issue 24; README.md beside this file.)

On the H200, from the repository root (about 8 minutes; stops starting runs at --deadline-s):

    OUT=/path/to/out python3 lab/2026-12-01-gate-power/run.py

Variants are source transformations of ``src/flashrepro/kernels/fwd_gluon_ws.py`` (the ws
kernel, which ``flashrepro`` runs at the article's causal problem on sm_90), each applied to
its own temporary copy of ``src/`` and run with ``PYTHONPATH`` pointing there; the product
code is not touched:

- ``unmodified``: the copy as it is (the A/A runs);
- ``lag0``: conditional rescaling off (``MAX_LAG`` 8 -> 0: O is rescaled whenever a row's max
  moves), about 2 % (lab/2026-11-29-conditional-rescaling/);
- ``fmaN``: a chain of N dependent FMAs per key block on the path from the block's running
  max into alpha, so the next block's O rescale and P·V wait for it; the chain is finite, and
  ``alpha + chain * 0.0`` equals alpha bit for bit. N is calibrated for 3 % and 5 %.

Steps:

1. Calibration scan, one process: the ``flashrepro`` call (its default launch through
   ``flashrepro.attention``) with the unmodified kernel, with ``lag0`` and with ``fmaN`` for
   each N of ``--scan``, side by side in interleaved rounds (``bench.timing``, the gate's
   timer), the kernel module swapped around each call. N for 3 % and 5 % interpolated.
2. Calibration of the chosen variants, one process, the same way: the slowdowns reported.
3. Detection: ``--runs`` runs of each of A/A, lag0, fma(3 %), fma(5 %), levels rotating, each
   run a fresh process doing the gate's measurement at the gate's settings
   (``bench.reproduce.measure`` of ``--records`` on the article problem, ``--rounds`` x
   ``--calls``, with the twins of a second unmodified copy of ``src/`` as the reference, the
   results' method block from ``bench.reproduce.timing_method``; host cost not measured) and
   ``flashrepro.gate.check``, which judges the pair and also compares with the committed
   baseline (``reproduce/baselines/nvidia-h200/...``) at its stored settings. The next run's process
   is started (imports only, no CUDA) while the current one measures, so imports stay out of
   the wall time; ``--no-prestart`` turns that off.

Writes ``$OUT/gate_power.json`` (calibration, every run: verdict, change, interval, p, ratios
per round, wall time) and ``$OUT/gate_power.md``; prints the short table last. Each child has
a timeout and a failed child is recorded and skipped.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
WS_FILE = Path("flashrepro/kernels/fwd_gluon_ws.py")
WS_MODULE = "flashrepro.kernels.fwd_gluon_ws"
LAG = ("MAX_LAG = gl.constexpr(8.0)", "MAX_LAG = gl.constexpr(0.0)")
FMA_ANCHOR = "            acc = _rescale_moved_rows(acc, alpha, m_old, m_i)\n"
TARGETS = {"aa": 0.0, "fma3": 0.03, "fma5": 0.05}
SCAN = (8, 24, 64, 160)
LEVEL_KEYS = {"A/A": "aa", "~2 % (lag0)": "lag0", "3 %": "fma3", "5 %": "fma5"}
GOALS = {"A/A": ("unmodified", "0/20 flagged"), "~2 % (lag0)": ("lag0", "-"),
         "3 %": ("fma3", ">= 15/20"), "5 %": ("fma5", ">= 19/20")}


def fma_chain(n: int) -> tuple[str, str]:
    """The edit adding ``n`` dependent FMAs per key block before the O rescale (steady state
    of ``_consumer``): seeded by the block's running max (clamped finite), fed into alpha."""
    if n < 1:
        raise ValueError(f"n (FMAs per key block) must be >= 1, got {n}")
    chain = (f"            # gate-power experiment: {n} dependent FMAs per key block\n"
             "            chain = gl.maximum(m_i, -1.0e30)\n"
             f"            for fma_i in gl.static_range({n}):\n"
             "                chain = chain * 0.5 + 1.0\n"
             "            alpha = alpha + chain * 0.0\n")
    return FMA_ANCHOR, chain + FMA_ANCHOR


def edits(variant: str) -> list[tuple[str, str]]:
    """The (old, new) text edits of ``fwd_gluon_ws.py`` for ``variant``: ``unmodified`` (or
    ``reference``, the paired reference's copy), ``lag0`` or ``fma<N>``."""
    if variant in ("unmodified", "reference"):  # the reference: a second unmodified copy
        return []
    if variant == "lag0":
        return [LAG]
    if variant.startswith("fma") and variant[3:].isdigit():
        return [fma_chain(int(variant[3:]))]
    raise ValueError(f"variant must be unmodified, lag0 or fma<N>, got {variant!r}")


def patched_source(source: str, variant: str) -> str:
    """``source`` (of ``fwd_gluon_ws.py``) with ``variant``'s edits; each ``old`` must occur
    exactly once, and the result must parse."""
    for old, new in edits(variant):
        if source.count(old) != 1:
            raise ValueError(f"{variant}: the edit's anchor occurs {source.count(old)} times "
                             f"in {WS_FILE} (must be once): {old!r}")
        source = source.replace(old, new)
    ast.parse(source)
    return source


def make_tree(root: Path, variant: str, src: Path = REPO / "src") -> Path:
    """A copy of ``src`` under ``root/variant/src`` with the variant's kernel, and
    ``root/variant/reproduce`` linking the repository's (``env.REPO_ROOT`` of the copy is
    ``root/variant``: article.toml is read there). Returns ``root/variant``."""
    tree = root / variant
    if tree.exists():
        return tree
    shutil.copytree(src, tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (tree / "reproduce").symlink_to(REPO / "reproduce")
    path = tree / "src" / WS_FILE
    path.write_text(patched_source(path.read_text(), variant))
    return tree


def child_env(tree: Path) -> dict[str, str]:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                            text=True, check=False).stdout.strip()
    return {**os.environ, "PYTHONPATH": str(tree / "src"),
            "FLASHREPRO_GIT_COMMIT": os.environ.get("FLASHREPRO_GIT_COMMIT") or commit}


# -- children (fresh processes) ---------------------------------------------------------------

def calibrate_child(spec: dict[str, Any]) -> dict[str, Any]:
    """In one process: the ``flashrepro`` call with each variant's kernel module and
    torch-flash, interleaved rounds; per variant the per-round medians (µs)."""
    import flashrepro.launch as launch
    from flashrepro.bench.kernels import make_call
    from flashrepro.bench.problem import load_article
    from flashrepro.bench.timing import interleaved_rounds
    problem, _ = load_article()
    inputs = problem.inputs()
    own = launch.fwd_gluon_ws
    fns = {"torch-flash": make_call("torch-flash", inputs, problem.causal)}
    for name, tree in spec["trees"].items():
        loader = importlib.util.spec_from_file_location(WS_MODULE, Path(tree) / "src" / WS_FILE)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)  # not in sys.modules: launch's import stays
        call = make_call("flashrepro", inputs, problem.causal)

        def swapped(call=call, module=module):
            # A launch plan binds the kernel it first compiled: none may outlive the swap.
            launch.clear_plans()
            launch.fwd_gluon_ws = module
            try:
                return call()
            finally:
                launch.fwd_gluon_ws = own
                launch.clear_plans()
        fns[name] = swapped
    t0 = time.perf_counter()
    rounds = interleaved_rounds(fns, rounds=spec["rounds"], calls_per_round=spec["calls"])
    return {"rounds_us": rounds, "seconds": time.perf_counter() - t0}


def gate_child(spec: dict[str, Any]) -> dict[str, Any]:
    """One gate run, as ``reproduce --gate --reference-src`` measures and judges the
    ``spec["records"]``: the variant's rows beside the reference tree's twins (the unmodified
    code) in the same rounds, then :func:`flashrepro.gate.check`, which judges each pair and
    shows the committed baseline's comparison beside it."""
    t0 = time.perf_counter()
    from flashrepro import env
    from flashrepro.bench import reproduce as R
    from flashrepro.bench.problem import load_article
    from flashrepro.bench.reference import load
    from flashrepro.gate import check
    problem, _ = load_article()
    reference = load(spec["reference_src"])
    environment = env.capture()
    clocks_before = env.nvml_clocks()
    t_measure = time.perf_counter()
    records = R.measure(problem, spec["records"], spec["rounds"], spec["calls"],
                        reference=reference, host_cost=False)
    measured = time.perf_counter() - t_measure
    results = {"schema": R.SCHEMA, "kind": "reproduce", "env": environment,
               "clocks_before": clocks_before, "clocks_after": env.nvml_clocks(),
               "problem": problem.as_dict(), "method": R.timing_method(spec["rounds"],
                                                                       spec["calls"]),
               "records": records, "reference": reference.describe()}
    verdict = check(results, Path(spec["baseline_dir"]))
    out = {"status": verdict.status, "exit_code": int(verdict.exit_code),
           "comparisons": [c.as_dict() for c in [*verdict.paired, *verdict.comparisons]],
           "against_baseline": [c.as_dict() for c in verdict.against_baseline],
           "round_us": {r["name"]: r.get("round_medians_us") for r in records},
           "env_differences": [f"{d.field}: {d.baseline} -> {d.current}"
                               for d in verdict.env_differences],
           "ratio_rounds": {r["name"]: r.get("ratio_rounds") for r in records},
           "median_us": {r["name"]: r.get("median_us") for r in records},
           "measure_seconds": measured}
    if verdict.env_differences:  # baseline comparison skipped: computed, for information
        forced = check(results, Path(spec["baseline_dir"]), allow_env_mismatch=True)
        out["against_baseline"] = [c.as_dict() for c in forced.against_baseline]
    out["child_seconds"] = time.perf_counter() - t0
    return out


def sass_child() -> dict[str, Any]:
    """In a process whose ``flashrepro`` is a variant's copy: compile its ws kernel for sm_90
    at the article problem's default launch, offline (no GPU; ``analysis.offline_compile``),
    and return its SASS opcode counts (all, and inside loop bodies)."""
    from flashrepro.analysis.offline_compile import KernelSpec, compile_spec
    from flashrepro.bench.problem import load_article
    from flashrepro.configs import default_config
    problem, _ = load_article()
    cfg = default_config(problem.head_dim, problem.causal, problem.seqlen_q, 90)
    with tempfile.TemporaryDirectory(prefix="gate-power-cubin-") as tmp:
        res = compile_spec(KernelSpec("fwd_gluon_ws", cfg, "sm_90", problem), Path(tmp))
    return {"opcodes": res.counts.opcodes, "loop_classes": res.counts.loop_classes}


def check_offline(variants: list[str]) -> dict[str, dict[str, Any]]:
    """CPU check of the transformations: each variant's copy compiles for sm_90 and its SASS
    keeps the change (FFMA count, per variant); prints a table."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="gate-power-sass-") as tmp:
        for v in variants:
            tree = make_tree(Path(tmp), v)
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()),
                                   "--sass-child"], env={**child_env(tree),
                                   "TRITON_INTERPRET": "0"}, capture_output=True, text=True,
                                  timeout=900, check=False)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not lines:
                raise SystemExit(f"{v}: offline compile failed:\n{proc.stderr[-3000:]}")
            out[v] = json.loads(lines[-1][len("RESULT "):])
            ffma = sum(n for op, n in out[v]["opcodes"].items() if op.startswith("FFMA"))
            print(f"{v}: compiled for sm_90; FFMA {ffma}, instructions "
                  f"{sum(out[v]['opcodes'].values())}", flush=True)
    return out


def child_main(mode: str, spec_path: Path, wait: bool) -> None:
    if wait:  # pre-started: imports done, no CUDA yet; go when the parent says so
        import flashrepro.bench.reproduce
        import flashrepro.gate  # noqa: F401
        sys.stdin.readline()
    spec = json.loads(spec_path.read_text())
    result = calibrate_child(spec) if mode == "calibrate" else gate_child(spec)
    print("RESULT " + json.dumps(result), flush=True)


# -- the parent -------------------------------------------------------------------------------

class Child:
    """A child process of this script: ``mode`` on ``spec`` with ``tree``'s kernel."""

    def __init__(self, mode: str, spec: dict[str, Any], tree: Path, tmp: Path, name: str,
                 prestart: bool) -> None:
        self.name, self.prestart = name, prestart
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(spec))
        cmd = [sys.executable, str(Path(__file__).resolve()), f"--{mode}-child", str(path)]
        self.proc = subprocess.Popen(cmd + (["--wait"] if prestart else []), env=child_env(tree),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def result(self, timeout: float) -> tuple[dict[str, Any] | None, str, float]:
        """Start it (when pre-started), wait; (result or None, error text, wall seconds)."""
        t0 = time.perf_counter()
        try:
            out, err = self.proc.communicate("go\n" if self.prestart else None, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            return None, f"timed out after {timeout:.0f} s\n{err[-2000:]}", timeout
        wall = time.perf_counter() - t0
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        if self.proc.returncode or not lines:
            return None, f"exit {self.proc.returncode}\n{err[-3000:]}", wall
        return json.loads(lines[-1][len("RESULT "):]), "", wall

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def slowdowns(rounds_us: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per variant: median over rounds of its time / the unmodified kernel's, minus 1, with
    the quartiles, and the median ratio to torch-flash."""
    base = rounds_us["unmodified"]
    out = {}
    for name, values in rounds_us.items():
        if name == "torch-flash":
            continue
        rel = [a / b - 1.0 for a, b in zip(values, base, strict=True)]
        q1, _, q3 = statistics.quantiles(rel, n=4)
        out[name] = {"slowdown": statistics.median(rel), "q25": q1, "q75": q3,
                     "median_us": statistics.median(values),
                     "ratio_vs_torch_flash": statistics.median(
                         a / b for a, b in zip(values, rounds_us["torch-flash"], strict=True))}
    return out


def choose_n(points: dict[int, float], target: float) -> int:
    """The N whose slowdown is ``target``, interpolated linearly on ``points`` (N -> measured
    slowdown, with (0, 0) added; made non-decreasing first); beyond the scan, extrapolated
    through the origin and the largest point."""
    pts = sorted({0: 0.0, **points}.items())
    best = 0.0
    mono = []
    for n, s in pts:
        best = max(best, s)
        mono.append((n, best))
    for (n0, s0), (n1, s1) in itertools.pairwise(mono):
        if s0 <= target <= s1 and s1 > s0:
            return max(1, round(n0 + (target - s0) * (n1 - n0) / (s1 - s0)))
    n_max, s_max = mono[-1]
    return max(1, round(n_max * target / s_max)) if s_max > 0 else n_max * 2


def schedule(runs: int, levels: list[str]) -> list[str]:
    """``runs`` runs of each level, levels rotating (run i starts at level i mod k), so drift
    over the experiment reaches every level alike."""
    k = len(levels)
    return [levels[(i + j) % k] for i in range(runs) for j in range(k)]


def rejudge(run: dict[str, Any], record: str, threshold: float) -> bool | None:
    """Whether ``run``'s pair (``record`` and its reference twin) would be flagged at
    ``threshold`` (the gate's paired rule, :func:`flashrepro.gate.stats.compare_paired`), for
    the other thresholds' columns."""
    from flashrepro.gate.stats import compare_paired
    from flashrepro.results import REFERENCE_PREFIX
    rounds = run.get("round_us") or {}
    if not rounds.get(record) or not rounds.get(REFERENCE_PREFIX + record):
        return None
    return compare_paired(rounds[record], rounds[REFERENCE_PREFIX + record], record=record,
                          threshold=threshold).slower


def summary(runs: list[dict[str, Any]], levels: dict[str, str], record: str,
            thresholds: list[float]) -> list[dict[str, Any]]:
    rows = []
    for label, variant in levels.items():
        sel = [r for r in runs if r["variant"] == variant]
        ok = [r for r in sel if r.get("result")]
        comps = [c for r in ok for c in r["result"]["comparisons"] if c["record"] == record]
        changes = [c["change"] for c in comps]
        stored = [c for r in ok for c in r["result"].get("against_baseline", [])
                  if c["record"] == record]
        rows.append({
            "level": label, "variant": variant, "runs": len(sel), "finished": len(ok),
            "flagged": sum(r["result"]["exit_code"] == 1 for r in ok),
            "other_exit": sorted({r["result"]["exit_code"] for r in ok} - {0, 1}),
            "flagged_at": {f"{t:g}": sum(bool(r.get("rejudged", {}).get(f"{t:g}")) for r in ok)
                           for t in thresholds},
            "median_change": statistics.median(changes) if changes else None,
            "baseline_flagged": sum(bool(c["slower"]) for c in stored),
            "baseline_median_change": (statistics.median(c["change"] for c in stored)
                                       if stored else None),
            "sd_change": statistics.stdev(changes) if len(changes) > 1 else None,
            "ci_low_min": min((c["ci_low"] for c in comps), default=None),
            "ci_low_max": max((c["ci_low"] for c in comps), default=None),
            "median_run_s": statistics.median(r["wall_s"] for r in ok) if ok else None,
            "median_measure_s": (statistics.median(r["result"]["measure_seconds"] for r in ok)
                                 if ok else None)})
    return rows


def pct(x: float | None, sign: bool = True) -> str:
    return "-" if x is None else (f"{x:+.2%}" if sign else f"{x:.2%}")


def markdown(result: dict[str, Any]) -> str:
    from tabulate import tabulate
    a = result["args"]
    cal = result["calibration"].get("chosen") or {}
    cal_rows = [[v, pct(d["slowdown"]), f"{pct(d['q25'])} to {pct(d['q75'])}",
                 f"{d['median_us']:.2f}", f"{d['ratio_vs_torch_flash']:.4f}"]
                for v, d in cal.items()]
    scan = result["calibration"].get("scan") or {}
    scan_rows = [[v, pct(d["slowdown"]), f"{d['median_us']:.2f}"] for v, d in scan.items()]
    ts = [f"{t:g}" for t in result["thresholds"]]
    rows = [[r["level"], r["variant"], pct(cal.get(r["variant"], {}).get("slowdown")),
             f"{r['flagged']}/{r['finished']}", GOALS[r["level"]][1],
             *(f"{r['flagged_at'][t]}/{r['finished']}" for t in ts),
             pct(r["median_change"]), pct(r["sd_change"], sign=False),
             f"{pct(r['ci_low_min'])} to {pct(r['ci_low_max'])}",
             f"{r['baseline_flagged']}/{r['finished']}", pct(r["baseline_median_change"]),
             "-" if r["median_run_s"] is None else f"{r['median_run_s']:.1f}"]
            for r in result["summary"]]
    heads = ["level", "variant", "calibrated", "flagged (gate)", "target",
             *(f"at {float(t):.1%}" for t in ts), "median change", "sd change",
             "CI low min to max", "committed baseline alone: flagged",
             "its median change", "run wall (s)"]
    lines = [f"### Gate power with real slowdowns, {result['gpu']} ({result['date']})", "",
             f"Records {a['records']}, {a['rounds']} rounds x {a['calls']} calls per run, "
             f"baseline `{result['baseline']}` (gate settings {result['gate_settings']}), "
             f"{a['runs']} runs per level, each a fresh process; {result['seconds']:.0f} s "
             "in all.", "",
             "Calibration scan (one process, side by side, slowdown of `flashrepro`):", "",
             tabulate(scan_rows, ["variant", "slowdown", "median µs"], tablefmt="github",
                      disable_numparse=True) if scan_rows else "(failed)", "",
             "Chosen variants, side by side:", "",
             tabulate(cal_rows, ["variant", "slowdown", "quartiles", "median µs",
                                 "ratio to torch-flash"], tablefmt="github",
                      disable_numparse=True) if cal_rows else "(failed)", "",
             "Detection (each run: the variant paired with the unmodified reference copy in "
             "one process, the gate's paired rule; change = median per-round ratio to the "
             "twin - 1. The last columns judge the same runs by the committed baseline "
             "alone, the method before the pairing):", "",
             tabulate(rows, heads, tablefmt="github", disable_numparse=True), "",
             f"Targets met at the gate's settings: **{result['targets_met']}**.", ""]
    if result["errors"]:
        lines += [f"{len(result['errors'])} child(ren) failed; see `errors` in the JSON.", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="gate runs per level (default 20)")
    p.add_argument("--rounds", type=int, default=100, help="rounds per gate run (the job's)")
    p.add_argument("--calls", type=int, default=10, help="calls per round (the baseline's)")
    p.add_argument("--records", nargs="+", default=["flashrepro", "torch-flash"],
                   help="kernels each gate run measures (torch-flash is the reference)")
    p.add_argument("--levels", nargs="+", choices=list(LEVEL_KEYS.values()),
                   default=list(LEVEL_KEYS.values()),
                   help="slowdown levels of the detection step (default: all)")
    p.add_argument("--fma", type=int, nargs=2, metavar=("N3", "N5"), default=None,
                   help="FMA chain lengths for 3 %% and 5 %%: skips the calibration scan "
                        "(the chosen variants are still calibrated side by side)")
    p.add_argument("--scan", type=int, nargs="+", default=list(SCAN),
                   help="FMA chain lengths of the calibration scan")
    p.add_argument("--cal-rounds", type=int, default=40, help="rounds of each calibration")
    p.add_argument("--thresholds", type=float, nargs="+", default=[0.015, 0.025],
                   help="other thresholds each run is re-judged at (information only)")
    p.add_argument("--baseline-dir", type=Path, default=REPO / "reproduce" / "baselines")
    p.add_argument("--child-timeout", type=float, default=180.0, help="seconds per child")
    p.add_argument("--deadline-s", type=float, default=540.0,
                   help="start no run after this many seconds (results so far are written)")
    p.add_argument("--no-prestart", action="store_true",
                   help="start each run's process only when the previous one has finished")
    p.add_argument("--check-offline", nargs="*", metavar="VARIANT", default=None,
                   help="CPU only: compile these variants (default unmodified lag0 fma24) for "
                        "sm_90 offline and print their FFMA counts; no GPU work")
    p.add_argument("--sass-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--calibrate-child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--gate-child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--wait", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.sass_child:
        print("RESULT " + json.dumps(sass_child()), flush=True)
        return
    if a.check_offline is not None:
        check_offline(a.check_offline or ["unmodified", "lag0", "fma24"])
        return
    if a.calibrate_child or a.gate_child:
        child_main("calibrate" if a.calibrate_child else "gate",
                   a.calibrate_child or a.gate_child, a.wait)
        return
    if a.runs < 1 or a.rounds < 5 or a.calls < 1 or a.cal_rounds < 5 or not a.scan:
        p.error("need --runs >= 1, --rounds >= 5, --calls >= 1, --cal-rounds >= 5, --scan N..")
    if "torch-flash" not in a.records or "flashrepro" not in a.records:
        p.error("--records must hold flashrepro and torch-flash (the gated pair)")
    out = Path(os.environ.get("OUT") or "gate_power_out")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    errors: list[str] = []

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", flush=True)

    sys.path.insert(0, str(REPO / "src"))
    base_files = sorted((a.baseline_dir / "nvidia-h200").glob("*causal.json"))
    baseline = json.loads(base_files[0].read_text()) if base_files else None
    result: dict[str, Any] = {"args": {k: (str(v) if isinstance(v, Path) else v)
                                       for k, v in vars(a).items()
                                       if not k.endswith("child") and k != "check_offline"},
                              "baseline": str(base_files[0].relative_to(REPO)) if base_files
                              else None, "thresholds": a.thresholds,
                              "gate_settings": (baseline or {}).get("gate", {}).get("threshold"),
                              "calibration": {}, "runs": [], "errors": errors}

    def write() -> None:
        result["seconds"] = time.perf_counter() - t0
        (out / "gate_power.json").write_text(json.dumps(result, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="gate-power-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {v: make_tree(tmp, v) for v in ["unmodified", "lag0", *(f"fma{n}" for n in
                                                                          a.scan)]}
        points: dict[int, float] = {}
        if a.fma is None:
            log(f"1/3 calibration scan: {list(trees)}")
            cal_spec = {"trees": {v: str(t) for v, t in trees.items()},
                        "rounds": a.cal_rounds, "calls": a.calls}
            res, err, wall = Child("calibrate", cal_spec, trees["unmodified"], tmp, "scan",
                                   False).result(a.child_timeout * 2)
            if res:
                scan = slowdowns(res["rounds_us"])
                result["calibration"]["scan"] = scan
                result["calibration"]["scan_wall_s"] = wall
                points = {int(v[3:]): d["slowdown"] for v, d in scan.items()
                          if v.startswith("fma")}
                log("    " + ", ".join(f"{v} {d['slowdown']:+.2%}" for v, d in scan.items()))
            else:
                errors.append(f"calibration scan: {err}")
                log(f"    calibration scan failed: {err[-500:]}")
        else:
            log(f"1/3 calibration scan skipped: --fma {a.fma[0]} {a.fma[1]}")
        n3, n5 = (tuple(a.fma) if a.fma is not None else
                  (choose_n(points, TARGETS["fma3"]), choose_n(points, TARGETS["fma5"]))
                  if points else (a.scan[len(a.scan) // 2 - 1], a.scan[len(a.scan) // 2]))
        if n5 <= n3:
            n5 = n3 + 1
        levels = {label: variant for label, variant in
                  {"A/A": "unmodified", "~2 % (lag0)": "lag0", "3 %": f"fma{n3}",
                   "5 %": f"fma{n5}"}.items() if LEVEL_KEYS[label] in a.levels}
        for v in levels.values():
            trees[v] = make_tree(tmp, v)
        log(f"2/3 calibration of the chosen variants: fma{n3} (3 %), fma{n5} (5 %)")
        cal_spec = {"trees": {v: str(trees[v]) for v in dict.fromkeys(["unmodified",
                                                                         *levels.values()])},
                    "rounds": a.cal_rounds * 2, "calls": a.calls}
        res, err, wall = Child("calibrate", cal_spec, trees["unmodified"], tmp, "chosen",
                               False).result(a.child_timeout * 2)
        if res:
            result["calibration"]["chosen"] = slowdowns(res["rounds_us"])
            result["calibration"]["chosen_wall_s"] = wall
            log("    " + ", ".join(f"{v} {d['slowdown']:+.2%}"
                                   for v, d in result["calibration"]["chosen"].items()))
        else:
            errors.append(f"calibration of the chosen variants: {err}")
            log(f"    calibration failed: {err[-500:]}")
        write()

        order = schedule(a.runs, list(levels.values()))
        log(f"3/3 detection: {len(order)} gate runs, each a fresh process")
        gate_spec = {"records": a.records, "rounds": a.rounds, "calls": a.calls,
                     "baseline_dir": str(a.baseline_dir),
                     "reference_src": str(make_tree(tmp, "reference") / "src")}
        prestart = not a.no_prestart
        walls: list[float] = []
        pending = Child("gate", gate_spec, trees[order[0]], tmp, "run0", prestart)
        for i, variant in enumerate(order):
            child = pending
            elapsed = time.perf_counter() - t0
            est = statistics.median(walls) if walls else 0.0
            if elapsed + est > a.deadline_s:
                child.cancel()
                log(f"    deadline: {len(order) - i} runs not started")
                result["not_started"] = len(order) - i
                break
            res, err, wall = child.result(a.child_timeout)
            pending = (Child("gate", gate_spec, trees[order[i + 1]], tmp, f"run{i + 1}",
                             prestart) if i + 1 < len(order) else None)
            run: dict[str, Any] = {"index": i, "variant": variant, "wall_s": wall,
                                   "result": res}
            if res:
                walls.append(wall)
                run["rejudged"] = {f"{t:g}": rejudge(res, "flashrepro", t)
                                   for t in a.thresholds}
                comp = next((c for c in res["comparisons"] if c["record"] == "flashrepro"), {})
                log(f"    run {i:2d} {variant:10s} exit {res['exit_code']} change "
                    f"{comp.get('change', float('nan')):+.2%} CI low "
                    f"{comp.get('ci_low', float('nan')):+.2%} ({wall:.1f} s)")
            else:
                errors.append(f"run {i} ({variant}): {err}")
                log(f"    run {i} ({variant}) failed: {err[-300:]}")
            result["runs"].append(run)
            write()  # a call stopped at its time limit keeps every finished run
        if pending is not None:
            pending.cancel()
    import torch  # noqa: F401  (env capture below reads the GPU name via torch)

    from flashrepro.env import capture
    env = capture()
    result.update({"date": env["date"], "gpu": (env.get("gpu") or {}).get("name"), "env": env,
                   "levels": levels})
    result["summary"] = summary(result["runs"], levels, "flashrepro", a.thresholds)
    by = {r["level"]: r for r in result["summary"]}
    result["targets_met"] = (bool(
        all(by[k]["finished"] == by[k]["runs"] == a.runs for k in ("A/A", "3 %", "5 %"))
        and by["A/A"]["flagged"] == 0 and by["5 %"]["flagged"] >= 0.95 * a.runs
        and by["3 %"]["flagged"] >= 0.75 * a.runs)
        if {"A/A", "3 %", "5 %"} <= set(by) else None)
    write()
    text = markdown(result)
    (out / "gate_power.md").write_text(text)
    from tabulate import tabulate
    print(tabulate([[r["level"], r["variant"], pct(result["calibration"].get("chosen", {})
                                                   .get(r["variant"], {}).get("slowdown")),
                     f"{r['flagged']}/{r['finished']}", GOALS[r["level"]][1],
                     pct(r["median_change"]), f"{r['baseline_flagged']}/{r['finished']}",
                     "-" if r["median_run_s"] is None else f"{r['median_run_s']:.1f}"]
                    for r in result["summary"]],
                   ["level", "variant", "calibrated", "flagged", "target", "median change",
                    "baseline alone", "run s"], tablefmt="github", disable_numparse=True))
    print(f"targets met: {result['targets_met']}; {result['seconds']:.0f} s; "
          f"{len(errors)} failed children; wrote {out}/gate_power.json and gate_power.md")


if __name__ == "__main__":
    main()
