"""CPU checks of scripts/lab_rerun.py: the Rerun blocks parse, ``--check`` passes on the lab
record as committed and fails, naming the folder, on a broken one. The lab record is not in
the Docker image (``.dockerignore``), so neither is this module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lab_rerun():
    spec = importlib.util.spec_from_file_location("lab_rerun", ROOT / "scripts" / "lab_rerun.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["lab_rerun"] = module
    spec.loader.exec_module(module)
    return module


README = """# x

## Files
- prose

## Rerun
From the root.

```bash
# a comment
OUT="$OUT" bash lab/{folder}/go.sh
python3 lab/{folder}/probe.py > "$OUT/p.txt"
```
Needs: GPU; about 1 min.

## Later
"""


def _fixture(tmp_path: Path, sh: str, py: str, readme: str = README) -> Path:
    folder = tmp_path / "lab" / "2026-01-01-fixture"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(readme.format(folder=folder.name))
    (folder / "go.sh").write_text(sh)
    (folder / "probe.py").write_text(py)
    return tmp_path


def test_parse_takes_the_block_and_the_needs_line(lab_rerun) -> None:
    r = lab_rerun.parse_readme("f", README.format(folder="f"))
    assert r.commands == ["# a comment", 'OUT="$OUT" bash lab/f/go.sh',
                          'python3 lab/f/probe.py > "$OUT/p.txt"']
    assert r.runnable == r.commands[1:]
    assert r.needs == "GPU; about 1 min."


@pytest.mark.parametrize("broken, reason", [
    (README.replace("## Rerun", "## Again"), "no '## Rerun' section"),
    (README.replace("```bash", "```sh"), "one ```bash block, has 0"),
    (README.replace("Needs: GPU", "GPU"), "no 'Needs:' line"),
])
def test_parse_refuses_a_malformed_section(lab_rerun, broken: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as info:
        lab_rerun.parse_readme("2026-01-01-x", broken)
    assert "2026-01-01-x" in str(info.value)


def test_every_experiment_has_a_rerun_section(lab_rerun) -> None:
    reruns = lab_rerun.load()
    folders = sorted(p.name for p in (ROOT / "lab").iterdir() if p.name[:1].isdigit())
    assert [r.folder for r in reruns] == folders and len(folders) >= 34
    assert all(r.needs for r in reruns)


def test_check_passes_on_the_lab_record(lab_rerun) -> None:
    assert lab_rerun.check(lab_rerun.load()) == []


def test_check_passes_a_sound_fixture(lab_rerun, tmp_path: Path) -> None:
    root = _fixture(tmp_path, "#!/usr/bin/env bash\necho hi\n", "import json\nprint(json)\n")
    assert lab_rerun.check(lab_rerun.load(root / "lab"), root) == []


@pytest.mark.parametrize("sh, py, reason", [
    ("if then fi\n", "print(1)\n", "go.sh: bash -n"),
    ("echo\n", "def f(:\n", "probe.py: does not compile"),
    ("echo\n", "from lab.probes.smoke import no_such_name\n",
     "lab.probes.smoke has no no_such_name"),
    ("echo\n", "from flashrepro_harness.bench.timing import gone_away\n",
     "flashrepro_harness.bench.timing has no gone_away"),
    ("echo\n", "import ws_before\n", "imports ws_before, found neither beside it nor installed"),
    ("python3 lab/2026-01-01-fixture/missing.py\n", "print(1)\n", "missing.py: no such file"),
])
def test_check_fails_a_broken_fixture(lab_rerun, tmp_path: Path, sh: str, py: str,
                                      reason: str) -> None:
    root = _fixture(tmp_path, sh, py)
    (root / "lab" / "probes").mkdir()
    (root / "lab" / "probes" / "smoke.py").write_text((ROOT / "lab/probes/smoke.py").read_text())
    failures = lab_rerun.check(lab_rerun.load(root / "lab"), root)
    assert failures and all(folder == "2026-01-01-fixture" for folder, _ in failures)
    assert any(reason in why for _, why in failures), failures


def test_main_check_exit_status(lab_rerun, tmp_path: Path, capsys) -> None:
    assert lab_rerun.main(["--check", "--only", "rowsum-rounding"]) == 0
    with pytest.raises(SystemExit):
        lab_rerun.main(["--run"])  # --out is required
    assert "--run needs --out" in capsys.readouterr().err


def test_missing_needs(lab_rerun) -> None:
    assert lab_rerun.missing_needs("CPU only; 1 min") is None
    assert lab_rerun.missing_needs("nothing to run") == "nothing to run at this commit"
    assert lab_rerun.missing_needs("GPU (historic checkout); x").startswith("nothing")


def test_smoke_knob_refuses_a_typo(monkeypatch) -> None:
    sys.path.insert(0, str(ROOT))
    from lab.probes import smoke
    monkeypatch.setenv(smoke.ENV, "yes")
    with pytest.raises(ValueError, match="FLASHREPRO_LAB_SMOKE must be 0 or 1"):
        smoke.enabled()
    monkeypatch.setenv(smoke.ENV, "1")
    assert (smoke.rounds(30), smoke.calls(10), smoke.first([1, 2, 3])) == (3, 2, [1])
    monkeypatch.setenv(smoke.ENV, "0")
    assert (smoke.rounds(30), smoke.calls(10), smoke.first([1, 2, 3])) == (30, 10, [1, 2, 3])


def test_smoke_pytest_keeps_the_first_tests_left_after_deselection(tmp_path: Path) -> None:
    """Under the smoke knob the plugin keeps 2 of the tests that ``-k`` selects (not 2 of all
    collected, which ``-k`` could then deselect, leaving none: pytest exit 5)."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_sample.py").write_text(
        "".join(f"def test_{name}():\n    pass\n" for name in ("a1", "a2", "b1", "b2", "b3")))
    env = {**os.environ, "FLASHREPRO_LAB_SMOKE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "lab.probes.smoke_pytest", "-k", "b", "-n", "0",
                           str(tmp_path / "test_sample.py")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout and "3 deselected" in proc.stdout, proc.stdout


def test_smoke_estimate(lab_rerun) -> None:
    est = lab_rerun.smoke_estimate_s
    assert est("GPU; about 10 min (smoke: about 90 s).") == 90
    assert est("GPU; about 8 min (smoke: about 2 min).") == 120
    assert est("GPU; about 1 min (no smoke settings: 16 + 24 fixed cases).") == 60
    assert est("CPU only; about 2 min on 16 cores (no smoke settings).") == 120
    assert est("GPU.") == 60


def test_jobs_run_longest_first_and_report_in_order(lab_rerun, tmp_path: Path) -> None:
    """With --jobs 2 both folders run (the longer estimate starts first), each with its own
    OUT, and the results come back in the folders' order."""
    reruns = [lab_rerun.Rerun(name, [f'echo {name} > "$OUT/ran.txt"; sleep {s}'],
                              f"CPU only; about 1 min (smoke: about {s} s)")
              for name, s in (("short", 0.1), ("long", 0.5))]
    results = lab_rerun.run(reruns, tmp_path, timeout_s=30, deadline_s=60, jobs=2)
    assert [r.folder for r in results] == ["short", "long"]
    assert all(r.status == "passed" for r in results), results
    for name in ("short", "long"):
        assert (tmp_path / name / "ran.txt").read_text().strip() == name
    assert results[1].seconds >= 0.5


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_folder_whose_run_raises_is_reported_and_the_rest_run(lab_rerun, tmp_path: Path,
                                                                 jobs: int) -> None:
    """A folder whose run raises before its command runs (here its OUT folder cannot be made:
    a file has its name) is a failed result naming the error; the other folders still run and
    every result comes back, in the folders' order."""
    reruns = [lab_rerun.Rerun(name, [f'echo {name} > "$OUT/ran.txt"'], "CPU only; about 1 s")
              for name in ("first", "broken", "last")]
    (tmp_path / "broken").write_text("a file where the folder's OUT goes")
    results = lab_rerun.run(reruns, tmp_path, timeout_s=30, deadline_s=60, jobs=jobs)
    assert [r.folder for r in results] == ["first", "broken", "last"]
    assert [r.status for r in results] == ["passed", "failed", "passed"], results
    assert "FileExistsError" in results[1].last_error
    for name in ("first", "last"):
        assert (tmp_path / name / "ran.txt").read_text().strip() == name


def test_an_interrupt_starts_no_further_folder(lab_rerun, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during a folder's run ends the rerun: no folder still queued starts."""
    started: list[str] = []

    def run_one(r, out, timeout_s, env):
        started.append(r.folder)
        if r.folder == "a":
            raise KeyboardInterrupt
        return lab_rerun.Result(r.folder, "", "passed")

    monkeypatch.setattr(lab_rerun, "run_one", run_one)
    reruns = [lab_rerun.Rerun(name, ["true"], "CPU only; about 1 s") for name in "abc"]
    with pytest.raises(KeyboardInterrupt):
        lab_rerun.run(reruns, tmp_path, timeout_s=30, deadline_s=60, jobs=1)
    assert started == ["a"]


def test_a_folder_stopped_by_the_deadline_is_reported_as_cut(lab_rerun, tmp_path: Path) -> None:
    """The run's deadline also stops a folder still running at it: that is "deadline (cut)",
    not the folder's own timeout."""
    reruns = [lab_rerun.Rerun("slow", ["sleep 20"], "CPU only; about 1 min")]
    (result,) = lab_rerun.run(reruns, tmp_path, timeout_s=60, deadline_s=2.5)
    assert result.status == "deadline (cut)" and result.seconds < 10
