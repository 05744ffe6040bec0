"""Check or smoke-run the lab record's rerun commands (each ``lab/*/README.md``'s ``## Rerun``
section: one fenced ``bash`` block, then a ``Needs:`` line).

    PYTHONPATH=src:. python3 scripts/lab_rerun.py --check                 # CPU, seconds
    PYTHONPATH=src:. python3 scripts/lab_rerun.py --run --out DIR [--deadline-s 240]

``--check``: every script a command names exists; Python scripts byte-compile and their
imports resolve (``lab.probes.*`` names by reading the probe's source, other modules by
importing them with ``src`` and the repository root on the path: nothing touches a GPU); shell
scripts pass ``bash -n``, and the lab Python files they run are checked the same way. Exit 1
listing each failure with its folder and reason.

``--run``: each folder's block in a fresh ``bash`` (``set -eo pipefail``) from the repository
root with ``FLASHREPRO_LAB_SMOKE=1`` (``lab/probes/smoke.py``) and ``OUT=DIR/<folder>``,
``--timeout-s`` each and ``--deadline-s`` in all; a folder whose ``Needs:`` names what this
machine lacks (a GPU, ``ncu``) is reported as such, not run. Writes ``DIR/lab_rerun.json`` and
``DIR/lab_rerun.md`` and prints the table last. Exit 1 if any command that ran failed.
``--jobs N`` runs N folders at once on the one machine, the longest smoke first (each
``Needs:`` line's "smoke: about ..." estimate): it answers whether each command still runs, in
a fraction of the serial time; the numbers such a run prints are not measurements (the folders
share the GPU and the CPUs).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import py_compile
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "lab"
SCRIPT_RE = re.compile(r"(?<![\w/.$-])((?:lab|scripts|tests)/[\w./-]+\.(?:sh|py))\b")
STEP_FAILED_RE = re.compile(r"\brc=([1-9]\d*)\b")


@dataclass
class Rerun:
    """One folder's ``## Rerun`` section: ``commands`` (the block's lines, comments and blank
    lines included, as written) and ``needs`` (the ``Needs:`` line's text)."""

    folder: str
    commands: list[str]
    needs: str

    @property
    def runnable(self) -> list[str]:
        """The block's lines that are not comments or blank."""
        return [c for c in self.commands if c.strip() and not c.lstrip().startswith("#")]


def parse_readme(folder: str, text: str) -> Rerun:
    """The ``## Rerun`` section of one README. Raises ``ValueError`` naming the folder when the
    section, its ``bash`` block or its ``Needs:`` line is missing, or there are two blocks."""
    m = re.search(r"^## Rerun[ \t]*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        raise ValueError(f"{folder}: no '## Rerun' section")
    section = m.group(1)
    blocks = re.findall(r"^```bash[ \t]*\n(.*?)^```[ \t]*$", section, re.S | re.M)
    if len(blocks) != 1:
        raise ValueError(f"{folder}: the Rerun section must hold one ```bash block, has "
                         f"{len(blocks)}")
    needs = re.search(r"^Needs:\s*(.+)$", section, re.M)
    if not needs:
        raise ValueError(f"{folder}: the Rerun section has no 'Needs:' line")
    return Rerun(folder, blocks[0].rstrip("\n").split("\n"), needs.group(1).strip())


def load(lab: Path = LAB) -> list[Rerun]:
    """Every experiment folder's :class:`Rerun` (folders ``lab/<date>-<topic>/`` with a
    README; ``lab/probes`` is not one). Raises ``ValueError`` as :func:`parse_readme`."""
    return [parse_readme(p.parent.name, p.read_text())
            for p in sorted(lab.glob("[0-9]*-*/README.md"))]


def _scripts(lines: list[str]) -> list[str]:
    return [m.group(1) for line in lines for m in SCRIPT_RE.finditer(line)]


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # the parent is a module, not a package
        return False


def _check_import(module: str, names: list[str], root: Path) -> str | None:
    """Why ``from module import names`` fails, or None."""
    top = module.split(".")[0]
    if top == "lab":
        path = root / (module.replace(".", "/") + ".py")
        package = root / module.replace(".", "/")
        if package.is_dir():  # from lab.probes import smoke, ws_probe
            missing = [n for n in names if not (package / f"{n}.py").is_file()]
            return f"no module {module}.{missing[0]}" if missing else None
        if not path.is_file():
            return f"no module {module} ({path.relative_to(root)})"
        defined = _module_names(ast.parse(path.read_text()))
        missing = [n for n in names if n not in defined]
        return f"{module} has no {', '.join(missing)}" if missing else None
    if top in ("flashrepro", "tests"):
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # the reason is the report
            return f"import {module}: {type(exc).__name__}: {exc}"
        missing = [n for n in names if not hasattr(mod, n) and not _is_module(f"{module}.{n}")]
        return f"{module} has no {', '.join(missing)}" if missing else None
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"module {top} not installed"


def check_python(path: Path, root: Path = ROOT) -> list[str]:
    """Why ``path`` would not start: a syntax error or an unresolvable import (empty: fine).
    Imports of a file beside it (``import ws_before``) must exist beside it."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            py_compile.compile(str(path), cfile=str(Path(tmp) / "x.pyc"), doraise=True)
        except py_compile.PyCompileError as exc:
            return [f"does not compile: {exc.msg.strip().splitlines()[-1]}"]
    tree = ast.parse(path.read_text())
    top_level = {id(n) for n in tree.body}
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found = [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found = [(node.module, [a.name for a in node.names if a.name != "*"])]
        else:
            continue
        for module, names in found:
            if module == "__future__":
                continue
            if (path.parent / f"{module.split('.')[0]}.py").is_file():
                continue
            ours = module.split(".")[0] in ("lab", "flashrepro", "tests")
            if not ours and id(node) not in top_level:
                continue  # an optional dependency imported where it is used (flash_attn)
            beside = not ours and importlib.util.find_spec(module.split(".")[0]) is None
            if beside:
                problems.append(f"imports {module}, found neither beside it nor installed")
                continue
            reason = _check_import(module, names, root)
            if reason:
                problems.append(reason)
    return problems


def check(reruns: list[Rerun], root: Path = ROOT) -> list[tuple[str, str]]:
    """(folder, reason) for every failure of ``--check`` (see the module docstring)."""
    for p in (str(root / "src"), str(root)):
        if p not in sys.path:
            sys.path.insert(0, p)
    failures: list[tuple[str, str]] = []
    for r in reruns:
        for line in r.commands:
            if "lab/" in line and not SCRIPT_RE.search(line) and ".sh" in line:
                failures.append((r.folder, f"cannot read a script path in: {line.strip()}"))
        todo = _scripts(r.commands)
        seen: set[str] = set()
        while todo:
            rel = todo.pop(0)
            if rel in seen:
                continue
            seen.add(rel)
            path = root / rel
            if not path.is_file():
                failures.append((r.folder, f"{rel}: no such file"))
                continue
            if rel.endswith(".sh"):
                res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
                if res.returncode:
                    failures.append((r.folder, f"{rel}: bash -n: {res.stderr.strip()}"))
                code = [ln for ln in path.read_text().split("\n")
                        if not ln.lstrip().startswith("#")]
                todo += [s for s in _scripts(code) if s.startswith("lab/") and s.endswith(".py")]
            else:
                failures += [(r.folder, f"{rel}: {why}") for why in check_python(path, root)]
    return failures


@dataclass
class Result:
    folder: str
    command: str
    status: str  # passed, failed, timeout, deadline (not run / cut), needs ..., no command
    rc: int | None = None
    seconds: float = 0.0
    last_error: str = ""
    failed_steps: list[str] = field(default_factory=list)


def missing_needs(needs: str) -> str | None:
    """What this machine lacks of a ``Needs:`` line (``GPU``, ``Nsight Compute``), or None."""
    text = needs.split(";")[0]
    if text.startswith("nothing") or "historic checkout" in text:
        return "nothing to run at this commit"
    if "CPU only" in text:
        return None
    if "Nsight Compute" in text and "skips without it" not in text and not shutil.which("ncu"):
        return "needs Nsight Compute (ncu not found)"
    if "GPU" in text:
        try:
            import torch
            if not torch.cuda.is_available():
                return "needs a GPU (torch sees none)"
        except ImportError:
            return "needs a GPU (torch not importable)"
    return None


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.search(r"Error|error:|FAIL|Traceback|Killed|No such file|not found", ln):
            return ln[:160]
    return lines[-1][:160] if lines else ""


def run_one(r: Rerun, out: Path, timeout_s: float, env: dict[str, str]) -> Result:
    """Run ``r``'s block once (smoke settings), ``OUT=out``; kill its process group at
    ``timeout_s``."""
    command = " && ".join(c.strip().rstrip("\\").strip() for c in r.runnable)
    out.mkdir(parents=True, exist_ok=True)
    script = "set -eo pipefail\n" + "\n".join(r.commands) + "\n"
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, env={**env, "OUT": str(out)},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
            status = "passed" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc, status = proc.wait(), "timeout"
        log.seek(0)
        text = log.read()
    (out / "lab_rerun.log").write_text(text)
    steps = [ln.strip()[:120] for ln in text.splitlines() if STEP_FAILED_RE.search(ln)]
    if status == "passed" and steps:
        status = "failed"  # a script without `set -e` went on after a step failed
    return Result(r.folder, command, status, rc, round(time.monotonic() - t0, 1),
                  _last_error(text) if status != "passed" else "", steps)


ESTIMATE_RE = re.compile(r"about (\d+(?:\.\d+)?) (s|min)\b")


def smoke_estimate_s(needs: str) -> float:
    """Seconds a folder's smoke run takes by its ``Needs:`` line: the "smoke: about N s|min"
    figure, else the first "about N s|min", else 60."""
    smoke = needs.split("smoke:", 1)[1] if "smoke:" in needs else needs
    m = ESTIMATE_RE.search(smoke) or ESTIMATE_RE.search(needs)
    if not m:
        return 60.0
    return float(m.group(1)) * (60 if m.group(2) == "min" else 1)


def run(reruns: list[Rerun], out: Path, timeout_s: float, deadline_s: float,
        jobs: int = 1) -> list[Result]:
    """:func:`run_one` for each folder, ``jobs`` at a time (more than one: the longest smoke
    estimate first), starting none after ``deadline_s`` (the rest: "deadline (not run)") and
    stopping any still running at it ("deadline (cut)"); results in
    the order of ``reruns``. A folder whose run raises (its OUT folder cannot be made, bash
    cannot start) is a failed result naming the error, and the others still run; an
    interrupt starts no folder still queued."""
    path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]  # e.g. FA4's
    env = {**os.environ, "FLASHREPRO_LAB_SMOKE": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    if "FLASHREPRO_GIT_COMMIT" not in env and shutil.which("git"):
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True)
        if head.returncode == 0:
            env["FLASHREPRO_GIT_COMMIT"] = head.stdout.strip()
    start = time.monotonic()
    results: dict[str, Result] = {}
    todo = []
    for r in reruns:
        command = " && ".join(c.strip() for c in r.runnable)
        if not r.runnable:
            results[r.folder] = Result(r.folder, "", "no command (see README)")
        elif lacking := missing_needs(r.needs):
            results[r.folder] = Result(r.folder, command, lacking)
        else:
            todo.append((r, command))
    if jobs > 1:
        todo.sort(key=lambda rc: -smoke_estimate_s(rc[0].needs))

    def one(item: tuple[Rerun, str]) -> Result:
        r, command = item
        left = deadline_s - (time.monotonic() - start)
        if left <= 1:
            return Result(r.folder, command, "deadline (not run)")
        t0 = time.monotonic()
        try:
            result = run_one(r, out / r.folder, min(timeout_s, left), env)
            if result.status == "timeout" and left < timeout_s:
                result.status = "deadline (cut)"  # stopped by the run's deadline, not its own
        except Exception as exc:  # e.g. its OUT folder cannot be made: one failed folder
            result = Result(r.folder, command, "failed", None, round(time.monotonic() - t0, 1),
                            f"{type(exc).__name__}: {exc}"[:160])
        print(f"{result.folder}: {result.status} [{result.seconds} s]", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for result in pool.map(one, todo):
            results[result.folder] = result
    return [results[r.folder] for r in reruns]


def write(results: list[Result], out: Path) -> str:
    """``out/lab_rerun.json`` and ``.md``; returns the markdown table."""
    from tabulate import tabulate

    rows = [[r.folder, r.command[:80] + ("..." if len(r.command) > 80 else ""), r.status,
             "" if r.rc is None else r.rc, r.seconds, r.last_error] for r in results]
    table = tabulate(rows, ["folder", "command", "status", "exit", "s", "last error line"],
                     tablefmt="github")
    out.mkdir(parents=True, exist_ok=True)
    (out / "lab_rerun.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    (out / "lab_rerun.md").write_text("# Lab rerun (FLASHREPRO_LAB_SMOKE=1)\n\n" + table + "\n")
    return table


def _filter(reruns: list[Rerun], only: list[str], skip: list[str]) -> list[Rerun]:
    return [r for r in reruns if (not only or any(s in r.folder for s in only))
            and not any(s in r.folder for s in skip)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="CPU: paths, compiles, imports")
    mode.add_argument("--run", action="store_true", help="GPU: run each block, smoke settings")
    p.add_argument("--out", type=Path, help="--run: results folder (required)")
    p.add_argument("--timeout-s", type=float, default=90.0, help="per folder (default 90)")
    p.add_argument("--deadline-s", type=float, default=1800.0,
                   help="start no folder after this many seconds (default 1800)")
    p.add_argument("--jobs", type=int, default=1,
                   help="--run: folders at once, the longest first (default 1; see above)")
    p.add_argument("--only", nargs="+", default=[], metavar="TEXT",
                   help="folders whose name contains one of these")
    p.add_argument("--skip", nargs="+", default=[], metavar="TEXT",
                   help="leave out folders whose name contains one of these")
    a = p.parse_args(argv)
    if a.run and a.out is None:
        p.error("--run needs --out DIR (each folder's outputs go under DIR/<folder>)")
    if a.jobs < 1:
        p.error(f"--jobs must be >= 1, got {a.jobs}")
    for name in ("timeout_s", "deadline_s"):
        if not getattr(a, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(a, name)}")
    try:
        reruns = _filter(load(), a.only, a.skip)
    except ValueError as exc:
        print(f"lab_rerun: {exc}", file=sys.stderr)
        return 1
    if not reruns:
        p.error("--only/--skip left no folder")
    if a.check:
        failures = check(reruns)
        for folder, why in failures:
            print(f"FAIL {folder}: {why}")
        print(f"lab_rerun --check: {len(reruns)} folders, {len(failures)} failures")
        return 1 if failures else 0
    results = run(reruns, a.out, a.timeout_s, a.deadline_s, a.jobs)
    print(write(results, a.out))
    return 1 if any(r.status in ("failed", "timeout", "deadline (cut)") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
