"""The benchmark's rows, ratios and outputs.

The reported time is the median of the per-round medians, the ratio to the best SDPA backend
that of the medians, with the range of the ratios of each round's medians beside it (round r
of every implementation ran within seconds of each other): a ratio whose range holds 1 is a
tie. ``GPU busy`` (:func:`gpu_busy`) says whether a row measures the GPU or the host.

Outputs under ``--out`` (default ``reproduce/results/<gpu-key>/``): ``model.json`` (with
:func:`flashrepro_harness.env.capture`), ``model.md`` (tabulate) and ``model.png`` (matplotlib)
(:func:`write_results`).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from flashrepro_harness.outputs import replaced_on_success, write_atomic
from flashrepro_harness.qwen3 import IMPLS, MODES, REFERENCE, SDPA_IMPLS
from flashrepro_harness.qwen3.classify import EXPECTED_KERNEL
from flashrepro_harness.results import RESULTS_SCHEMA as SCHEMA

if TYPE_CHECKING:
    from flashrepro_harness.qwen3.build import Shape


def summarize(mode: str, shape: Shape, round_ms: dict[str, list[float]],
              max_abs_diff: dict[str, float], extra: dict[str, dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """One row per implementation: ms (median of round medians), tokens/s, ratio to the best
    SDPA backend's tokens/s (None when no SDPA backend ran), max |Δ| to the reference."""
    rows = []
    for name, samples in round_ms.items():
        ms = statistics.median(samples)
        rows.append({"mode": mode, **asdict(shape), "impl": name, "ms": ms,
                     "round_medians_ms": samples, "tokens_per_s": shape.tokens / (ms * 1e-3),
                     "max_abs_diff_vs_ref": max_abs_diff.get(name), **extra.get(name, {})})
    best = best_sdpa(rows)
    for r in rows:
        r["ratio_to_best_sdpa"] = r["tokens_per_s"] / best["tokens_per_s"] if best else None
    return rows


def best_sdpa(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The SDPA backend's row with the most tokens/s among ``rows`` (one mode and shape), or
    None when no SDPA backend ran there."""
    sdpa = [r for r in rows if r["impl"] in SDPA_IMPLS]
    return max(sdpa, key=lambda r: r["tokens_per_s"]) if sdpa else None


def ratio_round_range(row: dict[str, Any], best: dict[str, Any] | None) -> list[float] | None:
    """[min, max] over rounds of ``row``'s tokens/s over ``best``'s in the same round (the ratio of
    ``best``'s round-median ms to ``row``'s), from the rows' ``round_medians_ms``. Round r of every
    implementation ran within seconds of the others
    (:func:`flashrepro_harness.qwen3.measure.interleave`), so each round's ratio is a side-by-side
    measurement and their range is the ratio's noise: a slow phase of the host that falls on one
    round moves every implementation in it alike. None without ``best`` or rounds."""
    if best is None or not row.get("round_medians_ms"):
        return None
    paired = [b / m for b, m in zip(best["round_medians_ms"], row["round_medians_ms"],
                                    strict=True)]
    return [min(paired), max(paired)]


def ratio_round_ranges(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[float] | None]:
    """:func:`ratio_round_range` of every row against the best SDPA backend of its mode and
    shape, keyed by (mode, batch, seqlen, impl): what the tables show beside each ratio."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["mode"], r["batch"], r["seqlen"]), []).append(r)
    return {(*key, r["impl"]): ratio_round_range(r, best_sdpa(group))
            for key, group in groups.items() for r in group}


def gpu_busy(row: dict[str, Any]) -> float | None:
    """The fraction of a forward's wall time the GPU spent in kernels: the profiled forward's
    kernel µs (``gpu_us``, one stream, so kernels do not overlap) over the row's ms per
    forward. Near 1 the row measures the GPU; far below it the host, which the GPU waits for
    (the short prefill). None when the row was not profiled."""
    gpu_us = row.get("gpu_us")
    return None if gpu_us is None or not row.get("ms") else gpu_us / (row["ms"] * 1e3)


def table(rows: list[dict[str, Any]], fmt: str) -> str:
    """The results table: one line per (mode, shape, implementation)."""
    def num(v: float | None, spec: str) -> str:
        return "n/a" if v is None else format(v, spec)

    def kernel(r: dict[str, Any]) -> str:
        label = r.get("attention_kernel", "not profiled")
        label = f"{label} (MISMATCH)" if r.get("backend_mismatch") else label
        return f"{label} (NOT COMPILED)" if not_compiled(r) else label

    ranges = ratio_round_ranges(rows)

    def spread(r: dict[str, Any]) -> str:
        lo_hi = ranges[(r["mode"], r["batch"], r["seqlen"], r["impl"])]
        return "n/a" if not lo_hi else f"{lo_hi[0]:.3f}-{lo_hi[1]:.3f}"

    body = [[r["mode"], r["batch"], r["seqlen"], r["impl"], kernel(r), num(r["ms"], ".2f"),
             num(r["tokens_per_s"] / 1e3, ".0f"), num(r["ratio_to_best_sdpa"], ".3f"),
             spread(r), num(gpu_busy(r), ".2f"), num(r["max_abs_diff_vs_ref"], ".3g")]
            for r in rows]
    headers = ["mode", "B", "L", "implementation", "attention kernel", "ms / forward",
               "k tokens/s", "/ best SDPA", "per-round range", "GPU busy",
               f"max |Δ logits| vs {REFERENCE}"]
    return tabulate(body, headers, tablefmt=fmt)


def not_compiled(row: dict[str, Any]) -> str | None:
    """Why a compile-mode row is not known to have run compiled layers, else None: dynamo
    compiled no graph for it, or the forward profiled for it (compiled again, as in the timing
    pass, after the timing) ran no kernel of inductor's: dynamo ran the layers eagerly
    (lab/2026-12-03-compiled-layers-fallback/). Rows without these fields (older results) are
    not judged."""
    if row.get("mode") != "compile":
        return None
    if row.get("graphs_compiled") == 0:
        return "dynamo compiled no graph"
    if row.get("inductor_launches") == 0:
        return "the profiled forward ran no inductor kernel"
    return None


def not_compiled_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per compile-mode row that did not time compiled layers (:func:`not_compiled`)."""
    return [f"{r['mode']} B={r['batch']} L={r['seqlen']} {r['impl']}: {why}"
            for r in rows if (why := not_compiled(r))]


def mismatch_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row whose profiled attention kernel is not the one it is named after."""
    return [f"{r['mode']} B={r['batch']} L={r['seqlen']} {r['impl']}: timed "
            f"{r['attention_kernel']!r}, not {EXPECTED_KERNEL[r['impl']]!r} "
            f"(kernels: {', '.join(a['name'][:80] for a in r['attention_kernels']) or 'none'})"
            for r in rows if r.get("backend_mismatch")]


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Grouped bars: tokens/s per shape, one bar per implementation, one panel per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in MODES if any(r["mode"] == m for r in rows)]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4), squeeze=False)
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    for ax, mode in zip(axes.flat, modes, strict=True):
        sel = [r for r in rows if r["mode"] == mode]
        labels = list(dict.fromkeys(f"B={r['batch']} L={r['seqlen']}" for r in sel))
        width = 0.8 / max(1, len(impls))
        for i, impl in enumerate(impls):
            vals = {f"B={r['batch']} L={r['seqlen']}": r["tokens_per_s"] / 1e3
                    for r in sel if r["impl"] == impl}
            xs = [j + i * width for j, lab in enumerate(labels) if lab in vals]
            ax.bar(xs, [vals[lab] for lab in labels if lab in vals], width, label=impl)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels, fontsize=8)
        ax.set_ylabel("k tokens/s (prefill)")
        ax.set_title(mode)
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    with replaced_on_success(path) as tmp:
        fig.savefig(tmp, dpi=110)


def caption(environment: dict[str, Any], layers: int) -> str:
    """The table's and the plot's caption: GPU, versions, date, model and method."""
    gpu = environment["gpu"] or {}
    return (f"{gpu.get('name', 'no GPU')}, torch {environment['torch']}, transformers "
            f"{environment.get('transformers', '?')}, {environment['date']}; Qwen3-0.6B shape "
            f"({layers} layers, GQA 16/8, head_dim 128), random bf16 weights, prefill "
            "model(input_ids, use_cache=False); compile: each decoder layer compiled "
            "(regional); CUDA events per forward, back to back, median of per-round medians; "
            "attention kernel: the one torch.profiler saw in a forward of the row.")


def results_caption(results: dict[str, Any]) -> str:
    """:func:`caption` of a results dict, with the runs a merged one joins."""
    text = caption(results["env"], results["model"]["num_hidden_layers"])
    timing = results.get("method") or {}
    if timing.get("rounds"):
        text += (f" {timing['rounds']} interleaved rounds of {timing.get('calls_per_round', '?')}"
                 " forwards per implementation; per-round range: the ratio to the best SDPA "
                 "backend in each round; GPU busy: the profiled forward's kernel time over the "
                 "row's ms.")
    if results.get("merged_from"):
        text += " Rows from runs " + "; ".join(
            f"{m['modes']} at {m['date']} (commit {m.get('git_commit') or '?'}"
            f"{', ' + NATIVE_NOTE if m.get('native_decode') else ''})"
            for m in results["merged_from"]) + "."
    elif results["env"].get("native_decode"):
        text += f" frepro's attention calls {NATIVE_NOTE}."
    return text


NATIVE_NOTE = "launched from C++ after their first: FLASHREPRO_NATIVE=1"
"""How a caption names a run with :mod:`flashrepro.native` switched on."""


def markdown(results: dict[str, Any]) -> str:
    """``model.md``: caption, table, backend mismatches, what was left out."""
    rows, errors, skipped = results["rows"], results["errors"], results["skipped"]
    notes = "".join(f"\n- {k}: {v}" for k, v in {**skipped, **errors}.items())
    mismatches = "".join(f"\n- **{n}**" for n in mismatch_notes(rows))
    eager = "".join(f"\n- **{n}**" for n in not_compiled_notes(rows))
    return (f"# Qwen3 prefill\n\n{results_caption(results)}\n\n{table(rows, 'github')}\n"
            + (f"\n**Backend mismatch** (the row timed another attention kernel than its name "
               f"says):{mismatches}\n" if mismatches else "")
            + (f"\n**Not compiled** (a compile row whose layers ran eagerly):{eager}\n"
               if eager else "")
            + (f"\nLeft out:{notes}\n" if notes else ""))


def write_results(out_dir: Path, results: dict[str, Any]) -> None:
    """``model.json``, ``model.md`` (:func:`markdown`) and ``model.png`` (:func:`plot`, needs
    matplotlib: the ``plot`` extra) under ``out_dir`` from a results dict (what ``flashrepro
    model`` measures or :func:`merge` joins)."""
    write_atomic(out_dir / "model.json", json.dumps(results, indent=1, default=str) + "\n")
    write_atomic(out_dir / "model.md", markdown(results))
    if results["rows"]:
        plot(results["rows"], out_dir / "model.png", results_caption(results))


def _setup(env_block: dict[str, Any]) -> dict[str, Any]:
    """What runs must share to be merged into one table: the GPU model and the software."""
    return {"gpu": (env_block.get("gpu") or {}).get("name"),
            **{k: env_block.get(k) for k in ("torch", "triton", "transformers")}}

MERGE_KEYS = {"env": dict, "model": dict, "method": dict, "rows": list, "errors": dict,
              "skipped": dict}
"""Top-level keys of a ``model.json`` that :func:`merge` reads, with their JSON types."""

ROW_KEYS = ("mode", "batch", "seqlen", "impl")


def check_part_header(part: Any, name: str, kind: str) -> None:
    """Raise ValueError naming ``name`` where ``part`` is not a results dict of ``kind``
    (``model`` or ``generate``) that a merge can read: schema, kind, :data:`MERGE_KEYS` and a
    GPU."""
    if not isinstance(part, dict) or part.get("schema") != SCHEMA or part.get("kind") != kind:
        got = ((part.get("schema"), part.get("kind")) if isinstance(part, dict)
               else type(part).__name__)
        raise ValueError(f"--merge: {name} is not a {kind} results JSON (schema {SCHEMA!r}, "
                         f"kind {kind!r}; got {got!r})")
    for key, type_ in MERGE_KEYS.items():
        if not isinstance(part.get(key), type_):
            raise ValueError(f"--merge: {name} has no {key!r} {type_.__name__}")
    if not isinstance(part["env"].get("gpu"), dict) or not part["env"]["gpu"].get("key"):
        raise ValueError(f"--merge: {name} has no env.gpu with a 'key' (a run without a GPU)")


def check_timings(row: dict[str, Any], name: str, n: int) -> None:
    """Every time of a row (``ms`` and the keys ending in ``_ms``): a finite number > 0, or a
    non-empty list of them (per-round medians); else a ValueError naming the file and row."""
    def positive(v: Any) -> bool:
        return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and v > 0)

    for key, value in row.items():
        if key == "ms" or key.endswith("_ms"):
            ok = (positive(value) if not isinstance(value, list)
                  else bool(value) and all(positive(v) for v in value))
            if not ok:
                raise ValueError(f"--merge: {name} row {n} has {key} {value!r}: times are "
                                 "finite numbers > 0 (or non-empty lists of them)")


def _check_part(part: Any, name: str) -> None:
    """:func:`check_part_header` for a model results dict, then rows of known modes and
    positive times (:func:`check_timings`)."""
    check_part_header(part, name, "model")
    for n, r in enumerate(part["rows"]):
        if not isinstance(r, dict) or any(k not in r for k in ROW_KEYS):
            raise ValueError(f"--merge: {name} row {n} lacks one of {list(ROW_KEYS)}")
        if r["mode"] not in MODES:
            raise ValueError(f"--merge: {name} row {n} has mode {r['mode']!r}, not one of "
                             f"{list(MODES)}")
        check_timings(r, name, n)


def merge(parts: list[dict[str, Any]], names: list[str] | None = None) -> dict[str, Any]:
    """Join the rows of several ``model.json`` results of one machine and setup (e.g. the
    eager and the compiled rows, measured in separate runs to fit a time limit) into one.

    Args:
        parts: the parsed ``model.json`` files.
        names: what the messages call each part (its path); default ``file <i>``.

    Raises:
        ValueError: not model results (a key of :data:`MERGE_KEYS` or of a row missing, an
            unknown mode), fewer than two, another GPU, software, model config or timing
            method, or a (mode, B, L, implementation) row in two of them; each names its file.
    """
    if len(parts) < 2:
        raise ValueError("--merge needs at least two model.json files")
    if names is not None and len(names) != len(parts):
        raise ValueError(f"merge: {len(names)} names for {len(parts)} parts")
    label = names or [f"file {i}" for i in range(len(parts))]
    for i, part in enumerate(parts):
        _check_part(part, label[i])
    first = parts[0]
    for i, part in enumerate(parts):
        want, got = _setup(first["env"]), _setup(part["env"])
        key = next((k for k in want if got[k] != want[k]), None)
        if key is not None:
            raise ValueError(f"--merge: {label[i]} has {key} {got[key]!r}, {label[0]} "
                             f"{want[key]!r}")
        if part["model"] != first["model"]:
            raise ValueError(f"--merge: {label[i]} has another model config than {label[0]}")
        if part["method"] != first["method"]:
            raise ValueError(f"--merge: {label[i]} has another timing method than {label[0]}")
    rows: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for i, part in enumerate(parts):
        for r in part["rows"]:
            key = (r["mode"], r["batch"], r["seqlen"], r["impl"])
            if key in seen:
                raise ValueError(f"--merge: row {key} is in more than one file ({label[i]})")
            seen.add(key)
            rows.append(r)
    order = {m: i for i, m in enumerate(MODES)}
    rows.sort(key=lambda r: order[r["mode"]])  # stable: each run's shape order is kept
    return {**first, "rows": rows,
            "errors": {k: v for p in parts for k, v in p["errors"].items()},
            "skipped": {k: v for p in parts for k, v in p["skipped"].items()},
            "merged_from": [{"date": p["env"].get("date"), "git_commit": p["env"].get(
                "git_commit"), "modes": sorted({r["mode"] for r in p["rows"]}),
                "native_decode": bool(p["env"].get("native_decode"))}
                for p in parts]}
