"""SASS counts per arch — flashrepro, the article, torch — against the golden file
(``flashrepro sass``).

Per target arch, without a GPU: the ``article`` and ``fwd`` kernels at the article's launch and
the production default (:mod:`.offline_compile`), torch's FA2 kernel where a CUDA torch is at
hand (:mod:`.torch_sass`); one table per arch with each kernel's counts by class, the model's
prediction (:mod:`.count_model`), the SASS article's numbers and a status. Every Triton count is
compared with the golden file (:mod:`.golden`): the command exits 1 on drift, with a diff;
``--update`` rewrites it. :func:`sass_report` returns it all as a JSON-ready dict.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tabulate
import torch
import triton

from flashrepro.configs import (
    ARTICLE,
    FA3_WS,
    P_IN_REGISTERS,
    TRITON_FALLBACK,
    KernelConfig,
)
from flashrepro.select import STAND_IN_NUM_SMS, default_launch
from flashrepro_harness.analysis import golden
from flashrepro_harness.analysis.disasm import CLASS_NAMES, tool_versions
from flashrepro_harness.analysis.offline_compile import TARGETS, KernelSass, KernelSpec, kernel_sass
from flashrepro_harness.analysis.rows import published_counts, torch_rows, triton_row
from flashrepro_harness.analysis.torch_sass import installed_library
from flashrepro_harness.env import shown_path
from flashrepro_harness.problem import Problem, load_article

SCHEMA = "flashrepro.sass/1"


def _configs(target: str, problem: Problem) -> list[tuple[str, KernelConfig, str]]:
    """(variant, config, role) of one target's compiles: ``article`` and ``fwd`` at the article
    config; ``fwd`` at the production default; where that is a Gluon kernel also it (and
    ``fwd`` at its tiles, or at :data:`~flashrepro.configs.TRITON_FALLBACK`'s for 192 rows); on
    sm_90 ``fwd_gluon_ws`` always (else at :data:`~flashrepro.configs.FA3_WS`); on mma.sync
    targets ``fwd`` at :data:`~flashrepro.configs.P_IN_REGISTERS`."""
    arch = TARGETS[target].arch
    default = default_launch(problem.head_dim, problem.causal, problem.seqlen_q,
                             TARGETS[target].config_arch, problem.batch * problem.heads,
                             STAND_IN_NUM_SMS, problem.seqlen_k)
    if not TARGETS[target].wgmma and default.overlap:
        default = TRITON_FALLBACK  # api.attention runs Gluon on sm_90's wgmma path only
    if default.tma and arch < 90:  # api.attention falls back to pointer loads below sm_90
        default = dataclasses.replace(default, tma=False)
    gluon = default  # where it is a Gluon kernel, also count the Triton kernel at its tiles
    default = (TRITON_FALLBACK if default.three_consumers
               else dataclasses.replace(default, overlap=False, warp_specialize=False,
                                        tile_grid=False, dynamic_schedule=False))
    rows = [("article", ARTICLE, "article config")]
    if default == ARTICLE:
        rows.append(("fwd", ARTICLE, "article config = production default"))
    else:
        role = ("production default: P in registers (warps over rows)"
                if default == P_IN_REGISTERS else "production default")
        if gluon.overlap:
            role = ("Triton kernel where the ws kernel cannot run (TRITON_FALLBACK: 192-row "
                    "tiles are the ws kernel's only)" if default == TRITON_FALLBACK
                    else "Triton kernel at the production default's tiles")
        rows += [("fwd", ARTICLE, "article config"), ("fwd", default, role)]
    if gluon.overlap and not gluon.warp_specialize:
        rows.append(("fwd_gluon", gluon,
                     "production default: Gluon kernel, FA3's softmax/wgmma overlap"))
    if TARGETS[target].wgmma and arch == 90:
        if gluon.warp_specialize:
            rows.append(("fwd_gluon_ws", gluon, "production default: warp-specialized Gluon "
                                                "kernel (FA3's producer, ping-pong, persistent)"))
        else:
            rows.append(("fwd_gluon_ws", FA3_WS, "warp-specialized Gluon kernel (FA3's "
                                                 "128x128 tiles, persistent)"))
    if not TARGETS[target].wgmma and default != P_IN_REGISTERS:
        rows.append(("fwd", P_IN_REGISTERS, "P in registers (warps over rows)"))
    return rows


def specs_for(targets: Sequence[str], problem: Problem) -> list[KernelSpec]:
    """The compiles of a report, per target (see :func:`_configs`)."""
    return [KernelSpec(v, c, t, problem) for t in targets for v, c, _ in _configs(t, problem)]


def _role(spec: KernelSpec) -> str:
    return next(r for v, c, r in _configs(spec.target, spec.problem)
                if (v, c) == (spec.variant, spec.config))


def _check_targets(archs: Sequence[str] | None) -> list[str]:
    targets = list(archs or TARGETS)
    unknown = [a for a in targets if a not in TARGETS]
    if unknown:
        raise ValueError(f"archs must be among {list(TARGETS)}, got {unknown}")
    return targets


def sass_report(archs: Sequence[str] | None = None, torch_lib: Path | None = None,
                golden_path: Path | None = None, workers: int | None = None,
                update: bool = False) -> dict[str, Any]:
    """Compile, count, model and compare: the whole SASS report as a JSON-ready dict.

    Args:
        archs: target names from :data:`flashrepro_harness.analysis.offline_compile.TARGETS`
            (``sm_80``, ``sm_86``, ``sm_89``, ``sm_90``, ``sm_90-mma.sync``; default: all).
        torch_lib: a CUDA build's ``libtorch_cuda.so``; default: the installed torch's, if it
            is a CUDA build (else the torch rows are skipped, saying so).
        golden_path: the golden file (default: ``reproduce/golden/sass-triton-<ver>.json``).
        workers: parallel compile processes (default: CPU count).
        update: first rewrite the golden file's entries for ``archs`` with this run's counts.

    Returns:
        ``{"schema": "flashrepro.sass/1", "triton", "torch", "torch_lib", "tools", "problem",
        "golden": {"path", "ok", "diff": [{"target", "kernel", "lines"}]},
        "targets": {name: {"wgmma": bool, "rows": [row, ...]}}, "text", "markdown"}``.
        ``text``/``markdown``: the tables (compact plain text; every class in markdown). A row
        has ``name``, ``kind`` ("triton" | "torch"), ``variant``, ``role``, ``config``,
        ``counts`` (``classes``, ``loop_classes``, ``opcodes``; None when skipped),
        ``registers`` (per thread), ``shared_bytes`` (per launch), ``mma_layouts``,
        ``cubin_arch``, ``golden`` ("ok" | "drift" | "new"; None for torch), ``skipped``
        (reason or None), ``model`` and ``published`` (``{"counts", "status", "notes"}``, status
        "match" | "match-in-loops" | "mismatch" | "n/a"; ``published`` None without a number).
    Raises:
        ValueError: an unknown arch name.
        FileNotFoundError: ``reproduce/article.toml`` or ``torch_lib`` is missing.
        RuntimeError: a compile or cuobjdump failed.
    """
    targets = _check_targets(archs)
    if torch_lib is not None and not torch_lib.is_file():
        raise FileNotFoundError(f"torch_lib: no such file: {torch_lib}")
    problem, published = load_article()
    numbers = published_counts(published)
    path = golden_path or golden.default_path()
    results = kernel_sass(specs_for(targets, problem), workers)
    library = torch_lib or installed_library()
    by_target = torch_rows(targets, library, numbers)
    if update:
        header = {"triton": triton.__version__, "tools": tool_versions(),
                  "problem": problem.as_dict()}
        golden.write(path, golden.build(results, golden.load(path), header))
    diffs = golden.compare(golden.load(path), results, targets)
    report: dict[str, Any] = {
        "schema": SCHEMA, "triton": triton.__version__, "torch": torch.__version__,
        "torch_lib": None if library is None else str(library),
        "tools": tool_versions(), "problem": problem.as_dict(),
        "golden": {"path": shown_path(path), "ok": not diffs,
                   "diff": [{"target": t, "kernel": k, "lines": lines}
                            for (t, k), lines in sorted(diffs.items())]},
        "targets": {name: {"wgmma": TARGETS[name].wgmma,
                           "rows": [_triton_row(r, diffs, numbers)
                                    for r in results if r.spec.target == name]
                           + by_target[name]}
                    for name in targets},
    }
    report["text"] = format_tables(report)
    report["markdown"] = format_tables(report, markdown=True)
    return report


def _triton_row(result: KernelSass, diffs: dict[tuple[str, str], list[str]],
                numbers: dict[str, dict[str, int]]) -> dict[str, Any]:
    lines = diffs.get((result.spec.target, golden.kernel_key(result)))
    status = "ok" if lines is None else "new" if lines == [golden.NOT_IN_GOLDEN] else "drift"
    return triton_row(result, status, _role(result.spec), numbers)


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

_SHORT = {"match": "= count", "match-in-loops": "= count in loop bodies",
          "mismatch": "MISMATCH", "n/a": "not modelled"}


def _status(entry: dict[str, Any]) -> str:
    text = _SHORT[entry["status"]]
    return f"{text}: {'; '.join(entry['notes'])}" if entry["notes"] else text


COMPACT_CLASSES = ("HMMA", "HGMMA", "LDSM", "LDSM.MT", "LDS", "STS", "MUFU.EX2", "total")
"""The classes of the terminal's default table; the full one (every class of
:data:`~flashrepro_harness.analysis.disasm.CLASS_NAMES`) is in ``--markdown``, ``--json`` and
``--wide``."""
NOTES_WIDTH = 100
"""Characters per line of the compact table's numbered notes and its header lines."""
WIDE_STATUS_WIDTH = 56


def _table_rows(rows: list[dict[str, Any]], classes: Sequence[str]) -> list[list[Any]]:
    def cells(counts: dict[str, int] | None) -> list[Any]:
        return [("" if counts is None else counts.get(c, "")) for c in classes]

    out: list[list[Any]] = []
    for row in rows:
        counts = row["counts"]["classes"] if row["counts"] else None
        smem = "" if counts is None else f"{row['shared_bytes'] / 1024:.1f} KiB"
        if row["skipped"]:
            status = row["skipped"]
        elif row["kind"] == "torch":
            status = f"{row['role']}; cubin {row['cubin_arch']}"
        else:
            status = f"golden {row['golden']}; {row['role']}"
        out.append([row["name"], *cells(counts), row["registers"] or "", smem, status])
        if row["model"]["counts"] is not None or (row["model"]["notes"] and not row["skipped"]):
            out.append(["└ model", *cells(row["model"]["counts"]), "", "",
                        _status(row["model"])])
        if row["published"] is not None:
            out.append(["└ article (published)", *cells(row["published"]["counts"]), "", "",
                        _status(row["published"]) if counts else ""])
    return out


def format_tables(report: dict[str, Any], markdown: bool = False, wide: bool = False) -> str:
    """One table per arch of a :func:`sass_report` dict: GitHub markdown with every class
    (``markdown``), plain text with every class and a wrapped status column (``wide``, about
    235 columns), or by default plain text with :data:`COMPACT_CLASSES` and each status as a
    numbered note under its table (about 120-140 columns: the longest kernel name decides)."""
    full = markdown or wide
    classes = CLASS_NAMES if full else COMPACT_CLASSES
    torch_side = report["torch_lib"] or f"torch {report['torch']} (no CUDA library)"
    head = (f"SASS static counts: triton {report['triton']} (ptxas {report['tools']['ptxas']}); "
            f"torch kernel from {torch_side}; problem {report['problem']}")
    parts = [head if full else textwrap.fill(head, NOTES_WIDTH, subsequent_indent="  ")]
    if not full:
        parts.append(textwrap.fill(
            f"Classes {', '.join(COMPACT_CLASSES[:-1])} and the total of every class; each "
            "class: sass --wide, or the --markdown and --json files.", NOTES_WIDTH))
    for name, block in report["targets"].items():
        title = f"{name} ({'wgmma' if block['wgmma'] else 'mma.sync'})"
        rows = _table_rows(block["rows"], classes)
        if full:
            table = tabulate.tabulate(
                rows, headers=["kernel", *classes, "regs", "smem", "status"],
                tablefmt="github" if markdown else "simple",
                maxcolwidths=None if markdown else [None] * (len(classes) + 3) + [
                    WIDE_STATUS_WIDTH])
            parts.append(f"### {title}\n\n{table}" if markdown else f"{title}\n{table}")
            continue
        notes: dict[str, int] = {}  # the status texts, numbered below the table
        for row in rows:
            text = row[-1]
            row[-1] = f"[{notes.setdefault(text, len(notes) + 1)}]" if text else ""
        table = tabulate.tabulate(rows, headers=["kernel", *classes, "regs", "smem", "note"],
                                  tablefmt="simple")
        listed = "\n".join(textwrap.fill(f"[{i}] {text}", NOTES_WIDTH, subsequent_indent="    ")
                           for text, i in notes.items())
        parts.append(f"{title}\n{table}\n{listed}")
    g = report["golden"]
    parts.append(f"golden file {g['path']}: " + ("every count matches" if g["ok"] else
                                                 f"{len(g['diff'])} kernel(s) drifted"))
    return "\n\n".join(parts) + "\n"
