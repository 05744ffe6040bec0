"""The ladder's memory traffic and the executed-count check (``flashrepro profile``,
:mod:`flashrepro_harness.commands.profile`).

Two jobs under Nsight Compute (:mod:`flashrepro_harness.analysis.ncu`), one ncu process each:

* **The memory ladder** (the memory article, docs/article.md): every rung of
  :mod:`flashrepro_harness.bench.ladder_kernels` on the article's source workload and on the
  article config, one measured launch each: time, DRAM bytes read and written, shared-memory
  bank conflicts / wavefronts (the conflict rate, as the article's 63.64%), executed HMMA, HGMMA
  and LDSM, registers per thread and achieved occupancy, beside the published figures.
* **Executed counts** (the SASS article): the article kernel at the article config, on the
  mma.sync (``DISABLE_MMA_V3=1``) and sm_90 wgmma paths, against :func:`expected_executed`; any
  difference exits 1.

Writes under ``--out`` (default ``reproduce/results/<gpu-key>/``), per job (``ladder``,
``executed``): ``<job>.md`` (tables), ``<job>.json`` (every value, the environment, the ncu
command lines, the metric names used and dropped) and each run's raw ncu CSV
(``<job>_<workload or path>.csv``). Without ncu or a GPU: one line, exit 0 (1 with
``--require-gpu``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashrepro.configs import ARTICLE, KernelConfig
from flashrepro_harness.analysis import ncu
from flashrepro_harness.bench.ladder_kernels import KERNEL_NAMES, VARIANTS
from flashrepro_harness.outputs import write_atomic
from flashrepro_harness.progress import progress

SCHEMA = "flashrepro.profile/1"


@dataclass(frozen=True)
class Workload:
    """One problem the ladder is profiled on (Lq = Lk = seqlen, all rungs with one config)."""

    name: str
    batch: int
    heads: int
    seqlen: int
    head_dim: int
    dtype: str
    causal: bool
    config: KernelConfig
    variants: tuple[str, ...]
    source: str

    def worker_args(self, warmup: int) -> list[str]:
        """Arguments of :mod:`flashrepro_harness.bench.ncu_workload` for this workload."""
        c = self.config
        args = ["--shape", f"{self.batch},{self.heads},{self.seqlen},{self.head_dim}",
                "--dtype", self.dtype,
                "--config", f"{c.block_m},{c.block_n},{c.num_warps},{c.num_stages}",
                "--warmup", str(warmup)]
        return [*args, *(["--causal"] if self.causal else []), *self.variants]


WORKLOADS: dict[str, Workload] = {
    "source": Workload(
        "source", batch=10, heads=64, seqlen=2048, head_dim=32, dtype="float16", causal=False,
        config=KernelConfig(block_m=32, block_n=32, num_warps=4, num_stages=3),
        variants=VARIANTS,
        source="the memory article's source code (github.com/AmineDiro/nano-llama-flash, "
               "kernels/triton_flash_att_fp16.py): B=10, N_h=64, S=2048, D_h=32, fp16, "
               "Br=Bc=32, 4 warps; O is 83.9 MB and there are 64 key/value blocks, the "
               "article's 'O ~ 83 MB, 64 blocks'"),
    "article": Workload(
        "article", batch=2, heads=16, seqlen=1024, head_dim=128, dtype="float16", causal=True,
        config=ARTICLE, variants=("v1", "v2_kcol", "v2_kt", "article", "fwd"),
        source="the article config of the SASS article (B=2, H=16, L=1024, D=128, fp16, "
               "causal, 64x64 tiles, 4 warps)"),
}

METRICS: dict[str, tuple[str, ...]] = {
    "time_ns": ("gpu__time_duration.sum",),
    "dram_read_bytes": ("dram__bytes_read.sum",),
    "dram_write_bytes": ("dram__bytes_write.sum",),
    "conflicts_ld": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",),
    "conflicts_st": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",),
    "wavefronts_ld": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",),
    "wavefronts_st": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",),
    "hmma": ("smsp__inst_executed_pipe_tensor_op_hmma.sum",
             "sm__inst_executed_pipe_tensor_op_hmma.sum"),
    "hgmma": ("smsp__inst_executed_pipe_tensor_op_gmma.sum",
              "sm__inst_executed_pipe_tensor_op_gmma.sum"),
    "ldsm": ("smsp__sass_inst_executed_op_ldsm.sum", "sm__sass_inst_executed_op_ldsm.sum"),
    "registers": ("launch__registers_per_thread",),
    "occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
}
"""Quantity -> Nsight Compute metric names, best first (``smsp__``/``sm__``: the same counter).
Counts are warp-level: an HGMMA counts once per warp of its warpgroup."""

EXECUTED_METRICS = ("hmma", "hgmma", "ldsm")
PATHS: dict[str, dict[str, str]] = {"mma.sync": {"DISABLE_MMA_V3": "1"}, "wgmma": {}}
"""Executed-count paths: name -> extra environment of the profiled process."""

# Static SASS per warp of the article kernel at the article config, Triton 3.6, by class:
# (per key-block iteration, outside the loops). HMMA: the SASS article's model, 128 per body;
# LDSM on mma.sync: its 112 + 16 static LDSM, all in the two loop bodies; HGMMA: 8 (Q·Kᵀ) + 4
# (P·V) per body; the wgmma build's 8 LDSM are in the epilogue (docs/article.md).
_STATIC_PER_WARP: dict[str, dict[str, tuple[int, int]]] = {
    "mma.sync": {"HMMA": (128, 0), "HGMMA": (0, 0), "LDSM": (64, 0)},
    "wgmma": {"HMMA": (0, 0), "HGMMA": (12, 0), "LDSM": (0, 8)},
}

COUNTED: dict[str, tuple[str, ...]] = {"hmma": ("HMMA", "HGMMA"), "hgmma": ("HGMMA",),
                                       "ldsm": ("LDSM",)}
"""Executed-count quantity -> the SASS classes its counter counts: on sm_90 the HMMA pipe's
counter also counts HGMMA (``reproduce/results/nvidia-h200/executed.md``)."""

SEED_004 = {  # published figures of the memory article (docs/article.md)
    "v1": "11.58 GB read, 5.54 GB written",
    "v2_kcol": "412.18 MB read (-92.98% vs v1), ~80 MB written; 63.64% of shared wavefronts "
               "are conflicts (6.3-way); +6% speed vs v1",
    "v2_kt": "conflicts eliminated; +145% speed vs v2",
    "v2_kcol_fma": "(CUDA-core dot: Triton's sm_75 code path)",
    "v2_kt_fma": "(CUDA-core dot: Triton's sm_75 code path)",
}


def expected_executed(workload: Workload = WORKLOADS["article"]) -> dict[str, dict[str, int]]:
    """Expected executed instruction counts of the article kernel, per path and quantity.

    Model (the SASS article): executed = static count x warps x iterations. Query block m of
    n = Lq / BLOCK_M runs m off-band iterations and one on-band (causal, BLOCK_M = BLOCK_N): at
    the article config 2048 warps x 8.5 = 17,408 warp-iterations (the article's "8704 on
    average" is per static instruction over the two bodies). A class counts
    ``per_iteration x 17,408 + outside_loops x 2048``; a quantity sums its :data:`COUNTED`
    classes (HMMA on mma.sync: 2,228,224).

    Returns:
        path (``'mma.sync'``, ``'wgmma'``) -> quantity (``'hmma'``, ``'hgmma'``, ``'ldsm'``)
        -> expected executed count (warp-level instructions).

    Raises:
        ValueError: a workload other than the causal article config.
    """
    w, cfg = workload, workload.config
    if not (w.causal and cfg == ARTICLE and w.head_dim == 128):
        raise ValueError("expected_executed models the causal article config only "
                         f"(64x64 tiles, 4 warps, D=128), got {w.name}")
    n = w.seqlen // cfg.block_m
    warps = w.batch * w.heads * n * cfg.num_warps
    warp_iterations = w.batch * w.heads * cfg.num_warps * n * (n + 1) // 2
    by_class = {path: {c: per_iter * warp_iterations + outside * warps
                       for c, (per_iter, outside) in counts.items()}
                for path, counts in _STATIC_PER_WARP.items()}
    return {path: {q: sum(counts[c] for c in classes) for q, classes in COUNTED.items()}
            for path, counts in by_class.items()}


# -- running ncu ------------------------------------------------------------------------------

def _worker(workload: Workload, variants: tuple[str, ...], warmup: int) -> list[str]:
    w = replace(workload, variants=variants)
    return [sys.executable, "-m", "flashrepro_harness.bench.ncu_workload", *w.worker_args(warmup)]


def _kernel_regex(variants: tuple[str, ...]) -> str:
    names = sorted({KERNEL_NAMES[v] for v in variants})
    return "^(" + "|".join(names) + ")$"


def _run_ncu(workload: Workload, variants: tuple[str, ...], quantities: tuple[str, ...],
             extra_env: dict[str, str], args: argparse.Namespace,
             known: frozenset[str] | None) -> dict[str, Any]:
    """Profile the measured launch of each variant; return a JSON-ready record."""
    names = ncu.resolve({q: METRICS[q] for q in quantities}, known)
    warmup = 1
    result = ncu.profile(
        _worker(workload, variants, warmup), list(names.values()),
        kernel_regex=_kernel_regex(variants), launch_skip=warmup * len(variants),
        launch_count=len(variants), env={**os.environ, **extra_env}, ncu=args.ncu_path,
        timeout_s=args.timeout)
    records = []
    for variant, kernel in zip(variants, result.kernels, strict=True):
        if kernel.kernel != KERNEL_NAMES[variant]:
            raise ncu.NcuError(f"launch {kernel.launch_id} is {kernel.kernel}, expected "
                               f"{KERNEL_NAMES[variant]} for variant {variant}")
        records.append({"variant": variant, "kernel": kernel.kernel,
                        "metrics": {q: kernel.value(n) for q, n in names.items()}})
    return {"metric_names": names, "dropped_metrics": result.dropped,
            "command": result.command, "env": extra_env, "records": records,
            "_csv": result.csv}


# -- tables -----------------------------------------------------------------------------------

def _pct(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else 100.0 * num / den


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value / factor


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "n/a" if value is None else format(value, spec) + suffix


def ladder_rows(name: str, record: dict[str, Any]) -> list[list[str]]:
    """Table rows of one workload's ladder record (see :func:`_run_ncu`)."""
    by_variant = {r["variant"]: r["metrics"] for r in record["records"]}
    v1_read = by_variant.get("v1", {}).get("dram_read_bytes")
    rows = []
    for variant, m in by_variant.items():
        read_share = _pct(m["dram_read_bytes"], v1_read)
        rows.append([
            name, variant, _fmt(_scaled(m["time_ns"], 1e3), ",.1f"),
            _fmt(_scaled(m["dram_read_bytes"], 1e6), ",.1f"),
            _fmt(_scaled(m["dram_write_bytes"], 1e6), ",.1f"),
            _fmt(None if read_share is None else read_share - 100.0, "+.2f"),
            _fmt(_pct(m["conflicts_ld"], m["wavefronts_ld"]), ".2f"),
            _fmt(_pct(m["conflicts_st"], m["wavefronts_st"]), ".2f"),
            _fmt(m["hmma"], ",.0f"), _fmt(m["hgmma"], ",.0f"), _fmt(m["ldsm"], ",.0f"),
            _fmt(m["registers"], ".0f"), _fmt(m["occupancy_pct"], ".1f"),
            SEED_004.get(variant, "") if name == "source" else "",
        ])
    return rows


LADDER_HEADERS = ["workload", "variant", "time µs", "DRAM read MB", "DRAM write MB",
                  "read vs v1 %", "ld conflicts %", "st conflicts %", "HMMA pipe", "HGMMA", "LDSM",
                  "regs", "occupancy %", "memory article (published)"]


def headline_rows(ladder: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The memory article's claims beside ours, one row each."""
    def metric(workload: str, variant: str, q: str) -> float | None:
        for r in ladder.get(workload, {}).get("records", []):
            if r["variant"] == variant:
                return r["metrics"][q]
        return None

    def ours(fn: Any) -> list[str]:
        return [fn(w) for w in ("source", "article")]

    def read_change(w: str) -> str:
        share = _pct(metric(w, "v2_kcol", "dram_read_bytes"), metric(w, "v1", "dram_read_bytes"))
        return _fmt(None if share is None else share - 100.0, "+.2f", "%")

    def conflict(w: str, variant: str) -> str:
        rate = _pct(metric(w, variant, "conflicts_ld"), metric(w, variant, "wavefronts_ld"))
        return _fmt(rate, ".2f", "%")

    def speedup(w: str, old: str, new: str) -> str:
        t_old, t_new = metric(w, old, "time_ns"), metric(w, new, "time_ns")
        return _fmt(None if not (t_old and t_new) else 100.0 * (t_old / t_new - 1), "+.0f", "%")

    return [
        ["HBM reads, v1 -> v2", "-92.98%", *ours(read_change)],
        ["ld bank-conflict rate, K read column-wise (v2_kcol)", "63.64%",
         *ours(lambda w: conflict(w, "v2_kcol"))],
        ["same, CUDA-core dot (v2_kcol_fma)", "63.64%",
         *ours(lambda w: conflict(w, "v2_kcol_fma"))],
        ["ld bank-conflict rate, K pre-transposed (v2_kt)", "~0 (eliminated)",
         *ours(lambda w: conflict(w, "v2_kt"))],
        ["same, CUDA-core dot (v2_kt_fma)", "~0 (eliminated)",
         *ours(lambda w: conflict(w, "v2_kt_fma"))],
        ["speed, v2 vs v1", "+6%", *ours(lambda w: speedup(w, "v1", "v2_kcol"))],
        ["speed, K pre-transposed vs column-wise", "+145%",
         *ours(lambda w: speedup(w, "v2_kcol", "v2_kt"))],
        ["same, CUDA-core dot", "+145%", *ours(lambda w: speedup(w, "v2_kcol_fma", "v2_kt_fma"))],
    ]


def executed_rows(executed: dict[str, Any], expected: dict[str, dict[str, int]]) -> list[list]:
    """Rows of the executed-count check: path, quantity, expected, measured, status."""
    rows = []
    for path, record in executed.items():
        measured = record["records"][0]["metrics"]
        for q in EXECUTED_METRICS:
            got, want = measured.get(q), expected[path][q]
            status = "n/a" if got is None else ("ok" if int(got) == want else "DIFFERS")
            rows.append([path, q, record["metric_names"].get(q) or "n/a", f"{want:,}",
                         _fmt(got, ",.0f"), status])
    return rows


# -- the jobs -----------------------------------------------------------------------------------

def _write(out: Path, job: str, report: dict[str, Any], md: list[str]) -> None:
    """Write ``<job>_<run>.csv`` per ncu run, then ``<job>.json`` and ``<job>.md``."""
    out.mkdir(parents=True, exist_ok=True)
    for name, record in report["runs"].items():
        write_atomic(out / f"{job}_{name.replace('.', '_')}.csv", record.pop("_csv"))
    write_atomic(out / f"{job}.json", json.dumps(report, indent=2) + "\n")
    if report["errors"]:
        md += ["## Errors", "", *[f"- {e}" for e in report["errors"]], ""]
    text = "\n".join(md)
    write_atomic(out / f"{job}.md", text)
    print(text)


def _report(job: str, args: argparse.Namespace, environment: dict[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA, "kind": job, "env": environment, "ncu": args.ncu_path,
            "method": "one measured launch per variant after one warm-up launch; ncu "
                      "--clock-control none, default --cache-control all and --replay-mode "
                      "kernel", "runs": {}, "errors": []}


def run_ladder(args: argparse.Namespace, environment: dict[str, Any], out: Path,
               known: frozenset[str] | None) -> int:
    """Profile every rung on the chosen workloads; write ``ladder.*``; 1 if a run failed."""
    report = _report("ladder", args, environment)
    names = list(WORKLOADS) if args.workload == "all" else [args.workload]
    for name in progress(names, "profile ladder", unit="workload"):
        w = WORKLOADS[name]
        print(f"profile: ladder, {name} workload: {', '.join(w.variants)}", flush=True)
        try:
            record = _run_ncu(w, w.variants, tuple(METRICS), {}, args, known)
        except ncu.NcuError as exc:
            report["errors"].append(f"{name}: {exc}")
            continue
        record["workload"] = asdict(w)
        report["runs"][name] = record
    rows = [r for name, rec in report["runs"].items() for r in ladder_rows(name, rec)]
    md = ["# Memory ladder (the memory article), Nsight Compute", "",
          *[f"- {name}: {WORKLOADS[name].source}." for name in names], "",
          tabulate(rows, LADDER_HEADERS, tablefmt="github", disable_numparse=True), "",
          tabulate(headline_rows(report["runs"]),
                   ["claim", "memory article", "ours: source workload", "ours: article config"],
                   tablefmt="github", disable_numparse=True), ""]
    _write(out, "ladder", report, md)
    return 1 if report["errors"] else 0


def run_executed(args: argparse.Namespace, environment: dict[str, Any], out: Path,
                 known: frozenset[str] | None) -> int:
    """The executed-count check; write ``executed.*``; 1 unless every count matches."""
    report = _report("executed", args, environment)
    article = WORKLOADS["article"]
    expected = expected_executed(article)
    report["expected"] = expected
    for path, extra_env in progress(PATHS.items(), "profile executed counts", unit="path"):
        print(f"profile: executed counts, article kernel, {path} path", flush=True)
        try:
            report["runs"][path] = _run_ncu(article, ("article",), EXECUTED_METRICS, extra_env,
                                            args, known)
        except ncu.NcuError as exc:
            report["errors"].append(f"{path}: {exc}")
    rows = executed_rows(report["runs"], expected)
    report["passed"] = not report["errors"] and all(r[-1] == "ok" for r in rows)
    md = ["# Executed counts of the article kernel at the article config (the SASS article)", "",
          "Expected = static count per warp x 2048 warps x 8.5 average iterations, plus the "
          "static count outside the loops x 2048 warps (`expected_executed`).", "",
          tabulate(rows, ["path", "quantity", "metric", "expected", "measured", "status"],
                   tablefmt="github", disable_numparse=True), "",
          f"Result: {'PASS' if report['passed'] else 'FAIL'}", ""]
    _write(out, "executed", report, md)
    return 0 if report["passed"] else 1
