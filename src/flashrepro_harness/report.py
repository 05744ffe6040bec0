"""Tables and markdown from a results JSON (nothing here measures anything)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashrepro_harness.outputs import write_atomic

# The article's kernel over torch flash on its mma.sync GPU (the SASS article, docs/article.md)
PUBLISHED_NOTE = "article: 2.14 first version, 1.12 tuned (mma.sync GPU)"


def _published(rec: dict[str, Any], results: dict[str, Any]) -> str:
    """The article's ratios, on article-kernel rows of the article's own problem (its mask)."""
    causal = results["problem"]["causal"]
    if rec["name"].startswith("article-kernel") and rec.get("causal", causal) == causal:
        published = results["published"]
        return f"{published['ratio_first']:.2f} / {published['ratio_tuned']:.2f}"
    return ""


def caption(results: dict[str, Any]) -> str:
    """One paragraph naming the problem, GPU, timer, flush policy and statistic."""
    p, m, e = results["problem"], results["method"], results["env"]
    gpu = e["gpu"] or {}
    return (
        f"B={p['batch']} H={p['heads']} Lq={p['seqlen_q']} Lk={p['seqlen_k']} "
        f"D={p['head_dim']} {p['dtype']} {'causal' if p['causal'] else 'non-causal'} on "
        f"{gpu.get('name', '?')} (driver {gpu.get('driver', '?')}), torch {e['torch']}, "
        f"triton {e['triton']}, {e['date']}. Timer: {m['timer']}; L2: {m['l2']}; "
        f"{m['launch']}. µs = {m['statistic']}, {m['rounds']} rounds x "
        f"{m['calls_per_round']} calls. Ratio < 1 means faster than torch flash."
        + (f" Layouts: {m['layouts']}." if m.get("layouts") else "")
        + (f" {m['host_us']}; {m['eager_us']}." if m.get("host_us") else "")
    )


def _us(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def reproduce_rows(results: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for rec in results["records"]:
        state = next((k for k in ("failed", "skipped") if k in rec), None)
        if state is not None:
            rows.append([rec["name"], "n/a", "", "", "", "", f"{state}: {rec[state]}", "", ""])
            continue
        rows.append([
            rec["name"],
            f"{rec['median_us']:.1f}",
            f"{rec['q25_us']:.1f}-{rec['q75_us']:.1f}",
            f"{rec['tflops']:.0f}",
            f"{rec['ratio_vs_torch_flash']:.3f}" if "ratio_vs_torch_flash" in rec else "",
            _published(rec, results),
            f"{rec['max_abs_err']:.1e}",
            _us(rec.get("host_us")),
            _us(rec.get("eager_us")),
        ])
    return rows


HEADERS = ["kernel", "µs (median)", "IQR of rounds", "TFLOP/s", "vs torch flash",
           "article's ratio", "max |err|", "host µs/call", "eager µs/call"]


def reproduce_table(results: dict[str, Any]) -> str:
    """The reproduce table as plain text for the terminal."""
    return tabulate(reproduce_rows(results), HEADERS, tablefmt="simple") + "\n" + caption(results)


def reproduce_markdown(results: dict[str, Any], sass_text: str | None = None) -> str:
    """The reproduce table (and the SASS table, if given) as a markdown page."""
    parts = ["# Article reproduction", "", caption(results), "",
             tabulate(reproduce_rows(results), HEADERS, tablefmt="github"), "",
             f"'article's ratio': {PUBLISHED_NOTE}. Compare it with the `(mma.sync)` rows, "
             "which run the same instruction path as the article's GPU. `(non-causal)` rows: "
             "the same problem without the causal mask, timed in rounds of their own (TFLOP/s "
             "count all 4·B·H·Lq·Lk·D FLOPs there). 'host µs/call': the CPU time to issue one call "
             "with the GPU kept busy; 'eager µs/call': calls back to back with no busy-wait, "
             "which equals the kernel time when the call is device-bound (method above).", ""]
    if sass_text:
        parts += ["## SASS instruction counts", "", sass_text, ""]
    return "\n".join(parts)


def write_summary(text: str, path: Path | None) -> None:
    """Write markdown ``text`` to ``path`` (when given, atomically) and append it to
    ``$GITHUB_STEP_SUMMARY`` (when set) unless that is ``path`` itself (in the image it is
    ``/results/summary.md``, which the workflow copies into the job summary)."""
    if path is not None:
        write_atomic(path, text)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary and (path is None or Path(step_summary).resolve() != path.resolve()):
        with open(step_summary, "a", encoding="utf-8") as f:
            f.write(text + "\n")
