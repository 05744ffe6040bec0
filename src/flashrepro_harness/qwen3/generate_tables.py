"""The generate() benchmark's rows, ratios and outputs (:mod:`flashrepro_harness.qwen3.generate`
measures them).

Two sections of rows. ``generate``: one row per (mode, B, implementation) with the prefill's
and the decode loop's per-round ms, their medians and tokens/s (prefill: B·prompt tokens per
prefill; decode: B·steps tokens per decode loop, one token per sequence and step), each
implementation's ratio to the best SDPA backend of its mode and B (the backend with the most
tokens/s by median), the decode ratio in each round paired with that backend's (round r of
every implementation ran side by side): its median and range, and the share of generated
tokens that agree with the reference's. ``packed``: one row per (layout, implementation) of
the packed-sequence prefill, tokens/s counting real tokens only, the ratio to the best SDPA
backend on the padded batch.

Outputs: ``generate.json``, ``generate.md`` (tabulate) and ``generate.png`` (matplotlib).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashrepro_harness.qwen3.tables import check_part_header, check_timings
from flashrepro_harness.results import RESULTS_SCHEMA

SCHEMA = RESULTS_SCHEMA
"""The ``schema`` of a ``generate.json`` (the harness's results schema)."""
GEN_IMPLS = ("frepro", "sdpa-cudnn", "sdpa-flash", "sdpa-efficient", "fa4")
"""Every implementation the generate() benchmark knows, in table order."""

GEN_SDPA = ("sdpa-cudnn", "sdpa-flash", "sdpa-efficient")
"""The torch SDPA backends: each row's ratios are to the fastest of them in its group."""

GEN_MODES = ("eager", "static")
"""eager: DynamicCache, eager forwards; static: StaticCache, the decode step compiled with
``mode="reduce-overhead"`` (CUDA graphs)."""

LAYOUTS = ("packed", "padded")
"""The packed-sequence prefill: sequences concatenated in one row, or one row each, padded."""


def summarize_generate(mode: str, batch: int, prompt: int, steps: int,
                       round_ms: dict[str, list[tuple[float, float]]],
                       agreement: dict[str, float | None],
                       extra: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of one (mode, B) group from each implementation's per-round (prefill ms, decode
    ms), with tokens/s, ratios to the best SDPA backend and the decode ratio's round range."""
    rows = []
    for impl, samples in round_ms.items():
        prefill = [p for p, _ in samples]
        decode = [d for _, d in samples]
        p_ms, d_ms = statistics.median(prefill), statistics.median(decode)
        rows.append({"section": "generate", "mode": mode, "batch": batch, "prompt": prompt,
                     "decode_steps": steps, "impl": impl, "prefill_round_ms": prefill,
                     "decode_round_ms": decode, "prefill_ms": p_ms, "decode_ms": d_ms,
                     "prefill_tokens_per_s": batch * prompt / (p_ms * 1e-3),
                     "decode_tokens_per_s": batch * steps / (d_ms * 1e-3),
                     "agreement": agreement.get(impl), **extra.get(impl, {})})
    add_ratios(rows)
    return rows


def summarize_packed(round_ms: dict[tuple[str, str], list[float]], tokens: int,
                     padded_tokens: int) -> list[dict[str, Any]]:
    """Rows of the packed-sequence prefill from each (layout, implementation)'s per-round ms;
    tokens/s counts the ``tokens`` of the sequences, padding not."""
    rows = []
    for (layout, impl), samples in round_ms.items():
        ms = statistics.median(samples)
        rows.append({"section": "packed", "layout": layout, "impl": impl, "round_ms": samples,
                     "ms": ms, "tokens": tokens,
                     "padded_tokens": padded_tokens if layout == "padded" else tokens,
                     "tokens_per_s": tokens / (ms * 1e-3)})
    add_ratios(rows)
    return rows


def _group(row: dict[str, Any]) -> tuple[Any, ...]:
    if row["section"] == "generate":
        return ("generate", row["mode"], row["batch"])
    return ("packed",)


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    if row["section"] == "generate":
        return ("generate", row["mode"], row["batch"], row["impl"])
    return ("packed", row["layout"], row["impl"])


def _best(rows: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    sdpa = [r for r in rows if r["impl"] in GEN_SDPA]
    return max(sdpa, key=lambda r: r[metric]) if sdpa else None


def _per_round(row: dict[str, Any], best: dict[str, Any] | None,
               samples: str) -> list[float] | None:
    """Each round's best ms over the row's (its tokens/s ratio), rounds paired as they ran."""
    if best is None or not row.get(samples) or len(best[samples]) != len(row[samples]):
        return None
    return [b / m for b, m in zip(best[samples], row[samples], strict=True)]


def _round_range(row: dict[str, Any], best: dict[str, Any] | None,
                 samples: str) -> list[float] | None:
    """[min, max] of :func:`_per_round`."""
    paired = _per_round(row, best, samples)
    return None if paired is None else [min(paired), max(paired)]


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Set each row's ratios to the best SDPA backend of its group (None without one)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_group(r), []).append(r)
    for group in groups.values():
        if group[0]["section"] == "generate":
            best_p = _best(group, "prefill_tokens_per_s")
            best_d = _best(group, "decode_tokens_per_s")
            for r in group:
                r["prefill_ratio_to_best_sdpa"] = (
                    r["prefill_tokens_per_s"] / best_p["prefill_tokens_per_s"] if best_p
                    else None)
                r["decode_ratio_to_best_sdpa"] = (
                    r["decode_tokens_per_s"] / best_d["decode_tokens_per_s"] if best_d
                    else None)
                paired = _per_round(r, best_d, "decode_round_ms")
                r["decode_ratio_range"] = [min(paired), max(paired)] if paired else None
                r["decode_ratio_round_median"] = (statistics.median(paired) if paired
                                                  else None)
        else:
            best = _best([r for r in group if r["layout"] == "padded"], "tokens_per_s")
            for r in group:
                r["ratio_to_best_sdpa"] = (r["tokens_per_s"] / best["tokens_per_s"] if best
                                           else None)
                r["ratio_range"] = _round_range(r, best, "round_ms")


def _num(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def _ratio(value: float | None, spread: list[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" ({spread[0]:.3f}-{spread[1]:.3f})" if spread else "")


def table_generate(rows: list[dict[str, Any]], fmt: str) -> str:
    """One line per (mode, B, implementation) of the generate section."""
    order = {m: i for i, m in enumerate(GEN_MODES)}
    sel = sorted((r for r in rows if r["section"] == "generate"),
                 key=lambda r: (order.get(r["mode"], 9), r["batch"],
                                GEN_IMPLS.index(r["impl"]) if r["impl"] in GEN_IMPLS else 9))
    body = [[r["mode"], r["batch"], r["impl"], _num(r["prefill_tokens_per_s"] / 1e3, ".1f"),
             _num(r["prefill_ratio_to_best_sdpa"], ".3f"), _num(r["decode_tokens_per_s"], ".0f"),
             _num(r["decode_ratio_to_best_sdpa"], ".3f"),
             _ratio(r.get("decode_ratio_round_median"), r.get("decode_ratio_range")),
             _num(r["decode_ms"] / r["decode_steps"], ".2f"), _num(r.get("agreement"), ".2f"),
             _num(r.get("step_agreement"), ".3f")]
            for r in sel]
    headers = ["mode", "B", "implementation", "prefill k tok/s", "prefill / best SDPA",
               "decode tok/s", "decode / best SDPA", "per round: median (range)",
               "ms / decode step",
               "tokens agree", "step agreement"]
    return tabulate(body, headers, tablefmt=fmt)


def table_packed(rows: list[dict[str, Any]], fmt: str) -> str:
    """One line per (layout, implementation) of the packed-sequence prefill."""
    sel = [r for r in rows if r["section"] == "packed"]
    body = [[r["layout"], r["impl"], _num(r["tokens_per_s"] / 1e3, ".1f"),
             _ratio(r["ratio_to_best_sdpa"], r.get("ratio_range")), _num(r["ms"], ".2f"),
             r["tokens"], r["padded_tokens"]] for r in sel]
    headers = ["layout", "implementation", "k tok/s", "/ best SDPA padded (per-round range)",
               "ms / prefill", "tokens", "tokens with padding"]
    return tabulate(body, headers, tablefmt=fmt)


def caption(results: dict[str, Any]) -> str:
    """GPU, versions, date, model and method of a results dict (merged runs named)."""
    env, method = results["env"], results.get("method") or {}
    gpu = env.get("gpu") or {}
    text = (f"{gpu.get('name', 'no GPU')}, torch {env.get('torch')}, transformers "
            f"{env.get('transformers', '?')}, {env.get('date')}; Qwen3-0.6B shape "
            f"({results['model'].get('num_hidden_layers')} layers, GQA 16/8, head_dim 128), "
            f"random bf16 weights; greedy generation of {method.get('new_tokens')} tokens "
            f"after a {method.get('prompt')}-token prompt without padding (prefill: one "
            "forward over the prompt, logits of the last position; decode: one forward per "
            "token); eager: DynamicCache; static: StaticCache, decode step torch.compile("
            "mode='reduce-overhead'), prefill eager as in generate(); CUDA events around each "
            f"forward (decode: their sum), {method.get('rounds')} rounds after a warm-up, "
            "median; a round of the eager mode runs the implementations' generations in "
            "lockstep (each forward followed by the same forward of the others, order "
            "rotated, each from an idle GPU), a round of the static mode one generation of "
            "each in turn. Tokens agree: share of generated tokens before the first that "
            f"differs from {method.get('reference')}'s (eager, same B). Step agreement: the "
            "share of positions where the implementation, fed the reference's tokens (teacher "
            "forcing), picks the reference's next token.")
    if results.get("merged_from"):
        text += " Rows from runs " + "; ".join(
            f"{m['date']} (commit {m.get('git_commit') or '?'}"
            f"{' with changes' if m.get('git_modified') else ''}"
            f"{', ' + _NATIVE_NOTE if m.get('native_decode') else ''})"
            for m in results["merged_from"]) + "."
    elif env.get("native_decode"):
        text += f" frepro's eager attention calls {_NATIVE_NOTE}."
    return text


_NATIVE_NOTE = "launched from C++: FLASHREPRO_NATIVE=1"
"""How a caption names a run with flashrepro.native's launches switched on."""


def markdown(results: dict[str, Any]) -> str:
    """``generate.md``: caption, the two tables, what was left out and why."""
    rows = results["rows"]
    method = results.get("method") or {}
    notes = "".join(f"\n- {k}: {v}" for k, v in {**results["skipped"],
                                                  **results["errors"]}.items())
    packed = ""
    if any(r["section"] == "packed" for r in rows):
        packed = (f"\n## Packed-sequence prefill\n\n{method.get('packed', '')}\n\n"
                  f"{table_packed(rows, 'github')}\n")
    return (f"# Qwen3 generate()\n\n{caption(results)}\n\n{table_generate(rows, 'github')}\n"
            + packed + (f"\nLeft out:{notes}\n" if notes else ""))


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Bars: prefill and decode tokens/s per (mode, B), one bar per implementation; the packed
    prefill's tokens/s per (layout, implementation)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gen = [r for r in rows if r["section"] == "generate"]
    packed = [r for r in rows if r["section"] == "packed"]
    panels = [("prefill_tokens_per_s", "prefill k tok/s", 1e3),
              ("decode_tokens_per_s", "decode tok/s", 1.0)] if gen else []
    fig, axes = plt.subplots(1, len(panels) + bool(packed),
                             figsize=(5.5 * (len(panels) + bool(packed)), 4), squeeze=False)
    impls = [i for i in GEN_IMPLS if any(r["impl"] == i for r in gen)]
    groups = list(dict.fromkeys((r["mode"], r["batch"]) for r in gen))
    width = 0.8 / max(1, len(impls))
    for ax, (metric, label, scale) in zip(axes.flat, panels, strict=False):
        for i, impl in enumerate(impls):
            vals = {(r["mode"], r["batch"]): r[metric] / scale for r in gen
                    if r["impl"] == impl}
            xs = [j + i * width for j, g in enumerate(groups) if g in vals]
            ax.bar(xs, [vals[g] for g in groups if g in vals], width, label=impl)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))],
                      [f"{m} B={b}" for m, b in groups], fontsize=8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    if packed:
        ax = axes.flat[-1]
        labels = [f"{r['impl']}\n{r['layout']}" for r in packed]
        ax.bar(range(len(packed)), [r["tokens_per_s"] / 1e3 for r in packed],
               color=["C0" if r["layout"] == "packed" else "C1" for r in packed])
        ax.set_xticks(range(len(packed)), labels, fontsize=7)
        ax.set_ylabel("packed prefill k tok/s (real tokens)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=7, wrap=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_results(out_dir: Path, results: dict[str, Any]) -> None:
    """``generate.json``, ``generate.md`` and ``generate.png`` (with rows) under ``out_dir``;
    the ratios computed again from the rows' rounds (merged or older files get every field)."""
    add_ratios(results["rows"])
    (out_dir / "generate.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out_dir / "generate.md").write_text(markdown(results))
    if results["rows"]:
        plot(results["rows"], out_dir / "generate.png", caption(results)[:400])


def _check_part(part: Any, name: str) -> None:
    """:func:`~flashrepro_harness.qwen3.tables.check_part_header` for a generate results dict,
    then each row's section keys, mode and times (:func:`~flashrepro_harness.qwen3.tables.
    check_timings`)."""
    check_part_header(part, name, "generate")
    for n, r in enumerate(part["rows"]):
        need = (("section", "mode", "batch", "impl") if isinstance(r, dict)
                and r.get("section") == "generate" else ("section", "layout", "impl"))
        if not isinstance(r, dict) or any(k not in r for k in need):
            raise ValueError(f"--merge: {name} row {n} lacks one of {list(need)}")
        if r["section"] == "generate" and r["mode"] not in GEN_MODES:
            raise ValueError(f"--merge: {name} row {n} has mode {r['mode']!r}, not one of "
                             f"{list(GEN_MODES)}")
        check_timings(r, name, n)


def _setup(env: dict[str, Any]) -> dict[str, Any]:
    return {"gpu": (env.get("gpu") or {}).get("name"),
            **{k: env.get(k) for k in ("torch", "triton", "transformers")}}


def merge(parts: list[dict[str, Any]], names: list[str] | None = None) -> dict[str, Any]:
    """Join the rows of several ``generate.json`` results of one machine and setup (e.g. the
    eager and the static mode measured in separate runs).

    Every group of rows compared with each other (a mode and B; the packed prefill) must come
    from one file: its ratios pair rounds that ran side by side. The files' methods may differ
    only in their round counts (each row keeps its own rounds; the merged method names each
    run's) and in which one measured the packed prefill.

    Raises:
        ValueError: not generate results, fewer than two, another GPU, software, model or
            method, the packed prefill in two files, a row in two files, or a group split
            between files; each names its file.
    """
    if len(parts) < 2:
        raise ValueError("--merge needs at least two generate.json files")
    label = names or [f"file {i}" for i in range(len(parts))]
    if len(label) != len(parts):
        raise ValueError(f"merge: {len(label)} names for {len(parts)} parts")
    for part, name in zip(parts, label, strict=True):
        _check_part(part, name)
    first = parts[0]
    for part, name in zip(parts, label, strict=True):
        want, got = _setup(first["env"]), _setup(part["env"])
        key = next((k for k in want if got[k] != want[k]), None)
        if key is not None:
            raise ValueError(f"--merge: {name} has {key} {got[key]!r}, {label[0]} "
                             f"{want[key]!r}")
        if part["model"] != first["model"]:
            raise ValueError(f"--merge: {name} has another model config than {label[0]}")
        differs = {k for k in {*part["method"], *first["method"]}
                   if part["method"].get(k) != first["method"].get(k)}
        if differs - {"rounds", "packed"}:
            raise ValueError(f"--merge: {name} has another method than {label[0]} "
                             f"({', '.join(sorted(differs))})")
    packed = [p["method"]["packed"] for p in parts if p["method"].get("packed")]
    if len(packed) > 1:
        raise ValueError("--merge: more than one file measured the packed-sequence prefill")
    rows: list[dict[str, Any]] = []
    owner: dict[tuple[Any, ...], str] = {}
    seen: set[tuple[Any, ...]] = set()
    for part, name in zip(parts, label, strict=True):
        for r in part["rows"]:
            key, group = _key(r), _group(r)
            if key in seen:
                raise ValueError(f"--merge: row {key} is in more than one file ({name})")
            if owner.setdefault(group, name) != name:
                raise ValueError(f"--merge: the rows of {group} are split between "
                                 f"{owner[group]} and {name} (their ratios pair rounds of "
                                 "one run)")
            seen.add(key)
            rows.append(r)
    rounds = [p["method"].get("rounds") for p in parts]
    method = {**first["method"], "packed": packed[0] if packed else None,
              "rounds": rounds[0] if len(set(rounds)) == 1
              else " / ".join(map(str, rounds)) + " (by run, in the order below)"}
    measured = {r["impl"] for r in rows}
    skipped: dict[str, str] = {}
    for part, name in zip(parts, label, strict=True):
        for k, v in part["skipped"].items():  # an implementation another run measured:
            skipped[f"{k} (in {name})" if k in measured else k] = v  # say where it was not
    return {**first, "method": method, "rows": rows,
            "errors": {k: v for p in parts for k, v in p["errors"].items()},
            "skipped": skipped,
            "merged_from": [{"date": p["env"].get("date"),
                             "git_commit": p["env"].get("git_commit"),
                             "git_modified": p["env"].get("git_modified"),
                             "native_decode": bool(p["env"].get("native_decode"))}
                            for p in parts]}
