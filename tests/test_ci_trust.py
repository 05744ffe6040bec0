"""What a pull request cannot change on the GPU runners: its judge, the shared caches, the
review of the files that decide a verdict, and where its job runs.

- the gate's verdict on a pull request comes from the base commit: an image built from the base
  checkout before the head's code runs, with no GPU, no network and the head's results mounted
  read-only (.github/workflows/gpu.yml, .github/scripts/judge, scripts/ci_steps.sh);
- a pull request's job never mounts the runner's shared Triton cache writable: it gets a copy
  of its own under the job's temp folder (.github/scripts/in-image);
- .github/CODEOWNERS gives every file that decides a verdict to one team;
- the runner scale set of actions-runner-controller (deploy/arc/) is the label the GPU job asks
  for, with a GPU and nothing shared between pods.

The shell scripts run for real here, with a stand-in ``docker`` that records its arguments.
Rules: docs/self-hosted-runner.md ("Who judges a pull request", "Runner hygiene").
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.test_workflows import (
    GPU_SCRIPT,
    GPU_WORKFLOW,
    IN_IMAGE,
    ROOT,
    _split_top,
    _unwrap,
    jobs,
    load_workflow,
)

JUDGE = ROOT / ".github" / "scripts" / "judge"
CODEOWNERS = ROOT / ".github" / "CODEOWNERS"
ARC_VALUES = ROOT / "deploy" / "arc" / "gpu-runner-scale-set.yaml"
TEAM = "@flashrepro/maintainers"
TRITON_CACHE = "/var/cache/flashrepro/triton/cache"  # the image's TRITON_CACHE_DIR
VERDICT_FLAGS = ("--threshold", "--abs-threshold", "--confidence", "--allow-env-mismatch",
                 "--update-baseline", "FLASHREPRO_BASELINE_DIR")
"""Options and settings that change a verdict: only the judge's own files may set them."""
JUDGED_PATHS = [
    "src/flashrepro_harness/gate/stats.py",
    "src/flashrepro_harness/gate/check.py",
    "src/flashrepro_harness/commands/gate.py",
    "src/flashrepro_harness/commands/reproduce.py",
    "src/flashrepro_harness/cli.py",
    "src/flashrepro_harness/bench/reproduce.py",
    "src/flashrepro_harness/bench/timing.py",
    "src/flashrepro_harness/bench/impls.py",
    "src/flashrepro_harness/env.py",
    "src/flashrepro_harness/results.py",
    "src/flashrepro_harness/problem.py",
    "noxfile.py",
    "Dockerfile",
    "requirements/gpu.lock",
    "src/flashrepro_harness/data/article.toml",
    "src/flashrepro_harness/data/golden/sass-triton-3.6.0.json",
    "reproduce/article.toml",
    "reproduce/golden",
    "reproduce/baselines/nvidia-h200/b2-h16-q1024-k1024-d128-float16-causal.json",
    ".github/workflows/gpu.yml",
    ".github/workflows/ci.yml",
    ".github/scripts/in-image",
    ".github/scripts/judge",
    ".github/CODEOWNERS",
    "scripts/ci_steps.sh",
    "deploy/arc/gpu-runner-scale-set.yaml",
    "tests/test_workflows.py",
    "tests/test_ci_trust.py",
]
"""Files whose change can turn a pull request's own GPU check green: the gate (its code now
in gate/, its commands), the measurement (the nox session and image that run it, the rows,
the recorded environment, the results' format), the problem, the golden file, the baselines,
the CI and the tests that pin its rules."""


def gpu_job() -> dict[str, Any]:
    return jobs(load_workflow(GPU_WORKFLOW))["gpu"]


def step_index(steps: list[dict[str, Any]], predicate) -> int:
    found = [i for i, step in enumerate(steps) if predicate(step)]
    assert found, "no such step"
    return found[0]


# -- the judge -------------------------------------------------------------------------------

def test_pull_request_judge_is_built_from_the_base_before_head_code_runs() -> None:
    """On a pull request the judge's image is built from the base checkout (.reference), under
    a tag of its own, before the head's image is built and before any step runs the head's
    code; elsewhere the judge is the measured commit's image."""
    job = gpu_job()
    env, steps = job["env"], job["steps"]
    judge_image = env["JUDGE_IMAGE"]
    assert "github.event_name == 'pull_request'" in judge_image
    assert "flashrepro-judge:" in judge_image and "flashrepro-judge:" not in env[
        "FLASHREPRO_IMAGE"]
    assert "github.event.pull_request.base.sha" in env["JUDGE_SHA"]
    base = step_index(steps, lambda s: s.get("with", {}).get("path") == ".reference")
    judge_build = step_index(steps, lambda s: re.search(
        r'docker build --tag "\$JUDGE_IMAGE".*\.reference\s*$', s.get("run", ""), re.S))
    assert steps[judge_build]["if"] == "${{ github.event_name == 'pull_request' }}"
    assert '--build-arg REVISION="$JUDGE_SHA"' in steps[judge_build]["run"]
    head_build = step_index(steps, lambda s: 'docker build --tag "$FLASHREPRO_IMAGE"'
                            in s.get("run", ""))
    head_code = step_index(steps, lambda s: "in-image " in s.get("run", ""))
    assert base < judge_build < head_build < head_code


def test_only_the_judge_runs_the_gate() -> None:
    """The head's steps only measure (no ``--gate``, no ``gate`` subcommand); the one step that
    judges runs ``gate --results`` through ``judge`` with the judge's own baselines, after the
    timings. ``JUDGE_ROOT`` is the checkout inside the judge's image (the Dockerfile's
    WORKDIR), so the baselines are the base commit's on a pull request. Neither the workflow
    nor its scripts set a verdict's settings."""
    job = gpu_job()
    steps = job["steps"]
    runs = [s.get("run", "") for s in steps]
    for run in runs:
        if "in-image " in run:
            assert "--gate" not in run and not re.search(r"flashrepro_harness\s+gate", run), run
    judged = [i for i, run in enumerate(runs) if re.search(r"flashrepro_harness\s+gate\b", run)]
    assert len(judged) == 1
    run = " ".join(runs[judged[0]].replace("\\\n", " ").split())
    assert ('judge python3 -m flashrepro_harness gate --results "$RESULTS_DIR/reproduce.json" '
            '--baseline-dir "$JUDGE_ROOT/reproduce/baselines" "${expect[@]}"') in run, run
    # the commits measured, passed where the judge's gate knows the options
    assert '--expect-commit "$HEAD_SHA"' in run and "--expect-reference-commit" in run
    assert "if" not in steps[judged[0]]
    timing = step_index(steps, lambda s: "-s reproduce --" in s.get("run", ""))
    assert timing < judged[0]
    workdir = re.search(r"^WORKDIR\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert workdir and job["env"]["JUDGE_ROOT"].split("#")[0].strip() == workdir.group(1)
    # threshold, confidence, environment checks and the baseline folder are the judge's own
    for path in (GPU_WORKFLOW, GPU_SCRIPT, IN_IMAGE, JUDGE):
        text = path.read_text()
        assert not [flag for flag in VERDICT_FLAGS if flag in text], path.name


def test_manual_runs_only_on_trusted_branches() -> None:
    """A manual run elsewhere would be judged by the branch's own gate, and its check would
    count for a pull request from that branch: the job's ``if:`` refuses it."""
    expr = " ".join(str(gpu_job()["if"]).split())
    expr = expr.removeprefix("${{").removesuffix("}}")
    want = sorted(["github.event_name != 'workflow_dispatch'",
                   "github.ref == 'refs/heads/main'",
                   "startsWith(github.ref, 'refs/heads/release/')"])
    terms = [_unwrap(t) for t in _split_top(_unwrap(expr), "&&")]
    assert any(sorted(_unwrap(a) for a in _split_top(t, "||")) == want for t in terms), expr


def test_summary_and_upload_read_only_plain_files() -> None:
    """The host reads the results folder the head's container wrote: a link there could make
    the summary or the artifact show a file of the runner. Both wait for the check."""
    steps = gpu_job()["steps"]
    check = step_index(steps, lambda s: s.get("id") == "plain")
    assert "! -type f ! -type d" in steps[check]["run"]
    for i, step in enumerate(steps):
        reads = "RESULTS_DIR" in step.get("run", "") and "GITHUB_STEP_SUMMARY" in step["run"]
        if reads or "upload-artifact" in step.get("uses", ""):
            assert i > check and "steps.plain.outcome == 'success'" in step["if"], step


def fake_docker(tmp_path: Path) -> tuple[Path, Path]:
    """A folder holding a ``docker`` that writes its arguments, one a line, to the log."""
    bin_dir, log = tmp_path / "bin", tmp_path / "docker-args"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {log}\n')
    docker.chmod(0o755)
    return bin_dir, log


def run_script(script: Path, tmp_path: Path, env: dict[str, str]) -> list[str]:
    """Run ``script true`` with the stand-in docker; the arguments docker got."""
    bin_dir, log = fake_docker(tmp_path)
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), **env}
    subprocess.run(["bash", str(script), "true"], env=full, check=True, capture_output=True)
    return log.read_text().splitlines()


def volumes(args: list[str]) -> dict[str, tuple[str, str]]:
    """``--volume SRC:DST[:MODE]`` arguments as DST -> (SRC, MODE)."""
    found = {}
    for flag, value in itertools.pairwise(args):
        if flag == "--volume":
            src, dst, *mode = value.split(":")
            found[dst] = (src, mode[0] if mode else "rw")
    return found


def test_judge_gets_no_gpu_no_network_and_reads_results_read_only(tmp_path: Path) -> None:
    results, verdict = tmp_path / "results", tmp_path / "verdict"
    args = run_script(JUDGE, tmp_path, {"JUDGE_IMAGE": "judge:base", "RESULTS_DIR": str(results),
                                        "VERDICT_DIR": str(verdict)})
    assert args[:1] == ["run"] and args[-2:] == ["judge:base", "true"]
    assert "--gpus" not in args and args[args.index("--network"):][:2] == ["--network", "none"]
    assert volumes(args) == {str(results): (str(results), "ro"),
                             str(verdict): (str(verdict), "rw")}


def test_ci_steps_judge_runs_the_reference_checkouts_code(tmp_path: Path) -> None:
    """scripts/ci_steps.sh's ``judge`` imports the harness from REFERENCE_SRC's checkout (a
    pull request's base), from JUDGE_SRC's when given; run here on the script's own set-up."""
    text = GPU_SCRIPT.read_text()
    prelude = text[:text.index("\n# The image's Python has nox")]
    probe = 'judge python3 -c "import flashrepro_harness; print(flashrepro_harness.__file__)"'
    for name in ("base", "other"):
        pkg = tmp_path / name / "src" / "flashrepro_harness"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")

    def judged_by(**env: str) -> str:
        full = {"PATH": os.environ["PATH"], "OUT": str(tmp_path / "out"), **env}
        out = subprocess.run(["bash", "-c", f"{prelude}\n{probe}", str(GPU_SCRIPT)], env=full,
                             check=True, capture_output=True, text=True).stdout
        return str(Path(out.strip()).resolve())

    base_src, other_src = tmp_path / "base" / "src", tmp_path / "other" / "src"
    assert judged_by(REFERENCE_SRC=str(base_src)).startswith(str(base_src.resolve()))
    assert judged_by(REFERENCE_SRC=str(base_src), JUDGE_SRC=str(other_src)).startswith(
        str(other_src.resolve()))
    assert judged_by().startswith(str((ROOT / "src").resolve()))


# -- the Triton cache ------------------------------------------------------------------------

def in_image_env(tmp_path: Path, event: str, ref: str, shared: Path | None) -> dict[str, str]:
    env = {"FLASHREPRO_IMAGE": "head:img", "RESULTS_DIR": str(tmp_path / "results"),
           "RUNNER_TEMP": str(tmp_path / "runner-temp"), "GITHUB_EVENT_NAME": event,
           "GITHUB_REF": ref}
    (tmp_path / "runner-temp").mkdir(exist_ok=True)
    if shared is not None:
        env["FLASHREPRO_TRITON_CACHE"] = str(shared)
    return env


def trusted_cache(tmp_path: Path) -> Path:
    shared = tmp_path / "shared-triton"
    entry = shared / "KEY"
    entry.mkdir(parents=True)
    (entry / "attn_fwd.cubin").write_bytes(b"compiled on main")
    return shared


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


UNTRUSTED = [
    ("pull_request", "refs/pull/7/merge"),
    ("pull_request", "refs/heads/main"),            # never trusted, whatever the ref says
    ("workflow_dispatch", "refs/heads/feature"),
    ("push", "refs/heads/mainline"),
    ("push", "refs/tags/v1"),
]
TRUSTED = [("push", "refs/heads/main"), ("push", "refs/heads/release/1.2"),
           ("workflow_dispatch", "refs/heads/main")]


def test_only_trusted_jobs_write_the_shared_cache(tmp_path: Path) -> None:
    """Other jobs get a copy under their temp folder: writing it (as Triton does, and as a job
    tampering with a cubin would) leaves the shared cache as it was. A later step of the same
    job reuses its copy."""
    for n, (event, ref) in enumerate(UNTRUSTED):
        work = tmp_path / f"untrusted-{n}"
        work.mkdir()
        shared = trusted_cache(work)
        before = snapshot(shared)
        env = in_image_env(work, event, ref, shared)
        src, mode = volumes(run_script(IN_IMAGE, work, env))[TRITON_CACHE]
        job_cache = Path(src)
        assert job_cache.parent == work / "runner-temp" and mode == "rw", (event, ref)
        copied = job_cache / "KEY" / "attn_fwd.cubin"
        assert copied.read_bytes() == b"compiled on main"
        assert copied.stat().st_ino != (shared / "KEY" / "attn_fwd.cubin").stat().st_ino
        copied.write_bytes(b"tampered")
        (job_cache / "KEY" / "new.cubin").write_bytes(b"compiled by the pull request")
        assert snapshot(shared) == before, (event, ref)
        (work / "later-step").mkdir()
        again = volumes(run_script(IN_IMAGE, work / "later-step", env))[TRITON_CACHE]
        assert again == (src, mode) and copied.read_bytes() == b"tampered"
    for n, (event, ref) in enumerate(TRUSTED):
        work = tmp_path / f"trusted-{n}"
        work.mkdir()
        shared = trusted_cache(work)
        env = in_image_env(work, event, ref, shared)
        assert volumes(run_script(IN_IMAGE, work, env))[TRITON_CACHE] == (str(shared), "rw")


@pytest.mark.parametrize("event", ["pull_request", "push"])
def test_without_a_shared_cache_each_job_has_its_own(tmp_path: Path, event: str) -> None:
    env = in_image_env(tmp_path, event, "refs/heads/main", None)
    src, _ = volumes(run_script(IN_IMAGE, tmp_path, env))[TRITON_CACHE]
    assert Path(src).parent == tmp_path / "runner-temp" and Path(src).is_dir()


def test_the_job_empties_its_own_cache() -> None:
    """The job's cache is written by the image's user: the last step empties it (with the
    results) through a container, as the runner's user may not delete those files."""
    last = gpu_job()["steps"][-1]
    assert last["if"] == "${{ always() }}"
    assert '"$RUNNER_TEMP/flashrepro-triton-cache"' in last["run"]
    assert "find /clean -mindepth 1 -delete" in last["run"]


# -- CODEOWNERS ------------------------------------------------------------------------------

def codeowners_rules(text: str) -> list[tuple[str, list[str]]]:
    """(pattern, owners) of each rule line of a CODEOWNERS file."""
    rules = []
    for line in text.splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            pattern, *owners = line.split()
            rules.append((pattern, owners))
    return rules


def problems_codeowners(text: str, paths: list[str], team: str, work: Path) -> list[str]:
    """Paths whose owner (the last matching rule, as GitHub reads CODEOWNERS) is not ``team``;
    rules that name another owner or use syntax CODEOWNERS lacks (``!``, ``[``). Each pattern
    is matched by git itself (``git check-ignore``; CODEOWNERS patterns follow .gitignore's
    rules), one pattern at a time: unlike .gitignore, a later CODEOWNERS rule applies inside
    a folder an earlier one matched."""
    rules = codeowners_rules(text)
    found = [f"rule {p!r} has owners {o}, not {team}" for p, o in rules if o != [team]]
    found += [f"rule {p!r}: CODEOWNERS has no `!` or `[...]`" for p, _ in rules
              if p.startswith("!") or "[" in p]
    repo = work / "match"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    owners: dict[str, list[str]] = {}
    for pattern, rule_owners in rules:
        (repo / ".git" / "info" / "exclude").write_text(pattern + "\n")
        out = subprocess.run(["git", "-C", str(repo), "check-ignore", "--no-index", "--stdin"],
                             input="\n".join(paths) + "\n", capture_output=True, text=True)
        assert out.returncode in (0, 1), out.stderr  # 1: no path matched
        for path in out.stdout.splitlines():
            owners[path] = rule_owners
    for path in paths:
        if path not in owners:
            found.append(f"{path}: no CODEOWNERS rule")
        elif owners[path] != [team]:
            found.append(f"{path}: owned by {owners[path]}, not {team}")
    return found


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git matches the patterns")


@needs_git
def test_codeowners_gives_the_judge_to_one_team(tmp_path: Path) -> None:
    assert CODEOWNERS.is_file(), "no .github/CODEOWNERS"
    assert not problems_codeowners(CODEOWNERS.read_text(), JUDGED_PATHS, TEAM, tmp_path)


@needs_git
def test_codeowners_check_fails_on_gaps(tmp_path: Path) -> None:
    text = "/src/flashrepro_harness/gate/ @flashrepro/maintainers\n/.github/ @someone-else\n"
    found = problems_codeowners(text, ["src/flashrepro_harness/gate/check.py",
                                       ".github/workflows/gpu.yml", "scripts/ci_steps.sh"],
                                TEAM, tmp_path)
    assert found == ["rule '/.github/' has owners ['@someone-else'], not @flashrepro/maintainers",
                     ".github/workflows/gpu.yml: owned by ['@someone-else'], not "
                     "@flashrepro/maintainers",
                     "scripts/ci_steps.sh: no CODEOWNERS rule"]
    # a later rule without the team takes the path away, as on GitHub
    text = "/src/ @flashrepro/maintainers\n/src/flashrepro_harness/gate/ @x/y\n"
    assert ("src/flashrepro_harness/gate/stats.py: owned by ['@x/y'], not "
            "@flashrepro/maintainers") in problems_codeowners(
        text, ["src/flashrepro_harness/gate/stats.py"], TEAM, tmp_path / "second")


# -- the runner scale set (actions-runner-controller) ----------------------------------------

def runs_on_labels() -> set[str]:
    """The runner labels the GPU job asks for, one set per matrix entry, flattened."""
    job = gpu_job()
    runs_on = job["runs-on"]
    labels = [runs_on] if isinstance(runs_on, str) else list(runs_on)
    out = set()
    for gpu in job["strategy"]["matrix"]["gpu"]:
        out |= {re.sub(r"\$\{\{\s*matrix\.gpu\s*\}\}", gpu, label) for label in labels}
    return out


def arc_values() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(ARC_VALUES.read_text())


def test_arc_scale_set_is_the_label_the_gpu_job_asks_for() -> None:
    """ARC's runners answer to their scale set's name (and, from ARC 0.14, scaleSetLabels): the
    job's one label is that name."""
    values = arc_values()
    name = values["runnerScaleSetName"]
    labels = runs_on_labels()
    assert labels == {name}, (labels, name)
    assert set(values.get("scaleSetLabels") or []) <= labels


def test_arc_runner_pod_has_a_gpu_and_shares_nothing() -> None:
    """The GPU to the container whose Docker daemon runs the job's containers, on a GPU node;
    the runner image pinned by version; no volume that outlives the pod (a hostPath or a
    claim), so no cache or state passes from one job to the next; credentials from a secret
    made outside the file."""
    values = arc_values()
    spec = values["template"]["spec"]
    assert isinstance(values["githubConfigSecret"], str)
    assert any(key.startswith("nvidia.com/gpu") for key in spec["nodeSelector"])
    containers = {c["name"]: c for c in spec["containers"]}
    gpu = [c for c in containers.values() if "nvidia.com/gpu" in c.get("resources", {}).get(
        "limits", {})]
    assert len(gpu) == 1 and "dockerd" in gpu[0]["args"]
    assert isinstance(gpu[0]["resources"]["limits"]["nvidia.com/gpu"], int)
    runner = containers["runner"]
    assert re.fullmatch(r"ghcr\.io/actions/actions-runner:\d+\.\d+\.\d+", runner["image"])
    docker_host = {e["name"]: e.get("value") for e in runner.get("env", [])}["DOCKER_HOST"]
    assert docker_host == "unix:///var/run/docker.sock"
    for volume in spec["volumes"]:
        assert set(volume) == {"name", "emptyDir"}, volume
    assert values.get("containerMode") is None  # the template above is the whole pod
