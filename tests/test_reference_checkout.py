"""``flashrepro_harness.bench.reference``: another checkout's flashrepro imported beside the running
one runs its own code (the gate's paired reference), and leaves the running package as it was."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

import flashrepro
from flashrepro_harness.bench import impls as K
from flashrepro_harness.bench.reference import load
from tests.reference import reference_attention

SRC = Path(flashrepro.__file__).resolve().parent.parent
MARK = "reference checkout's launch ran"


def _copy(root: Path, edit: bool) -> Path:
    src = root / ("edited" if edit else "plain") / "src"
    shutil.copytree(SRC / "flashrepro", src / "flashrepro",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if edit:  # the copy's launch raises: a call that reaches it proves whose code ran
        launch = src / "flashrepro" / "launch.py"
        text = launch.read_text()
        anchor = '    key = _signature(q, k, v, causal, scale, enable_gqa, causal_alignment'
        assert text.count(anchor) == 1
        launch.write_text(text.replace(anchor, f"    raise RuntimeError({MARK!r})\n" + anchor))
    return src


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reference")
    return {"plain": _copy(root, False), "edited": _copy(root, True)}


def _inputs(device: torch.device, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, 48, 32, generator=g).to(device, torch.float16)
                 for _ in range(3))


def test_the_reference_runs_its_own_code(checkouts: dict[str, Path],
                                         device: torch.device) -> None:
    before = dict(sys.modules)
    path = list(sys.path)
    ref = load(checkouts["edited"])
    assert sys.path == path
    assert all(sys.modules.get(k) is m for k, m in before.items() if k.startswith("flashrepro"))
    assert ref.package is not flashrepro
    assert Path(ref.attention().__code__.co_filename).is_relative_to(checkouts["edited"])
    q, k, v = _inputs(device, 0)
    with pytest.raises(RuntimeError, match=MARK):
        ref.attention()(q, k, v, causal=True)
    o = flashrepro.attention(q, k, v, causal=True)  # the running package is untouched
    want, _ = reference_attention(q.cpu(), k.cpu(), v.cpu(), causal=True)
    assert torch.allclose(o.cpu().double(), want, atol=2e-3, rtol=0)


def test_a_plain_reference_matches_float64_on_every_element(checkouts: dict[str, Path],
                                                            device: torch.device) -> None:
    ref = load(checkouts["plain"])
    q, k, v = _inputs(device, 1)
    out = torch.full_like(q, float("nan"))
    ref.attention()(q, k, v, causal=False, out=out)
    want, _ = reference_attention(q.cpu(), k.cpu(), v.cpu(), causal=False)
    assert torch.isfinite(out).all()
    assert torch.allclose(out.cpu().double(), want, atol=2e-3, rtol=0)


def test_make_call_runs_the_reference_row(checkouts: dict[str, Path],
                                          device: torch.device) -> None:
    ref = load(checkouts["edited"])
    inputs = _inputs(device, 2)
    for name in ("flashrepro", "flashrepro-article-config"):
        with pytest.raises(RuntimeError, match=MARK):
            K.make_call(name, inputs, True, reference=ref)()
    with pytest.raises(KeyError, match="reference twin"):
        K.make_call("torch-flash", inputs, True, reference=ref)
    cfg = ref.config(flashrepro.ARTICLE)
    assert type(cfg) is ref.package.KernelConfig and type(cfg) is not flashrepro.KernelConfig


def test_a_reference_without_a_newer_config_field_still_pairs() -> None:
    """A reference from before a KernelConfig field (here dynamic_schedule) takes the configs
    that leave it at its default; one that sets it is refused, naming the field."""
    import dataclasses
    from types import SimpleNamespace

    from flashrepro_harness.bench.reference import Reference

    older = dataclasses.make_dataclass("KernelConfig", [
        (f.name, f.type, dataclasses.field(default=f.default))
        for f in dataclasses.fields(flashrepro.KernelConfig) if f.name != "dynamic_schedule"])
    ref = Reference(SRC, None, SimpleNamespace(KernelConfig=older), {})
    assert ref.config(flashrepro.ARTICLE) == older(64, 64, 4, 3)
    dynamic = dataclasses.replace(flashrepro.configs.FA3_WS, dynamic_schedule=True)
    with pytest.raises(ValueError, match=r"no KernelConfig field \['dynamic_schedule'\]"):
        ref.config(dynamic)


def test_bad_reference_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--reference-src must be the src folder"):
        load(tmp_path)
    with pytest.raises(ValueError, match="running flashrepro's own folder"):
        load(SRC)
    broken = tmp_path / "broken" / "src" / "flashrepro"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("import flashrepro_missing_module\n")
    with pytest.raises(ImportError, match="does not import"):
        load(broken.parent)
    assert sys.modules["flashrepro"] is flashrepro


@pytest.mark.parametrize("tail", ["def broken(:\n", "raise RuntimeError('half imported')\n"])
def test_a_reference_failing_halfway_is_an_import_error(tmp_path: Path, tail: str) -> None:
    """A reference whose launch.py has a syntax error or raises on import: ImportError (the CLI's
    exit 2 and one line, not a traceback), the running package and sys.path as before."""
    src = tmp_path / "src"
    shutil.copytree(SRC / "flashrepro", src / "flashrepro",
                    ignore=shutil.ignore_patterns("__pycache__"))
    launch = src / "flashrepro" / "launch.py"
    launch.write_text(launch.read_text() + tail)
    before = {k: m for k, m in sys.modules.items() if k.startswith("flashrepro")}
    path = list(sys.path)
    with pytest.raises(ImportError, match="does not import"):
        load(src)
    assert sys.path == path
    assert {k: m for k, m in sys.modules.items() if k.startswith("flashrepro")} == before


def test_the_cli_refuses_a_missing_reference_without_a_gpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--reference-src`` naming no checkout fails with exit 2 and its message on every host,
    not only where a GPU makes the run time anything."""
    from flashrepro_harness.cli import main

    code = main(["reproduce", "--no-sass", "--reference-src", str(tmp_path / "nothing")])
    assert code == 2
    assert "--reference-src must be the src folder" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("git") is None,
                    reason="needs the git program (the Docker image has none)")
def test_a_copy_inside_another_repository_does_not_take_its_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference copied (untracked) into some git work tree, the running one say: that
    tree's HEAD is not the reference's commit; $FLASHREPRO_REFERENCE_COMMIT or None is."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "README").write_text("x\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    src = repo / "copy" / "src"
    shutil.copytree(SRC / "flashrepro", src / "flashrepro",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.delenv("FLASHREPRO_REFERENCE_COMMIT", raising=False)
    assert load(src).commit is None
    monkeypatch.setenv("FLASHREPRO_REFERENCE_COMMIT", "feed123")
    assert load(src).commit == "feed123"
    subprocess.run([*git, "add", "copy"], check=True)
    subprocess.run([*git, "commit", "-qm", "copy"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    assert load(src).commit == head  # tracked there: that repository's commit
