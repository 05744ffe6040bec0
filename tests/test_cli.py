"""The command line as a user meets it: the commands layer, ``--help`` speed, option spelling,
usage lines, output files that cannot be written, refusals instead of silent no-ops, the
terminal's SASS table, progress on stderr.

Nothing here compiles or times a kernel: the SASS report is replaced by a small stand-in where
a command would compile.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import flashrepro_harness.analysis.sass as sass_mod
from flashrepro_harness import outputs, progress
from flashrepro_harness.analysis.disasm import CLASS_NAMES
from flashrepro_harness.cli import COMMANDS, build_parser
from flashrepro_harness.cli import main as cli_main
from tests.test_imports import HARNESS, imported_modules

REPO = Path(__file__).resolve().parents[1]


def _fake_row(name: str, value: int) -> dict[str, Any]:
    classes = {c: value + i for i, c in enumerate(CLASS_NAMES)}
    return {"name": name, "kind": "triton", "counts": {"classes": classes}, "shared_bytes": 90112,
            "registers": 255, "skipped": None, "role": "production default: P in registers "
            "(warps over rows)", "golden": "ok", "cubin_arch": None,
            "model": {"counts": {"HMMA": value}, "status": "match-in-loops",
                      "notes": ["warps 8x1, so P goes through registers; Q reloaded in every "
                                "loop body (from the TTGIR)"]},
            "published": None}


def _fake_report() -> dict[str, Any]:
    report: dict[str, Any] = {
        "schema": sass_mod.SCHEMA, "triton": "3.6.0", "torch": "2.13.0+cpu", "torch_lib": None,
        "tools": {"ptxas": "12.8"}, "problem": {"batch": 2},
        "golden": {"path": "reproduce/golden/x.json", "ok": True, "diff": []},
        "targets": {"sm_90": {"wgmma": True, "rows": [_fake_row("fwd 128x64 w8 s3", 1000),
                                                      _fake_row("article 64x64 w4 s3", 3000)]}}}
    report["text"] = sass_mod.format_tables(report)
    report["markdown"] = sass_mod.format_tables(report, markdown=True)
    return report


@pytest.fixture
def no_compile(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``sass_report`` replaced by the stand-in; the list counts its calls."""
    calls: list[int] = []

    def fake(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(1)
        return _fake_report()
    monkeypatch.setattr(sass_mod, "sass_report", fake)
    return calls


# -- the commands layer --

def test_every_command_module_parses_and_calls() -> None:
    """Each subcommand's module provides add_arguments(parser) and run(args)."""
    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(module)
        assert callable(mod.add_arguments) and callable(mod.run), name
        assert help_text, name


def test_no_logic_module_imports_the_commands() -> None:
    """Commands call the logic; the logic never imports a command module back (asv's
    ``commands/``). Read from the source, imports inside functions included."""
    commands = f"{HARNESS.name}.commands"
    offenders = sorted(str(path.relative_to(HARNESS)) for path in HARNESS.rglob("*.py")
                       if path.parent.name != "commands" and path.name != "cli.py"
                       and any(m == commands or m.startswith(commands + ".")
                               for m in imported_modules(path)))
    assert not offenders, f"modules importing {commands}: {offenders}"


HEAVY = ("torch", "triton", "scipy")
PROBE = ("import sys\n"
         "from flashrepro_harness.cli import main\n"
         "try:\n"
         "    main(sys.argv[1:])\n"
         "except SystemExit as exc:\n"
         "    assert exc.code == 0, exc.code\n"
         f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n")


@pytest.mark.parametrize("argv", [["--help"], ["doctor", "--help"], ["model", "--help"],
                                  ["readme", "--help"]])
def test_help_is_fast_and_loads_no_torch(argv: list[str]) -> None:
    """``python -m flashrepro_harness [SUBCOMMAND] --help`` in a fresh process: under 1 s (the
    fastest of three runs; the first may read the files from disk) and without importing
    torch, triton or scipy (importing torch alone takes seconds)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "flashrepro_harness", *argv],
                             capture_output=True, text=True, env=env, timeout=120)
        seconds.append(time.perf_counter() - start)
        assert out.returncode == 0 and out.stdout.startswith("usage: flashrepro"), out.stderr
    assert min(seconds) < 1.0, seconds
    probe = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                           env=env, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.splitlines()[-1] == "[]", probe.stdout[-500:]


def test_only_the_chosen_commands_options_are_built() -> None:
    parser = build_parser(["readme"])
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {a.dest for a in sub.choices["readme"]._actions} >= {"check", "readme"}
    assert [a.dest for a in sub.choices["sass"]._actions] == ["help"]
    assert set(sub.choices) == set(COMMANDS)


# -- option spelling and usage lines --

def test_abbreviated_option_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """``--round 3`` must not mean ``--rounds 3``."""
    with pytest.raises(SystemExit) as exc:
        cli_main(["reproduce", "--round", "3", "--no-sass"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --round 3" in err
    assert "usage: flashrepro reproduce" in err


@pytest.mark.parametrize("command", ["gate", "sass", "bench", "doctor"])
def test_wrong_option_shows_the_subcommands_usage(command: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    argv = [command, "--no-such-option"] + (["--results", "r.json"] if command == "gate" else [])
    with pytest.raises(SystemExit) as exc:
        cli_main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: flashrepro {command} "), err
    assert f"flashrepro {command}: error: unrecognized arguments: --no-such-option" in err


def test_every_parser_refuses_abbreviations() -> None:
    """Every ``ArgumentParser(`` in the package and the GPU scripts says allow_abbrev=False."""
    for path in [*(REPO / "src").rglob("*.py"), *(REPO / "reproduce").rglob("*.py")]:
        text = path.read_text()
        for start in [i for i in range(len(text)) if text.startswith("ArgumentParser(", i)]:
            call = text[start:text.index(")\n", start)]
            assert "allow_abbrev=False" in call, f"{path}: {call}"
    parser = build_parser()
    assert parser.allow_abbrev is False
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert all(p.allow_abbrev is False for p in sub.choices.values())


# -- output files that cannot be written --

def test_sass_markdown_under_a_file_is_refused_before_compiling(
        tmp_path: Path, no_compile: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exc:
        cli_main(["sass", "--markdown", str(blocker / "sass.md")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --markdown: cannot write" in err and "is a file, not a folder" in err
    assert not no_compile, "compiled before checking --markdown"


def test_sass_markdown_into_a_missing_folder_creates_it(
        tmp_path: Path, no_compile: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    md = tmp_path / "new" / "deeper" / "sass.md"
    assert cli_main(["sass", "--markdown", str(md)]) == 0
    assert md.read_text() == _fake_report()["markdown"]
    assert capsys.readouterr().out.startswith("SASS static counts")


def test_sass_markdown_that_is_a_folder_is_refused(tmp_path: Path, no_compile: list[int],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["sass", "--markdown", str(tmp_path)])
    assert "argument --markdown: cannot write" in capsys.readouterr().err


def test_gate_summary_under_a_file_is_refused(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exc:
        cli_main(["gate", "--results", str(tmp_path / "r.json"), "--summary",
                  str(blocker / "out" / "summary.md")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --summary: cannot write" in err and "is a file, not a folder" in err


def test_unwritable_folder_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule for a folder this user cannot write into (simulated: the tests may run as
    root, who may write anywhere)."""
    real = os.access
    monkeypatch.setattr(outputs.os, "access",
                        lambda p, mode: False if Path(p) == tmp_path else real(p, mode))
    reason = outputs.unwritable_reason(tmp_path / "sub" / "x.md")
    assert reason is not None and f"folder {tmp_path} is not writable" in reason
    assert outputs.unwritable_reason(tmp_path.parent / "x.md") is None


def test_write_error_names_the_option(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(outputs.OutputError, match=r"^--summary .*a-file/x.md: cannot write"):
        outputs.write_text("--summary", blocker / "x.md", "text")


def test_atomic_write_keeps_the_old_file_on_failure_and_its_mode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails halfway leaves the old file whole and no temporary file; a written
    file keeps the old one's permission bits; a symbolic link is written through."""
    path = tmp_path / "baseline.json"
    path.write_text("old")
    path.chmod(0o640)
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        outputs.write_atomic(path, "new" * 1000)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == [path.name]
    monkeypatch.setattr(outputs.os, "fsync", real_fsync)
    outputs.write_atomic(path, "new")
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o640
    link = tmp_path / "link.json"
    link.symlink_to(path)
    outputs.write_atomic(link, "through")
    assert link.is_symlink() and path.read_text() == "through"


# -- refusals instead of silent no-ops --

def test_reproduce_out_without_a_gpu_says_nothing_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("FLASHREPRO_RESULTS_DIR", raising=False)
    monkeypatch.delenv("FLASHREPRO_REQUIRE_GPU", raising=False)
    out = tmp_path / "results"
    assert cli_main(["reproduce", "--no-sass", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"nothing written to {out} (--out" in err
    assert not out.exists()


@pytest.mark.parametrize("argv, require", [(["--gate"], "0"), (["--update-baseline"], "0"),
                                           ([], "1")])
def test_reproduce_that_needs_timings_fails_before_compiling_without_a_gpu(
        argv: list[str], require: str, no_compile: list[int],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a GPU, --gate, --update-baseline and FLASHREPRO_REQUIRE_GPU=1 fail at once
    (exit 1, the reason on stderr), not after minutes of SASS compiles; a plain run still
    prints the SASS table and exits 0."""
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("FLASHREPRO_RESULTS_DIR", raising=False)
    monkeypatch.setenv("FLASHREPRO_REQUIRE_GPU", require)
    assert cli_main(["reproduce", *argv]) == 1
    captured = capsys.readouterr()
    assert "timing needs a CUDA GPU (torch sees none), and --gate, --update-baseline and " \
           "FLASHREPRO_REQUIRE_GPU=1 need the timings: failing" in captured.err
    assert no_compile == [] and captured.out == ""
    monkeypatch.setenv("FLASHREPRO_REQUIRE_GPU", "0")
    assert cli_main(["reproduce"]) == 0
    assert no_compile == [1] and "sm_90" in capsys.readouterr().out


def test_triton_interpret_set_after_import_gets_a_hint() -> None:
    """In a fresh process: import flashrepro, then set TRITON_INTERPRET=1, then call it on
    CPU tensors. Triton alone says '0 active drivers'; validate says what to do."""
    code = ("import os, torch, flashrepro\n"
            "os.environ['TRITON_INTERPRET'] = '1'\n"
            "q = torch.randn(1, 1, 16, 16, dtype=torch.float16)\n"
            "try:\n"
            "    flashrepro.attention(q, q, q)\n"
            "except ValueError as exc:\n"
            "    print('ValueError:', exc)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ValueError: q, k and v are CPU tensors and TRITON_INTERPRET=1 is set, but it was " \
           "set after flashrepro was imported" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "before the first import of flashrepro" in out.stdout


# -- the SASS table in a terminal --

def test_sass_terminal_table_is_compact_and_markdown_full() -> None:
    report = _fake_report()
    widths = [len(line) for line in report["text"].splitlines()]
    assert max(widths) <= 120, max(widths)
    wide = sass_mod.format_tables(report, wide=True)
    assert max(len(line) for line in wide.splitlines()) > 120
    header = next(line for line in report["markdown"].splitlines() if line.startswith("| kernel"))
    assert all(f" {c} " in header for c in CLASS_NAMES), header
    assert all(str(3000 + i) in report["markdown"] for i in range(len(CLASS_NAMES)))


def test_sass_wide_prints_every_class(no_compile: list[int],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["sass", "--wide"]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in CLASS_NAMES)
    assert out.strip() == sass_mod.format_tables(_fake_report(), wide=True).strip()


# -- progress --

def test_progress_lines_go_to_stderr_only(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("FLASHREPRO_PROGRESS", raising=False)
    items = list(progress.progress(range(7), "sass compiles", unit="kernel"))
    assert items == list(range(7))
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0].startswith("sass compiles:") and "0/7" in lines[0]
    assert "7/7" in lines[-1] and "\r" not in captured.err


def test_progress_off(monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLASHREPRO_PROGRESS", "0")
    assert list(progress.progress(iter("abc"), "x", total=3)) == ["a", "b", "c"]
    assert capsys.readouterr() == ("", "")


def test_gate_verdict_json_is_written_not_the_input(tmp_path: Path) -> None:
    """gate --verdict-json writes the verdict there; --results is only read (more in
    tests/test_gate.py)."""
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"schema": "other"}))
    before = bad.read_text()
    assert cli_main(["gate", "--results", str(bad), "--verdict-json",
                     str(tmp_path / "v.json")]) == 4
    assert bad.read_text() == before


# -- nox -s docker: a client that cannot build --

@functools.cache
def _noxfile() -> Any:
    """noxfile.py as a module; the test is skipped where nox is not installed (a bare GPU host
    runs the suite with plain pytest)."""
    import importlib.util
    pytest.importorskip("nox")
    spec = importlib.util.spec_from_file_location("noxfile_under_test", REPO / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_docker(path: Path, version: str, buildx: bool) -> Path:
    path.write_text("#!/bin/sh\n"
                    f'[ "$1" = --version ] && echo "Docker version {version}, build a" '
                    "&& exit 0\n"
                    f'[ "$1" = buildx ] && exit {0 if buildx else 1}\n'
                    "exit 1\n")
    path.chmod(0o755)
    return path


def test_docker_client_without_buildx_is_explained(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    nf = _noxfile()
    (tmp_path / "new").mkdir()
    (tmp_path / "old").mkdir()
    new = _fake_docker(tmp_path / "new" / "docker", "28.2.2", buildx=False)
    # Only the fake clients: a host with Debian's docker.io in /usr/bin must not change the answer.
    monkeypatch.setattr(nf, "DOCKER_CLIENT_FALLBACK_DIRS", ())
    monkeypatch.setenv("PATH", str(tmp_path / "new"))
    problem = nf.docker_client_problem(str(new))
    assert problem is not None and "without the buildx plugin" in problem
    assert "install the buildx plugin" in problem and "DOCKER=/usr/bin/docker" in problem
    old = _fake_docker(tmp_path / "old" / "docker", "20.10.24+dfsg1", buildx=False)
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "new"), str(tmp_path / "old")]))
    assert f"DOCKER={old} nox -s docker" in nf.docker_client_problem(str(new))
    monkeypatch.setenv("PATH", str(tmp_path / "new"))       # found in a fallback folder too
    monkeypatch.setattr(nf, "DOCKER_CLIENT_FALLBACK_DIRS", (str(tmp_path / "old"),))
    assert f"DOCKER={old} nox -s docker" in nf.docker_client_problem(str(new))
    assert nf.docker_client_problem(str(old)) is None
    assert nf.docker_client_problem(str(_fake_docker(tmp_path / "x", "28.2.2", True))) is None
    assert "no working Docker client" in nf.docker_client_problem(str(tmp_path / "missing"))


@pytest.mark.parametrize("flag", ["--gate", "--update-baseline"])
def test_gated_reproduce_refuses_too_few_rounds(flag: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The gate's test needs MIN_SAMPLES rounds to be able to reject: fewer is refused up front
    with the rule, not judged "inconclusive" after the timing."""
    assert cli_main(["reproduce", "--no-sass", flag, "--rounds", "5"]) == 2
    err = capsys.readouterr().err
    assert "need --rounds >= 6: at fewer rounds the one-sided Wilcoxon" in err and "got 5" in err


@pytest.mark.parametrize("url,label", [
    ("https://user:token@github.com/o/flashrepro.git", "https://github.com/o/flashrepro.git"),
    ("https://github.com/o/flashrepro", "https://github.com/o/flashrepro"),
    ("", ""),
])
def test_image_source_label_carries_no_credentials(url: str, label: str) -> None:
    assert _noxfile().public_url(url) == label


RESULTS_H200 = Path(__file__).resolve().parents[1] / "reproduce" / "results" / "nvidia-h200"


def _halves(tmp_path: Path, change: Any = None) -> list[str]:
    """The committed model.json split into its eager and compiled halves (two mergeable
    parts), each row passed through ``change``."""
    whole = json.loads((RESULTS_H200 / "model.json").read_text())
    paths = []
    for mode in ("eager", "compile"):
        part = {**whole, "rows": [dict(r) for r in whole["rows"] if r["mode"] == mode]}
        for row in part["rows"]:
            if change is not None:
                change(row)
        path = tmp_path / f"{mode}.json"
        path.write_text(json.dumps(part))
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("case", ["deep", "zero-medians", "string-ms", "out-is-a-file"])
def test_model_merge_refuses_bad_parts_by_name(case: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """One line naming the file or option, exit 2, nothing written (a ZeroDivisionError,
    a RecursionError or a FileExistsError traceback before; --out is now checked when the
    arguments are parsed)."""
    out = tmp_path / "out"
    if case == "deep":
        deep = tmp_path / "deep.json"
        deep.write_text("[" * 100_000 + "]" * 100_000)
        parts, expect = [str(deep), str(deep)], "nested too deeply"
    elif case == "zero-medians":
        parts = _halves(tmp_path, lambda r: r.update(round_medians_ms=[0.0]))
        expect = "round_medians_ms [0.0]"
    elif case == "string-ms":
        parts, expect = _halves(tmp_path, lambda r: r.update(ms="fast")), "has ms 'fast'"
    else:
        parts, expect = _halves(tmp_path), "it is a file, not a folder"
        out.write_text("")
    try:
        code = cli_main(["model", "--merge", *parts, "--out", str(out)])
    except SystemExit as exc:  # argparse's refusal of --out
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err
    assert case == "out-is-a-file" or not out.exists()


@pytest.mark.parametrize("body", [{"kernels": []}, "no-registers"])
def test_a_golden_file_with_a_bad_body_is_refused_by_name(body: Any, tmp_path: Path) -> None:
    from flashrepro_harness.analysis import golden

    doc = json.loads(golden.default_path().read_text())
    if body == "no-registers":
        for entry in next(iter(doc["kernels"].values())).values():
            del entry["registers"]
    else:
        doc.update(body)
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"'kernels' must map|must hold classes"):
        golden.load(path)


def test_profile_with_a_missing_ncu_path_is_an_error(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """An ncu named with --ncu-path that is not there is not a skip (exit 0) but an error."""
    assert cli_main(["profile", "--ncu-path", str(tmp_path / "nope")]) == 2
    assert "--ncu-path" in capsys.readouterr().err


def test_readme_check_names_bad_model_results(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Zero round medians in --model-results: exit 4 with the files named, no traceback."""
    whole = json.loads((RESULTS_H200 / "model.json").read_text())
    for row in whole["rows"]:
        row["round_medians_ms"] = [0.0] * len(row["round_medians_ms"])
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps(whole))
    assert cli_main(["readme", "--check", "--model-results", str(bad)]) == 4
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err


@pytest.mark.parametrize(("argv", "message"), [
    (["bench", "--dtypes", "float32"], "invalid choice: 'float32'"),
    (["bench", "--head-dims", "300"], "head dims run up to 256"),
    (["tune", "--head-dims", "0"], "--head-dims"),
    (["profile", "--timeout", "nan"], "finite number of seconds"),
    (["profile", "--timeout", "0"], "finite number of seconds"),
])
def test_sweep_options_are_checked_before_any_work(argv: list[str], message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["bench", "model", "profile", "reproduce"])
def test_an_out_folder_that_is_a_file_is_refused_before_any_work(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exc:
        cli_main([command, "--out", str(blocker)])
    assert exc.value.code == 2
    assert "--out" in (err := capsys.readouterr().err) and "not a folder" in err


@pytest.mark.parametrize(("missing", "argv"), [
    ("scipy", ["gate", "--results", "reproduce/results/nvidia-h200/reproduce.json"]),
    ("tabulate", ["readme", "--check"]),
])
def test_a_missing_extra_is_named_with_its_install_line(missing: str, argv: list[str]) -> None:
    """``pip install .`` installs the kernels' dependencies alone and still creates the
    ``flashrepro`` script: a command whose module is missing names the extra, exit 2. It was
    a ModuleNotFoundError traceback, exit 1, which a CI script reads as the gate's
    regression."""
    code = (f"import sys; sys.modules[{missing!r}] = None\n"  # import raises ModuleNotFoundError
            "from flashrepro_harness.cli import main\n"
            f"sys.exit(main({argv!r}))")
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(repo / "src")},
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'flashrepro[harness]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_broken_submodule_is_not_called_a_missing_extra() -> None:
    """A submodule missing from an installed package is a broken install, which pip's
    `install 'flashrepro[harness]'` would call satisfied: it stays a traceback."""
    code = ("import sys; sys.modules['scipy.stats._stats_py'] = None\n"
            "from flashrepro_harness.cli import main\n"
            "sys.exit(main(['gate', '--results', "
            "'reproduce/results/nvidia-h200/reproduce.json']))")
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(repo / "src")},
                          timeout=120)
    assert proc.returncode == 1 and "pip install" not in proc.stderr
    assert "ModuleNotFoundError" in proc.stderr


def test_a_merge_without_matplotlib_is_refused_before_reading() -> None:
    """``model --merge`` (and bench and model's measurements, after the GPU check) draw
    their plot last: without matplotlib they are refused first, naming the 'plot' extra,
    instead of failing after the work with the tables written and no plot."""
    code = ("import importlib.util, sys\n"  # matplotlib not found
            "find = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: (None if name == 'matplotlib'\n"
            "                                             else find(name, *a))\n"
            "from flashrepro_harness.cli import main\n"
            "sys.exit(main(['model', '--generate', '--merge', 'no-such.json', "
            "'--out', sys.argv[1]]))")
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code, str(repo / "no-such-out")], cwd=repo,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(repo / "src")}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'flashrepro[plot]'" in proc.stderr
