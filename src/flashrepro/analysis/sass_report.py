"""``python -m flashrepro sass``: SASS counts per arch — flashrepro, the article, torch — vs golden.

For every target arch it compiles the ``article`` and ``fwd`` variants at the article's launch
config and ``fwd`` at the production default config (:mod:`flashrepro.analysis.sass`), counts
torch's own FlashAttention-2 forward kernel where a CUDA build of torch is at hand
(:mod:`flashrepro.analysis.torch_sass`), and prints one table per arch: each kernel's counts,
the analytic model's prediction (:mod:`flashrepro.analysis.model`), the article's published
numbers, and a status. Every Triton count is compared with the golden file
(:mod:`flashrepro.analysis.golden`); any drift exits 1 with a readable diff, ``--update``
rewrites the file.

Library use: :func:`sass_report` returns the whole report as a JSON-ready dict (what
``python -m flashrepro reproduce`` embeds under ``"sass"``); :func:`format_tables` renders it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import tabulate
import torch
import triton

from flashrepro.analysis import golden, model
from flashrepro.analysis.disasm import CLASS_NAMES, tool_versions
from flashrepro.analysis.sass import (
    ARTICLE_PROBLEM,
    TARGETS,
    KernelSass,
    KernelSpec,
    Problem,
    Target,
    kernel_sass,
)
from flashrepro.analysis.torch_sass import (
    ARTICLE_INSTANCE,
    TorchFlashInstance,
    TorchKernelSass,
    dispatched_instance,
    installed_library,
    torch_flash_sass,
)
from flashrepro.configs import ARTICLE, KernelConfig, default_config

SCHEMA = "flashrepro.sass/1"

PUBLISHED: dict[str, dict[str, int]] = {
    "article": {"HMMA": 256, "LDSM": 112},
    "torch": {"HMMA": 256, "LDSM": 80, "LDSM.MT": 64},
}
"""The article's static counts (seed ``000_5de0d8ad12f287ab.txt``): its Triton kernel and torch's
FA2 kernel, D=128, 64x64 tiles, 4 warps, causal fp16, on an mma.sync (Ampere/Ada) GPU."""


# --------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------

def compare_model(prediction: dict[str, int], classes: dict[str, int],
                  loop_classes: dict[str, int]) -> tuple[str, list[str]]:
    """Compare a model prediction with a kernel's counts, class by modelled class.

    Args:
        prediction: counts of :data:`flashrepro.analysis.model.MODELLED_CLASSES`.
        classes, loop_classes: the kernel's counts, in all and inside loop bodies.

    Returns:
        (status, notes): ``match`` (every class equals the count), ``match-in-loops`` (some
        equal only the loop-body count; a note names what sits outside the loops) or
        ``mismatch`` (notes list the wrong classes).
    """
    notes, wrong = [], []
    for cls in model.MODELLED_CLASSES:
        predicted, total, in_loops = prediction[cls], classes[cls], loop_classes[cls]
        if predicted == total:
            continue
        if predicted == in_loops:
            notes.append(f"{cls}: {total - in_loops} outside the loop bodies (prologue/"
                         "epilogue), which the per-stage model does not cover")
        else:
            wrong.append(f"{cls}: model {predicted}, count {total} ({in_loops} in loops)")
    if wrong:
        return "mismatch", wrong + notes
    return ("match-in-loops" if notes else "match"), notes


def _model_entry(prediction: dict[str, int] | None, reason: list[str],
                 counts: dict[str, Any]) -> dict[str, Any]:
    if prediction is None:
        return {"counts": None, "status": "n/a", "notes": reason}
    status, notes = compare_model(prediction, counts["classes"], counts["loop_classes"])
    return {"counts": prediction, "status": status, "notes": reason + notes}


def _triton_prediction(result: KernelSass, target: Target) -> tuple[dict[str, int] | None,
                                                                    list[str]]:
    cfg, d = result.spec.config, triton.next_power_of_2(result.spec.problem.head_dim)
    layouts = result.mma_layouts
    try:
        if target.wgmma:
            if not any(lay["version"] == 3 for lay in layouts):
                return None, [f"no wgmma layout in the TTGIR ({layouts}): Triton did not use "
                              "wgmma here, the wgmma model does not apply"]
            return (model.wgmma_model(cfg.block_m, cfg.block_n, d, cfg.num_warps,
                                      model.TRITON_LOOP_BODIES),
                    ["wgmma m64nNk16 per warpgroup, P from registers"])
        v2 = [lay for lay in layouts if lay["version"] == 2]
        if len(v2) != 1:
            return None, [f"the TTGIR has {len(v2)} mma.sync layouts ({layouts}); the model "
                          "assumes one warp grid shared by both products"]
        wm, wn = v2[0]["warps"]
        p_smem = model.p_through_smem(wn)
        return (model.mma_sync_model(cfg.block_m, cfg.block_n, d, wm, wn, p_smem,
                                     model.TRITON_LOOP_BODIES),
                [f"warps {wm}x{wn} (from the TTGIR), so P goes through "
                 f"{'shared memory' if p_smem else 'registers'}"])
    except ValueError as exc:
        return None, [f"outside the model's assumptions: {exc}"]


def _published_entry(published: dict[str, int] | None,
                     classes: dict[str, int] | None) -> dict[str, Any] | None:
    if published is None:
        return None
    if classes is None:
        return {"counts": published, "status": "n/a", "notes": []}
    wrong = [f"{c}: published {n}, count {classes[c]}" for c, n in published.items()
             if classes[c] != n]
    return {"counts": published, "status": "mismatch" if wrong else "match", "notes": wrong}


def _counts(result: KernelSass | TorchKernelSass) -> dict[str, Any]:
    return {"classes": result.counts.classes, "loop_classes": result.counts.loop_classes,
            "opcodes": result.counts.opcodes}


def triton_row(result: KernelSass, target: Target, golden_status: str,
               role: str) -> dict[str, Any]:
    """The report row of one Triton compile (see :func:`sass_report` for the row's keys)."""
    counts = _counts(result)
    cfg = result.spec.config
    article_shape = (cfg.block_m, cfg.block_n, cfg.num_warps) == (64, 64, 4)
    published = (PUBLISHED["article"] if result.spec.variant == "article" and article_shape
                 and not target.wgmma else None)
    return {
        "name": golden.kernel_key(result), "kind": "triton", "variant": result.spec.variant,
        "role": role, "config": cfg.as_dict(), "counts": counts,
        "registers": result.resources.registers, "shared_bytes": result.shared_bytes,
        "mma_layouts": result.mma_layouts, "golden": golden_status, "skipped": None,
        "model": _model_entry(*_triton_prediction(result, target), counts),
        "published": _published_entry(published, counts["classes"]),
    }


def torch_row(instance: TorchFlashInstance, target: Target,
              result: TorchKernelSass | None, skipped: str | None) -> dict[str, Any]:
    """The report row of torch's FA2 kernel (``result`` None: ``skipped`` says why)."""
    runs_here = dispatched_instance(target.arch) == instance
    role = (f"torch runs this instance on {target.name}" if runs_here else
            f"the article's instance; torch runs {dispatched_instance(target.arch).label()} "
            f"on {target.name}")
    published = PUBLISHED["torch"] if instance == ARTICLE_INSTANCE else None
    row: dict[str, Any] = {
        "name": f"torch {instance.label()}", "kind": "torch", "variant": "torch", "role": role,
        "config": asdict(instance), "counts": None, "registers": None,
        "shared_bytes": instance.shared_bytes(), "cubin_arch": None, "golden": None,
        "skipped": skipped,
        "model": {"counts": None, "status": "n/a", "notes": []},
        "published": _published_entry(published, None),
    }
    if result is None:
        return row
    counts = _counts(result)
    bodies = model.fa2_loop_bodies(instance.block_m, instance.block_n)
    prediction = model.mma_sync_model(instance.block_m, instance.block_n, instance.head_dim,
                                      *model.FA2_WARPS, p_in_smem=False, loop_bodies=bodies)
    why = [f"FA2: warps 4x1, P in registers, {bodies} loop bodies"]
    row.update(counts=counts, registers=result.resources.registers,
               cubin_arch=result.cubin_arch, model=_model_entry(prediction, why, counts),
               published=_published_entry(published, counts["classes"]))
    return row


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------

def specs_for(targets: Sequence[str], problem: Problem = ARTICLE_PROBLEM) -> list[KernelSpec]:
    """The compiles of a report: per target, ``article`` and ``fwd`` at the article config
    (:data:`flashrepro.configs.ARTICLE`) and ``fwd`` at the production default config when that
    differs."""
    specs = []
    for name in targets:
        default = default_config(problem.head_dim, problem.causal, problem.seqlen_q,
                                 TARGETS[name].arch)
        configs: list[tuple[str, KernelConfig]] = [("article", ARTICLE), ("fwd", ARTICLE)]
        if default != ARTICLE:
            configs.append(("fwd", default))
        specs += [KernelSpec(v, c, name, problem) for v, c in configs]
    return specs


def _role(spec: KernelSpec) -> str:
    default = default_config(spec.problem.head_dim, spec.problem.causal, spec.problem.seqlen_q,
                             TARGETS[spec.target].arch)
    roles = [r for r, cfg in (("article config", ARTICLE), ("production default", default))
             if spec.config == cfg]
    return " = ".join(roles)


def torch_rows(targets: Sequence[str], library: Path | None) -> dict[str, list[dict[str, Any]]]:
    """torch's rows per target: the article's instance and, where it differs, the one torch
    runs there; each skipped with the reason when ``library`` is None or lacks the kernel."""
    skipped = None
    if library is None:
        skipped = (f"torch {torch.__version__} is a CPU build (no libtorch_cuda.so); pass "
                   "--torch-lib PATH to a CUDA build's libtorch_cuda.so")
    memo: dict[tuple[int, TorchFlashInstance], TorchKernelSass] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    for name in targets:
        target = TARGETS[name]
        instances = list(dict.fromkeys([ARTICLE_INSTANCE, dispatched_instance(target.arch)]))
        rows[name] = []
        for inst in instances:
            if library is None:
                rows[name].append(torch_row(inst, target, None, skipped))
                continue
            key = (target.arch, inst)
            try:
                if key not in memo:
                    memo[key] = torch_flash_sass(library, target.arch, inst)
                rows[name].append(torch_row(inst, target, memo[key], None))
            except LookupError as exc:
                rows[name].append(torch_row(inst, target, None, f"skipped: {exc}"))
    return rows


def _check_targets(archs: Sequence[str] | None) -> list[str]:
    targets = list(archs or TARGETS)
    unknown = [a for a in targets if a not in TARGETS]
    if unknown:
        raise ValueError(f"archs must be among {list(TARGETS)}, got {unknown}")
    return targets


def assemble(results: Sequence[KernelSass], torch_by_target: dict[str, list[dict[str, Any]]],
             torch_lib: Path | None, golden_doc: dict[str, Any] | None, golden_path: Path,
             problem: Problem = ARTICLE_PROBLEM) -> dict[str, Any]:
    """Build the report dict of :func:`sass_report` from compiled results and torch rows."""
    targets = list(torch_by_target)
    diffs = golden.compare(golden_doc, results, targets)
    report: dict[str, Any] = {
        "schema": SCHEMA, "triton": triton.__version__, "torch": torch.__version__,
        "torch_lib": None if torch_lib is None else str(torch_lib),
        "tools": tool_versions(), "problem": asdict(problem),
        "golden": {"path": str(golden_path), "ok": not diffs,
                   "diff": [{"target": t, "kernel": k, "lines": lines}
                            for (t, k), lines in sorted(diffs.items())]},
        "targets": {},
    }
    for name in targets:
        target = TARGETS[name]
        rows = []
        for result in (r for r in results if r.spec.target == name):
            key = (name, golden.kernel_key(result))
            status = ("ok" if key not in diffs else
                      "new" if diffs[key] == [golden.NOT_IN_GOLDEN] else "drift")
            rows.append(triton_row(result, target, status, _role(result.spec)))
        report["targets"][name] = {"wgmma": target.wgmma, "rows": rows + torch_by_target[name]}
    return report


def sass_report(archs: Sequence[str] | None = None, torch_lib: Path | None = None,
                golden_path: Path | None = None, workers: int | None = None,
                problem: Problem = ARTICLE_PROBLEM) -> dict[str, Any]:
    """Compile, count, model and compare: the whole SASS report as a JSON-ready dict.

    Args:
        archs: target names from :data:`flashrepro.analysis.sass.TARGETS` (default: all).
        torch_lib: a CUDA build's ``libtorch_cuda.so``; default: the installed torch's, if it
            is a CUDA build (else the torch rows are skipped, saying so).
        golden_path: the golden file (default: ``reproduce/golden/sass-triton-<ver>.json``).
        workers: parallel compile processes (default: CPU count).
        problem: the launch to compile (default: the article's).

    Returns:
        ``{"schema": "flashrepro.sass/1", "triton", "torch", "tools", "problem",
        "golden": {"path", "ok", "diff": [{"target", "kernel", "lines"}]},
        "targets": {name: {"wgmma": bool, "rows": [row, ...]}}}``. A row has ``name``,
        ``kind`` ("triton" | "torch"), ``variant``, ``role``, ``config``, ``counts``
        (``classes``, ``loop_classes``, ``opcodes``; None when skipped), ``registers``,
        ``shared_bytes``, ``golden`` ("ok" | "drift" | "new"; None for torch), ``skipped``
        (reason or None), ``model`` and ``published`` (each ``{"counts", "status", "notes"}``;
        status "match" | "match-in-loops" | "mismatch" | "n/a"; ``published`` None where the
        article has no number).

    Raises:
        ValueError: an unknown arch name.
        RuntimeError: a compile or cuobjdump failed.
    """
    targets = _check_targets(archs)
    path = golden_path or golden.default_path()
    results = kernel_sass(specs_for(targets, problem), workers)
    library = torch_lib or installed_library()
    torch_by_target = torch_rows(targets, library)
    return assemble(results, torch_by_target, library, golden.load(path), path, problem)


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

_SHORT = {"match": "= count", "match-in-loops": "= count in loop bodies",
          "mismatch": "MISMATCH", "n/a": "not modelled"}


def _cells(counts: dict[str, int] | None) -> list[Any]:
    return [("" if counts is None else counts.get(c, "")) for c in CLASS_NAMES]


def _status(entry: dict[str, Any]) -> str:
    text = _SHORT[entry["status"]]
    return f"{text}: {'; '.join(entry['notes'])}" if entry["notes"] else text


def _table_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for row in rows:
        counts = row["counts"]["classes"] if row["counts"] else None
        smem = "" if counts is None else f"{row['shared_bytes'] / 1024:g} KiB"
        if row["skipped"]:
            status = row["skipped"]
        elif row["kind"] == "torch":
            status = f"{row['role']}; cubin {row['cubin_arch']}"
        else:
            status = f"golden {row['golden']}; {row['role']}"
        out.append([row["name"], *_cells(counts), row["registers"] or "", smem, status])
        if row["model"]["counts"] is not None or (row["model"]["notes"] and not row["skipped"]):
            out.append(["└ model", *_cells(row["model"]["counts"]), "", "",
                        _status(row["model"])])
        if row["published"] is not None:
            out.append(["└ article (seed 000)", *_cells(row["published"]["counts"]), "", "",
                        _status(row["published"]) if counts else ""])
    return out


def format_tables(report: dict[str, Any], markdown: bool = False) -> str:
    """One table per arch (plain text, status column wrapped; or GitHub markdown)."""
    headers = ["kernel", *CLASS_NAMES, "regs", "smem", "status"]
    torch_side = report["torch_lib"] or f"torch {report['torch']} (no CUDA library)"
    parts = [f"SASS static counts: triton {report['triton']} (ptxas {report['tools']['ptxas']}); "
             f"torch kernel from {torch_side}; problem {report['problem']}"]
    for name, block in report["targets"].items():
        path = "wgmma" if block["wgmma"] else "mma.sync"
        title = f"{name} ({path})"
        table = tabulate.tabulate(
            _table_rows(block["rows"]), headers=headers,
            tablefmt="github" if markdown else "simple",
            maxcolwidths=None if markdown else [None] * (len(headers) - 1) + [56])
        parts.append(f"### {title}\n\n{table}" if markdown else f"{title}\n{table}")
    g = report["golden"]
    parts.append(f"golden file {g['path']}: " + ("every count matches" if g["ok"] else
                                                 f"{len(g['diff'])} kernel(s) drifted"))
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", action="append", choices=list(TARGETS), dest="archs",
                        help="target to compile for (repeatable; default: all of "
                             f"{', '.join(TARGETS)})")
    parser.add_argument("--update", action="store_true",
                        help="rewrite the golden file with this run's counts (targets run only)")
    parser.add_argument("--golden", type=Path, default=None,
                        help="golden file (default: reproduce/golden/sass-triton-<version>.json)")
    parser.add_argument("--torch-lib", type=Path, default=None,
                        help="libtorch_cuda.so of a CUDA build of torch (default: the installed "
                             "torch's, if it is a CUDA build)")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the tables as GitHub markdown to this file")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the full report (counts by opcode too) as JSON")
    parser.add_argument("--workers", type=int, default=None,
                        help="parallel compile processes (default: CPU count)")


def run(args: argparse.Namespace) -> int:
    """Print the tables; exit 1 on drift against the golden file (0 with ``--update``)."""
    if args.torch_lib is not None and not args.torch_lib.is_file():
        print(f"--torch-lib: no such file: {args.torch_lib}", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print(f"--workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    targets = _check_targets(args.archs)
    path = args.golden or golden.default_path()
    results = kernel_sass(specs_for(targets), args.workers)
    library = args.torch_lib or installed_library()
    torch_by_target = torch_rows(targets, library)
    if args.update:
        header = {"triton": triton.__version__, "tools": tool_versions(),
                  "problem": asdict(ARTICLE_PROBLEM)}
        golden.write(path, golden.build(results, golden.load(path), header))
        print(f"wrote {path}")
    report = assemble(results, torch_by_target, library, golden.load(path), path)
    print(format_tables(report))
    if args.markdown:
        args.markdown.write_text(format_tables(report, markdown=True))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if not report["golden"]["ok"]:
        print(golden.format_diff(report["golden"]["diff"], path), file=sys.stderr)
        return 1
    return 0
