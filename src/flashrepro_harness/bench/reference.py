"""Another checkout's flashrepro, imported into this process beside the running one.

The gate's paired reference (docs/gate.md): ``reproduce --reference-src DIR`` times the rows of
the commit under test and of a reference commit in the same rounds, on the same tensors, so the
two share everything but their code (a stored baseline's offset: lab/2026-12-01-gate-power/).

The reference's ``flashrepro`` is imported from ``DIR`` under the same module names, with the
running package's modules stepped out of ``sys.modules`` meanwhile; its functions keep their own
globals, so its ``attention`` runs its own validation, plans, configs, table and kernels. Shared:
``flashrepro.ops`` (``torch.library`` defines the namespace once per process; eager timings
never use it) and Triton's compile cache (keyed by source).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from flashrepro_harness.results import REFERENCE_PREFIX as PREFIX

__all__ = ["PREFIX", "Reference", "load"]

PACKAGE = "flashrepro"
SHARED = ("flashrepro.ops",)
"""Modules the reference takes from the running package instead of its own checkout."""


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


@dataclass(frozen=True)
class Reference:
    """A flashrepro package imported from another checkout.

    ``src``: the checkout's resolved ``src`` folder; ``commit``: :func:`_commit`; ``package``:
    its ``flashrepro`` module; ``modules``: every reference module imported, by name.
    """

    src: Path
    commit: str | None
    package: ModuleType
    modules: dict[str, ModuleType] = field(repr=False)

    def attention(self) -> Callable[..., Any]:
        """The reference's :func:`flashrepro.attention`."""
        return self.package.attention

    def article_attention(self) -> Callable[..., Any]:
        """The reference's :func:`flashrepro.article_attention`."""
        return self.package.article_attention

    def config(self, config: Any) -> Any:
        """``config`` (this package's :class:`~flashrepro.configs.KernelConfig`) as the
        reference's own class, which its ``attention`` requires. A field the reference lacks is
        left out where it holds its default.

        Raises:
            ValueError: the reference's KernelConfig has other fields, or lacks one that
                ``config`` sets.
        """
        from dataclasses import asdict, fields

        values = asdict(config)
        known = {f.name for f in fields(self.package.KernelConfig)}
        unknown = {f.name for f in fields(config) if f.name not in known
                   and values[f.name] != f.default}
        if unknown:
            raise ValueError(f"the reference at {self.src} has no KernelConfig field "
                             f"{sorted(unknown)}; the row of {config.label()} cannot be paired")
        try:
            return self.package.KernelConfig(**{k: v for k, v in values.items() if k in known})
        except TypeError as exc:
            raise ValueError(f"the reference at {self.src} has another KernelConfig "
                             f"({exc}); its fixed-config rows cannot be paired") from exc

    def describe(self) -> dict[str, Any]:
        """JSON-ready: ``src`` and ``commit``."""
        return {"src": str(self.src), "commit": self.commit}


@contextmanager
def _stepped_aside() -> Iterator[dict[str, ModuleType]]:
    """Remove the running flashrepro's modules from ``sys.modules`` (the shared ones stay)
    and restore them afterwards; yields the removed ones."""
    own = {k: m for k, m in sys.modules.items() if _ours(k)}
    for k in own:
        if k not in SHARED:
            del sys.modules[k]
    try:
        yield own
    finally:
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(own)


def _git(src: Path, *args: str) -> str:
    """``git args`` run in ``src``: its stdout stripped, "" where git fails or is missing."""
    try:
        proc = subprocess.run(["git", *args], cwd=src, capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _commit(src: Path) -> str | None:
    """``git rev-parse`` in ``src`` where git tracks its ``flashrepro/__init__.py`` (an
    untracked copy is not at the tree's HEAD), else $FLASHREPRO_REFERENCE_COMMIT, else None."""
    import os

    tracked = _git(src, "ls-files", "--", f"{PACKAGE}/__init__.py")
    sha = _git(src, "rev-parse", "--short", "HEAD") if tracked else ""
    return sha or os.environ.get("FLASHREPRO_REFERENCE_COMMIT") or None


def load(src: Path | str) -> Reference:
    """Import the flashrepro package under ``src`` as the reference (module docstring).

    ``src``: another checkout's ``src`` folder (holding ``flashrepro/__init__.py``). The
    running package is left unchanged (``sys.modules`` and ``sys.path`` as before).

    Raises:
        ValueError: ``src`` holds no flashrepro package, or is the running package's folder.
        ImportError: the reference does not import (whatever it raised, type and message
            kept), or one of its modules resolved outside ``src``.
    """
    src = Path(src).resolve()
    if not (src / PACKAGE / "__init__.py").is_file():
        raise ValueError(f"--reference-src must be the src folder of a flashrepro checkout "
                         f"(holding {PACKAGE}/__init__.py), got {src}")
    import flashrepro
    import flashrepro.ops  # defined once per process: the reference shares it

    if Path(flashrepro.__file__).resolve().parent.parent == src:
        raise ValueError(f"--reference-src {src} is the running flashrepro's own folder; give "
                         "another checkout's src (e.g. a `git worktree` of the base commit)")
    with _stepped_aside():
        sys.path.insert(0, str(src))
        importlib.invalidate_caches()
        try:
            package = importlib.import_module(PACKAGE)
            importlib.import_module(f"{PACKAGE}.launch")  # the eager path, fully imported
        except Exception as exc:  # a SyntaxError or a module raising halfway, too
            raise ImportError(f"the reference flashrepro at {src} does not import: "
                              f"{type(exc).__name__}: {exc}") from exc
        finally:
            sys.path.remove(str(src))
            importlib.invalidate_caches()
        modules = {k: m for k, m in sys.modules.items() if _ours(k) and k not in SHARED}
    stray = [k for k, m in modules.items()
             if not Path(getattr(m, "__file__", None) or src).resolve().is_relative_to(src)]
    if stray:
        raise ImportError(f"reference modules {stray} resolved outside {src}")
    return Reference(src=src, commit=_commit(src), package=package, modules=modules)
