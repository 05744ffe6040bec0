"""Smoke test of an installed flashrepro (a wheel in a fresh venv, outside the checkout).

Run by ``nox -s wheel`` from a temporary folder, with ``TRITON_INTERPRET=1`` set before the
import (the kernels then run on the CPU under Triton's interpreter), after ``pip install`` of
the wheel without extras. It shows that

1. flashrepro is imported from the installed package, not from a checkout;
2. the wheel requires torch, triton and numpy and nothing else without an extra, and nothing
   else is installed than those three, what they require (recursively) and pip: the harness's
   dependencies (extra ``harness``) are not;
3. ``default_config(128, True, 1024, 90)`` is the tuned table's ``sm90-d128-causal-l1024``
   entry, with the table read from the installed package's data (``importlib.resources``),
   so the wheel carries ``tuned.json`` and the lookup uses it (the per-arch rule off the
   table gives 64x64 w4 s3 there, not the table's entry);
4. ``flashrepro.attention`` on a small float16 causal problem writes every element of a
   NaN-poisoned ``out`` and is within 2x torch SDPA's max error + 1e-3 of a float64
   reference (the parity rule of tests/reference.py, on fresh random inputs);
5. the wheel carries the C++ source that ``FLASHREPRO_NATIVE=1`` builds (flashrepro.native).

Exit 0 and one line per check on success; an AssertionError otherwise.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
from importlib import metadata, resources
from pathlib import Path

if os.environ.get("TRITON_INTERPRET") != "1":
    sys.exit("smoke_wheel: set TRITON_INTERPRET=1 (before Python starts)")

import torch

import flashrepro
from flashrepro.configs import KernelConfig, default_config

KEY = "sm90-d128-causal-l1024"
FLOOR_FP16 = 1e-3
RUNTIME = {"torch", "triton", "numpy"}
"""The library's dependencies (pyproject.toml's ``dependencies``)."""


def check_installed() -> None:
    where = Path(flashrepro.__file__).resolve()
    assert "site-packages" in where.parts, f"flashrepro imported from {where}, not a venv"
    assert not (where.parents[2] / "pyproject.toml").exists(), f"{where} is in a checkout"
    print(f"installed: flashrepro {metadata.version('flashrepro')} at {where.parent}")


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement string (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def _unconditional(distribution: str) -> set[str]:
    """The requirements of ``distribution`` that no extra asks for (other markers, such as
    python_version, count as met: the closure may only grow)."""
    return {_name(r) for r in metadata.requires(distribution) or []
            if "extra" not in r.partition(";")[2]}


def check_dependencies() -> None:
    requires = _unconditional("flashrepro")
    assert requires == RUNTIME, f"flashrepro requires {sorted(requires)}, not {sorted(RUNTIME)}"
    closure, todo = set(), list(requires)
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        with contextlib.suppress(metadata.PackageNotFoundError):  # a marker not met here
            todo += _unconditional(name)
    installed = {_name(d.metadata["Name"]) for d in metadata.distributions()}
    extra = installed - closure - {"flashrepro", "pip"}
    assert not extra, f"installed beyond torch, triton, numpy and their requirements: {extra}"
    harness = {_name(r) for r in metadata.requires("flashrepro") or []
               if 'extra == "harness"' in r}
    assert harness and not harness & installed, harness & installed
    print(f"dependencies: {', '.join(sorted(requires))}; installed: {len(installed)} "
          f"distributions, all of them these three, their requirements, flashrepro and pip; "
          f"not {', '.join(sorted(harness))} (extra harness)")


def check_table() -> None:
    data = resources.files("flashrepro").joinpath("tuned.json").read_text()
    entry = json.loads(data)[KEY]
    got = default_config(128, True, 1024, 90)
    assert got == KernelConfig(**entry), f"default_config(128, True, 1024, 90) = {got}, " \
                                         f"table {KEY} = {entry}"
    print(f"table: default_config(128, True, 1024, 90) = {got.label()} = tuned.json[{KEY!r}]")


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax(q kᵀ / sqrt(D)) v in float64 (top-left aligned, Lq = Lk here)."""
    q, k, v = (t.double() for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    return torch.softmax(s.masked_fill(~mask, -math.inf), dim=-1) @ v


def check_native_source() -> None:
    from flashrepro import native

    assert native.SOURCE.is_file(), f"the wheel lacks {native.SOURCE}"
    assert "PYBIND11_MODULE" in native.SOURCE.read_text()
    included = {line.split('"')[1] for line in native.SOURCE.read_text().splitlines()
                if line.startswith('#include "')}
    assert included <= {h.name for h in native.HEADERS}, f"the wheel lacks {included}"
    print(f"native: {native.SOURCE.name} installed")


def check_attention() -> None:
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    q, k, v = (torch.randn(1, 2, 48, 32, dtype=torch.float16) for _ in range(3))
    out = torch.full_like(q, math.nan)
    o = flashrepro.attention(q, k, v, causal=True, out=out)
    assert torch.isfinite(o).all(), "unwritten (NaN) or non-finite output elements"
    ref = reference(q, k, v)
    err = (o.double() - ref).abs().max().item()
    peer = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    peer_err = (peer.double() - ref).abs().max().item()
    assert err <= 2 * peer_err + FLOOR_FP16, \
        f"max |o - ref| = {err:.3g} > 2 x SDPA's {peer_err:.3g} + {FLOOR_FP16}"
    print(f"attention: (1, 2, 48, 32) float16 causal, max |o - ref| = {err:.2g} "
          f"(SDPA {peer_err:.2g})")


if __name__ == "__main__":
    check_installed()
    check_dependencies()
    check_table()
    check_native_source()
    check_attention()
    print("smoke_wheel: ok")
