"""Imports run one way (docs/design.md): the library (src/flashrepro) never imports the
harness (src/flashrepro_harness), and inside each no subpackage imports, directly or through
others, a subpackage that imports it. Read from the source with ``ast`` (every ``import`` and
``from ... import``, including those inside functions), and checked once by importing."""

from __future__ import annotations

import ast
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "flashrepro"
HARNESS = SRC / "flashrepro_harness"


def packages(root: Path = PACKAGE) -> list[str]:
    """The subpackages of ``root``: its folders with an ``__init__.py``."""
    return sorted(p.parent.name for p in root.glob("*/__init__.py"))


def imported_modules(path: Path) -> set[str]:
    """Every module named by an absolute import in ``path`` (``from a import b`` gives ``a``
    and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}: relative import; the graph reads absolute imports only")
    return names


def package_graph(root: Path = PACKAGE) -> dict[str, dict[str, set[str]]]:
    """``{package: {imported package: {importing module, ...}}}`` between the subpackages of
    ``root``, from every import statement of every module in them."""
    names = set(packages(root))
    graph: dict[str, dict[str, set[str]]] = {name: {} for name in names}
    for name in names:
        for path in (root / name).rglob("*.py"):
            module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
            for target in imported_modules(path):
                parts = target.split(".")
                if len(parts) > 1 and parts[0] == root.name and parts[1] in names \
                        and parts[1] != name:
                    graph[name].setdefault(parts[1], set()).add(module)
    return graph


def find_cycle(edges: dict[str, set[str]] | dict[str, dict[str, set[str]]]) -> list[str] | None:
    """One cycle of the directed graph ``edges`` (node -> successors) as ``[a, b, ..., a]``,
    or None when it has none (depth-first search, three colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"a"}, "c": set()}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_graph_reads_imports_inside_functions(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    for name in ("low", "high"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
    (root / "low" / "m.py").write_text("def f():\n    from pkg.high import g\n")
    (root / "high" / "g.py").write_text("import pkg.low.m\n")
    graph = package_graph(root)
    assert graph == {"low": {"high": {"pkg.low.m"}}, "high": {"low": {"pkg.high.g"}}}
    assert find_cycle(graph) == ["high", "low", "high"]


def test_library_never_imports_the_harness() -> None:
    offenders = sorted(str(path.relative_to(SRC)) for path in PACKAGE.rglob("*.py")
                       if any(m.split(".")[0] == HARNESS.name for m in imported_modules(path)))
    assert not offenders, f"the library imports {HARNESS.name}: {offenders}"


def test_importing_the_library_loads_no_harness_module() -> None:
    code = ("import sys, flashrepro, flashrepro.ops, flashrepro.launch, flashrepro.api; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('flashrepro_harness', 'scipy', 'tabulate')))")  # tqdm: torch's own
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("root,expected", [(PACKAGE, {"kernels", "integrations"}),
                                           (HARNESS, {"analysis", "bench", "gate"})])
def test_no_cycle_between_packages(root: Path, expected: set[str]) -> None:
    assert expected <= set(packages(root))
    graph = package_graph(root)
    cycle = find_cycle(graph)
    if cycle is not None:
        why = "; ".join(f"{a} -> {b} in {', '.join(sorted(graph[a][b]))}"
                        for a, b in itertools.pairwise(cycle))
        raise AssertionError(f"import cycle {' -> '.join(cycle)}: {why}")
