"""The committed SASS golden file: load, build, compare with a readable diff, write.

Path: ``reproduce/golden/sass-triton-<triton version>.json`` (the SASS depends on Triton's
compiler and its bundled ptxas, so each Triton version has its own file). Shape::

    {"schema": "flashrepro.sass-golden/1", "triton": "3.6.0",
     "tools": {"ptxas": "...", "cuobjdump": "..."}, "problem": {...},
     "kernels": {"sm_80": {"article 64x64 w4 s3": {
         "variant": "article", "config": {...}, "classes": {"HMMA": 256, ...},
         "opcodes": {"HMMA.16816.F32": 256, ...}, "registers": 255, "shared_bytes": 90112}}}}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import triton

from flashrepro_harness.analysis.offline_compile import KernelSass
from flashrepro_harness.outputs import write_atomic
from flashrepro_harness.paths import GOLDEN_DIR

SCHEMA = "flashrepro.sass-golden/1"
MAX_OPCODE_LINES = 12  # per kernel; the class lines above them already say what moved
NOT_IN_GOLDEN = "not in the golden file"


def default_path(triton_version: str | None = None) -> Path:
    """``reproduce/golden/sass-triton-<version>.json`` in this checkout."""
    version = triton_version or triton.__version__
    return GOLDEN_DIR / f"sass-triton-{version}.json"


def kernel_key(result: KernelSass) -> str:
    """``"<variant> <config label>"``, e.g. ``"article 64x64 w4 s3"``."""
    return f"{result.spec.variant} {result.spec.config.label()}"


def entry(result: KernelSass) -> dict[str, Any]:
    """The golden record of one compile (what the comparison checks)."""
    return {"variant": result.spec.variant, "config": result.spec.config.as_dict(),
            "classes": result.counts.classes, "opcodes": result.counts.opcodes,
            "registers": result.resources.registers, "shared_bytes": result.shared_bytes}


def build(results: Iterable[KernelSass], base: dict[str, Any] | None,
          header: dict[str, Any]) -> dict[str, Any]:
    """A golden document holding ``results``, other targets kept from ``base`` (or None);
    ``header``: its ``triton``, ``tools`` and ``problem`` entries."""
    kernels: dict[str, dict[str, Any]] = {}
    for r in results:
        kernels.setdefault(r.spec.target, {})[kernel_key(r)] = entry(r)
    merged = dict((base or {}).get("kernels", {}))
    merged.update(kernels)
    return {"schema": SCHEMA, **header, "kernels": dict(sorted(merged.items()))}


ENTRY_TYPES = (("classes", dict), ("opcodes", dict), ("registers", int), ("shared_bytes", int))
"""The fields a golden kernel entry must hold, with their types (:func:`entry`)."""


def load(path: Path) -> dict[str, Any] | None:
    """The golden document at ``path``, or None when there is none.

    Raises:
        ValueError: the file is not a golden document of this schema, or an entry lacks a
            field of :data:`ENTRY_TYPES`.
    """
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ValueError(f"{path}: JSON nested too deeply to read") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"{path} has schema {found!r}, expected {SCHEMA!r}")
    kernels = doc.get("kernels")
    if not isinstance(kernels, dict) or not all(isinstance(v, dict) for v in kernels.values()):
        raise ValueError(f"{path}: 'kernels' must map each target to an object of kernels")
    for target, entries in kernels.items():
        for name, e in entries.items():
            if not (isinstance(e, dict) and all(isinstance(e.get(f), t) for f, t in ENTRY_TYPES)):
                raise ValueError(f"{path}: kernels[{target!r}][{name!r}] must hold "
                                 + ", ".join(f"{f} ({t.__name__})" for f, t in ENTRY_TYPES))
    return doc


def write(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as stable, diff-friendly JSON (sorted keys, one value per line),
    atomically (:func:`flashrepro_harness.outputs.write_atomic`)."""
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _delta(name: str, old: int | None, new: int | None) -> str:
    if old is None:
        return f"{name}: new, now {new}"
    if new is None:
        return f"{name}: golden {old}, now absent"
    return f"{name}: golden {old}, now {new} ({new - old:+d})"


def diff_entry(golden: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Readable differences between two golden records: classes, registers, shared memory, then
    at most :data:`MAX_OPCODE_LINES` opcodes (with a count of the rest)."""
    lines = [_delta(c, golden["classes"].get(c), current["classes"].get(c))
             for c in dict.fromkeys([*golden["classes"], *current["classes"]])
             if golden["classes"].get(c) != current["classes"].get(c)]
    for field, label in (("registers", "registers/thread"), ("shared_bytes", "shared bytes")):
        if golden[field] != current[field]:
            lines.append(_delta(label, golden[field], current[field]))
    ops = [_delta(op, golden["opcodes"].get(op), current["opcodes"].get(op))
           for op in sorted({*golden["opcodes"], *current["opcodes"]})
           if golden["opcodes"].get(op) != current["opcodes"].get(op)]
    lines += [f"opcode {line}" for line in ops[:MAX_OPCODE_LINES]]
    if len(ops) > MAX_OPCODE_LINES:
        lines.append(f"... and {len(ops) - MAX_OPCODE_LINES} more opcodes changed")
    return lines


def compare(golden: dict[str, Any] | None, results: Iterable[KernelSass],
            targets: Iterable[str]) -> dict[tuple[str, str], list[str]]:
    """Differences between fresh compiles and the golden document, for the targets run.

    Returns ``{(target, kernel key): [diff lines]}`` for each kernel of ``targets`` that
    differs, is new, or is in the golden file but not compiled now; empty when all match.
    """
    kernels = (golden or {}).get("kernels", {})
    current: dict[tuple[str, str], dict[str, Any]] = {
        (r.spec.target, kernel_key(r)): entry(r) for r in results}
    out: dict[tuple[str, str], list[str]] = {}
    for (target, key), now in current.items():
        old = kernels.get(target, {}).get(key)
        if old is None:
            out[(target, key)] = [NOT_IN_GOLDEN]
        elif lines := diff_entry(old, now):
            out[(target, key)] = lines
    for target in targets:
        for key in kernels.get(target, {}):
            if (target, key) not in current:
                out[(target, key)] = ["in the golden file but not compiled now (config changed?)"]
    return out


def format_diff(diff: list[dict[str, Any]], path: Path) -> str:
    """The report's ``golden.diff`` as text, one block per kernel, then how to accept it."""
    blocks = [f"SASS drift against {path}:"]
    for d in diff:
        blocks.append(f"  {d['target']}  {d['kernel']}")
        blocks += [f"      {line}" for line in d["lines"]]
    blocks.append("If the change is intended: python -m flashrepro_harness sass --update "
                  "(then commit the golden file).")
    return "\n".join(blocks)
