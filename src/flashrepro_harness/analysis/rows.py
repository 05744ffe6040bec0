"""The SASS report's rows: one kernel's counts next to the model's prediction and the article's.

A row is a JSON-ready dict (keys listed in :func:`flashrepro_harness.analysis.sass.sass_report`).
The model (:mod:`flashrepro_harness.analysis.count_model`) is checked class by class against the
count; where it matches only the loop bodies, or does not apply, the row says why in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import triton

from flashrepro_harness.analysis import count_model, golden
from flashrepro_harness.analysis.disasm import CLASSES
from flashrepro_harness.analysis.offline_compile import TARGETS, KernelSass, Target
from flashrepro_harness.analysis.torch_sass import (
    ARTICLE_INSTANCE,
    TorchFlashInstance,
    TorchKernelSass,
    dispatched_instance,
    torch_flash_sass,
)


def published_counts(published: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The SASS article's static counts by kernel and class (``reproduce/article.toml``'s
    ``[published]``): its Triton kernel (``article``) and torch's FA2 kernel, D=128, 64x64
    tiles, 4 warps, causal fp16, mma.sync GPU."""
    return {"article": {"HMMA": published["triton_hmma"], "LDSM": published["triton_ldsm"]},
            "torch": {"HMMA": published["torch_hmma"], "LDSM": published["torch_ldsm"],
                      "LDSM.MT": published["torch_ldsm_mt"]}}


def compare_model(prediction: count_model.Prediction, classes: dict[str, int],
                  loop_classes: dict[str, int]) -> tuple[str, list[str]]:
    """Compare a model prediction with a kernel's counts, class by modelled class.

    Returns:
        (status, notes): ``match`` (every total equals the count), ``match-in-loops`` (some
        only inside the loop bodies; a note gives the rest) or ``mismatch`` (notes list them).
    """
    notes, wrong = [], []
    for cls in count_model.MODELLED_CLASSES:
        total, in_loops = classes[cls], loop_classes[cls]
        if prediction.total[cls] == total:
            continue
        if prediction.in_loops[cls] == in_loops:
            notes.append(f"{cls}: {total - in_loops} outside the loop bodies (prologue/"
                         "epilogue code, which the per-stage model does not cover)")
        else:
            wrong.append(f"{cls}: model {prediction.total[cls]} ({prediction.in_loops[cls]} "
                         f"in loops), count {total} ({in_loops} in loops)")
    if wrong:
        return "mismatch", wrong + notes
    return ("match-in-loops" if notes else "match"), notes


def _model_entry(prediction: count_model.Prediction | None, reason: list[str],
                 counts: dict[str, Any]) -> dict[str, Any]:
    if prediction is None:
        return {"counts": None, "loop_counts": None, "status": "n/a", "notes": reason}
    status, notes = compare_model(prediction, counts["classes"], counts["loop_classes"])
    return {"counts": prediction.total, "loop_counts": prediction.in_loops, "status": status,
            "notes": reason + notes}


def _triton_prediction(result: KernelSass,
                       target: Target) -> tuple[count_model.Prediction | None, list[str]]:
    cfg, d = result.spec.config, triton.next_power_of_2(result.spec.problem.head_dim)
    layouts = result.mma_layouts
    try:
        if result.spec.variant == "fwd_gluon_ws":
            return (count_model.gluon_ws_model(cfg.block_n, d, cfg.consumers),
                    [f"{cfg.consumers} consumer warpgroups, each its own code: wgmma m64nNk16 S_0, "
                     "then S_j and P_{j-1}·V_{j-1} per loop body, then the last P·V, all in the "
                     "loop over tiles; P from registers"])
        if result.spec.variant == "fwd_gluon":
            return (count_model.gluon_overlap_model(cfg.block_m, cfg.block_n, d, cfg.num_warps),
                    ["wgmma m64nNk16: S_0, then S_j and P_{j-1}·V_{j-1} per loop body, "
                     "then the last P·V; P from registers"])
        if target.wgmma:
            if not any(lay["version"] == 3 for lay in layouts):
                return None, [f"no wgmma layout in the TTGIR ({layouts}): Triton did not use "
                              "wgmma here, the wgmma model does not apply"]
            return (count_model.wgmma_model(cfg.block_m, cfg.block_n, d, cfg.num_warps,
                                      count_model.TRITON_LOOP_BODIES),
                    ["wgmma m64nNk16 per warpgroup, P from registers"])
        v2 = [lay for lay in layouts if lay["version"] == 2]
        if len(v2) != 1:
            return None, [f"the TTGIR has {len(v2)} mma.sync layouts ({layouts}); the model "
                          "assumes one warp grid shared by both products"]
        wm, wn = v2[0]["warps"]
        p_smem = count_model.p_through_smem(wn)
        q_in_loop = not any(load["operand"] == 0 and not load["in_loop"]
                            for load in result.operand_loads)
        q_route = "reloaded in every loop body" if q_in_loop else "loaded once, before the loops"
        return (count_model.mma_sync_model(cfg.block_m, cfg.block_n, d, wm, wn, p_smem,
                                     count_model.TRITON_LOOP_BODIES, q_in_loop),
                [f"warps {wm}x{wn}, so P goes through "
                 f"{'shared memory' if p_smem else 'registers'}; Q {q_route} (from the TTGIR)"])
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
    """Class counts (all, in loops), the opcodes of the classes and the named barriers used;
    the full opcode table is in the golden file."""
    ops = {op: n for op, n in result.counts.opcodes.items()
           if any(pred(op) for pred in CLASSES.values())}
    return {"classes": result.counts.classes, "loop_classes": result.counts.loop_classes,
            "opcodes": ops, "barriers": result.counts.barriers}


def triton_row(result: KernelSass, golden_status: str, role: str,
               published: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The row of one Triton compile; ``golden_status``: ``ok``, ``drift`` or ``new``. The
    published ``article`` numbers apply to the article variant at 64x64, 4 warps, mma.sync."""
    target = TARGETS[result.spec.target]
    counts = _counts(result)
    cfg = result.spec.config
    article_shape = (cfg.block_m, cfg.block_n, cfg.num_warps) == (64, 64, 4)
    article = (published["article"] if result.spec.variant == "article" and article_shape
               and not target.wgmma else None)
    return {
        "name": golden.kernel_key(result), "kind": "triton", "variant": result.spec.variant,
        "role": role, "config": cfg.as_dict(), "counts": counts,
        "registers": result.resources.registers, "shared_bytes": result.shared_bytes,
        "mma_layouts": result.mma_layouts, "cubin_arch": None, "golden": golden_status,
        "skipped": None, "model": _model_entry(*_triton_prediction(result, target), counts),
        "published": _published_entry(article, counts["classes"]),
    }


def torch_row(instance: TorchFlashInstance, target: Target, result: TorchKernelSass | None,
              skipped: str | None, published: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The row of torch's FA2 kernel (``result`` None: ``skipped`` says why); the ``torch``
    published numbers apply to the article's instance (FA2 is mma.sync on every arch)."""
    runs_here = dispatched_instance(target.arch) == instance
    role = (f"torch runs this instance on {target.name}" if runs_here else
            f"the article's instance; torch runs {dispatched_instance(target.arch).label()} "
            f"on {target.name}")
    article = published["torch"] if instance == ARTICLE_INSTANCE else None
    row: dict[str, Any] = {
        "name": f"torch {instance.label()}", "kind": "torch", "variant": "torch", "role": role,
        "config": asdict(instance), "counts": None, "registers": None,
        "shared_bytes": instance.shared_bytes(), "mma_layouts": None, "cubin_arch": None,
        "golden": None, "skipped": skipped,
        "model": {"counts": None, "loop_counts": None, "status": "n/a", "notes": []},
        "published": _published_entry(article, None),
    }
    if result is None:
        return row
    counts = _counts(result)
    bodies = count_model.fa2_loop_bodies(instance.block_m, instance.block_n)
    prediction = count_model.mma_sync_model(instance.block_m, instance.block_n, instance.head_dim,
                                      *count_model.FA2_WARPS, p_in_smem=False, loop_bodies=bodies)
    why = [f"FA2: warps 4x1, P in registers, {bodies} loop bodies"]
    row.update(counts=counts, registers=result.resources.registers,
               cubin_arch=result.cubin_arch, model=_model_entry(prediction, why, counts),
               published=_published_entry(article, counts["classes"]))
    return row


def torch_rows(targets: Sequence[str], library: Path | None,
               published: dict[str, dict[str, int]]) -> dict[str, list[dict[str, Any]]]:
    """torch's rows per target: the article's instance and, where it differs, the one torch
    runs there; each skipped with the reason when ``library`` is None or lacks the kernel."""
    skipped = None
    if library is None:
        skipped = (f"skipped: torch {torch.__version__} is a CPU build (no libtorch_cuda.so); "
                   "pass --torch-lib PATH to a CUDA build's libtorch_cuda.so")
    memo: dict[tuple[int, TorchFlashInstance], TorchKernelSass] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    for name in targets:
        target = TARGETS[name]
        rows[name] = []
        for inst in dict.fromkeys([ARTICLE_INSTANCE, dispatched_instance(target.arch)]):
            if library is None:
                rows[name].append(torch_row(inst, target, None, skipped, published))
                continue
            key = (target.arch, inst)
            try:
                if key not in memo:
                    memo[key] = torch_flash_sass(library, target.arch, inst)
                rows[name].append(torch_row(inst, target, memo[key], None, published))
            except LookupError as exc:
                rows[name].append(torch_row(inst, target, None, f"skipped: {exc}", published))
    return rows
