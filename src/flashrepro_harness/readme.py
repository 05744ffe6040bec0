"""README.md's tables, generated from the committed results JSON
(``reproduce/results/<gpu>/reproduce.json``, and ``model.json`` for the Qwen3 prefill table).

Each table sits between ``<!-- begin: NAME -->`` and ``<!-- end: NAME -->`` in README.md;
``flashrepro readme --write`` replaces what is there, ``--check`` exits 1 when it differs
(:mod:`flashrepro_harness.commands.readme`; tests/test_readme.py runs the check). Rows and
columns come from the data: every record timed is a row (a record named ``fa4-cute`` appears
as one), and the optional per-record fields ``host_us`` (host µs per call) and ``eager_us``
(µs per call, eager back to back) become columns once any record has them.
"""

from __future__ import annotations

import re
from typing import Any

from tabulate import tabulate

from flashrepro_harness.paths import checkout_path
from flashrepro_harness.qwen3.tables import gpu_busy, ratio_round_ranges
from flashrepro_harness.results import MMA_SYNC, NON_CAUSAL, REFERENCE_PREFIX, same_commit

README = checkout_path("README.md")
RESULTS = checkout_path("reproduce", "results", "nvidia-h200", "reproduce.json")
MODEL_RESULTS = RESULTS.with_name("model.json")
MODES = {"": "causal", NON_CAUSAL: "non-causal", MMA_SYNC: "mma.sync, causal"}
"""Record-name suffix (:data:`flashrepro_harness.results.SUFFIXES`) -> the column group it
fills."""
OPTIONAL = {"host_us": "host µs", "eager_us": "eager µs"}
SASS_CLASSES = ("HMMA", "LDSM", "LDSM.MT")
SASS_TARGET = "sm_80"
"""The article's instruction set (mma.sync, the article's RTX GPU class)."""


def _split(name: str) -> tuple[str, str]:
    """``"flashrepro (non-causal)"`` -> ``("flashrepro", " (non-causal)")``."""
    for suffix in MODES:
        if suffix and name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def headline(results: dict[str, Any]) -> str:
    """The article-config table: one row per kernel, for each mode its µs and its time ratio to
    torch flash in the same rounds; optional fields as extra columns of the causal mode. The
    gate's reference twins (``reference:<name>``, docs/gate.md) are left out. A record marked
    ``skipped`` (a peer that does not import here) or ``failed`` shows that word in its µs cell.

    Raises KeyError if a timed record lacks ``name``, ``median_us`` or
    ``ratio_vs_torch_flash``."""
    rows: dict[str, dict[str, Any]] = {}
    modes = [s for s in MODES if any(_split(r["name"])[1] == s for r in results["records"])]
    extra = [k for k in OPTIONAL if any(k in r for r in results["records"])]
    for record in results["records"]:
        if record["name"].startswith(REFERENCE_PREFIX):  # the gate's twins: not a kernel row
            continue
        base, suffix = _split(record["name"])
        key = base if suffix != " (mma.sync)" else f"{base} (mma.sync)"
        row = rows.setdefault(key, {"kernel": key})
        row[suffix] = record
    headers = ["kernel"]
    for suffix in modes:
        if suffix == " (mma.sync)":
            continue
        headers += [f"{MODES[suffix]} µs", f"{MODES[suffix]} ratio"]
    headers += [OPTIONAL[k] for k in extra]
    table = []
    for key, row in rows.items():
        line = [f"`{key}`"]
        for suffix in modes:
            if suffix == " (mma.sync)":
                continue
            rec = row.get(suffix) or (row.get(" (mma.sync)") if suffix == "" else None)
            state = next((k for k in ("failed", "skipped") if rec and k in rec), None)
            if state:
                line += [state, ""]
                continue
            line += [_num(rec["median_us"]) if rec else "",
                     _num(rec["ratio_vs_torch_flash"], 3) if rec else ""]
        first = next(v for k, v in row.items() if k != "kernel")
        line += [_num(first.get(k)) for k in extra]
        table.append(line)
    return tabulate(table, headers=headers, tablefmt="github", disable_numparse=True)


def sass(results: dict[str, Any]) -> str:
    """The SASS counts on :data:`SASS_TARGET` (whole kernel), each beside the article's where it
    states one (``published`` of the row). Raises KeyError without a ``sass`` section."""
    table = []
    for row in results["sass"]["targets"][SASS_TARGET]["rows"]:
        counts = (row.get("counts") or {}).get("classes", {})
        published = (row.get("published") or {}).get("counts") or {}
        line = [f"`{row['name']}`"]
        for cls in SASS_CLASSES:
            said = published.get(cls)
            line.append(f"{counts.get(cls, '')}" + (f" ({said})" if said is not None else ""))
        table.append(line)
    headers = ["kernel", *(f"{c} (article)" for c in SASS_CLASSES)]
    return tabulate(table, headers=headers, tablefmt="github", disable_numparse=True)


def setup(results: dict[str, Any]) -> str:
    """One line: the GPU, driver, versions, date and commit of the run, and its gate verdict
    (with the reference commit it was paired with, "the same commit (A/A)" when it is the
    run's own, or that the reference's commit was not recorded)."""
    env = results["env"]
    gpu = env.get("gpu") or {}
    gate = results.get("gate") or {}
    verdict = (f", gate {gate['status'].upper()} (exit {gate['exit_code']})"
               if "status" in gate else "")
    reference = results.get("reference") or {}
    ref = reference.get("commit")
    if verdict and ref:  # a reference of the run's own commit can only pass: say so
        own = env.get("git_commit")  # the full hash; a reference's may be short
        same = isinstance(own, str) and same_commit(ref, own)
        verdict += " paired with the same commit (A/A)" if same else f" paired with {ref}"
    elif verdict and reference.get("src"):  # a copy without .git: say what is unknown
        verdict += " paired with a reference checkout of unrecorded commit"
    fa4 = f", FA4 {env['flash_attn_4']}" if env.get("flash_attn_4") else ""
    host = (env.get("cpu") or {}).get("model")
    fa4 += f", host CPU {host}" if host else ""  # host µs hold for this CPU
    return (f"GPU: one {gpu.get('name', '?')}, driver {gpu.get('driver', '?')}, torch "
            f"{env['torch']}, triton {env['triton']}{fa4}; {env['date'][:10]}, commit "
            f"{env.get('git_commit') or '?'}{verdict}.")


def model(data: dict[str, Any]) -> str:
    """The Qwen3 prefill table: per mode and shape, thousands of tokens/s of each
    implementation and flashrepro's tokens/s over the best SDPA backend's (higher is better),
    with the range of its per-round ratios
    (:func:`flashrepro_harness.qwen3.tables.ratio_round_ranges`,
    from the rows' round medians) and the share of frepro's forward the GPU was busy
    (:func:`flashrepro_harness.qwen3.tables.gpu_busy`); an implementation that did not run there is
    blank."""
    impls = list(dict.fromkeys(r["impl"] for r in data["rows"]))
    shapes = list(dict.fromkeys((r["mode"], r["batch"], r["seqlen"]) for r in data["rows"]))
    cell = {(r["mode"], r["batch"], r["seqlen"], r["impl"]): r for r in data["rows"]}
    ranges = ratio_round_ranges(data["rows"])
    table = []
    ranged = False
    for mode, b, length in shapes:
        line = [mode, f"{b} x {length}"]
        for impl in impls:
            r = cell.get((mode, b, length, impl))
            line.append(_num(r["tokens_per_s"] / 1e3, 0) if r else "")
        mine = cell.get((mode, b, length, "frepro")) or {}
        ratio = _num(mine.get("ratio_to_best_sdpa"), 3) if mine else ""
        spread = ranges.get((mode, b, length, "frepro"))
        if spread:
            ratio += " ({}-{})".format(*(_num(x, 3) for x in spread))
            ranged = True
        busy = gpu_busy(mine) if mine else None
        line += [ratio, "" if busy is None else _num(busy, 2)]
        table.append(line)
    headers = ["mode", "B x L", *(f"{i} k tok/s" for i in impls),  # the range where one is
               "frepro / best SDPA" + (" (per-round range)" if ranged else ""), "frepro GPU busy"]
    return tabulate(table, headers=headers, tablefmt="github", disable_numparse=True)


TABLES = {"setup": setup, "headline": headline, "sass": sass}
MODEL_TABLES = {"model": model}


def _replace(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- begin: {name} -->\n).*?(<!-- end: {name} -->)", re.S)
    match = pattern.search(text)
    if match is None:
        raise ValueError(f"README has no <!-- begin: {name} --> ... <!-- end: {name} -->")
    return text[: match.end(1)] + body + "\n" + text[match.start(2):]


def render(text: str, results: dict[str, Any], model_results: dict[str, Any] | None = None
           ) -> str:
    """``text`` with each marked table replaced by its generated form (the model tables only
    when ``model_results`` is given).

    Raises ValueError when a table's markers are missing."""
    for name, make in TABLES.items():
        text = _replace(text, name, make(results))
    for name, make in MODEL_TABLES.items() if model_results is not None else ():
        text = _replace(text, name, make(model_results))
    return text
