"""README.md's tables are generated from the committed results JSON (flashrepro_harness.readme):
they match it, and the generator shows new records and optional columns when the data has them."""

from __future__ import annotations

import copy
import json

import pytest

from flashrepro_harness import readme
from flashrepro_harness.results import REFERENCE_PREFIX

RESULTS = json.loads(readme.RESULTS.read_text())
MODEL = json.loads(readme.MODEL_RESULTS.read_text())


def test_readme_tables_match_the_results() -> None:
    text = readme.README.read_text()
    assert readme.render(text, RESULTS, MODEL) == text, (
        "README tables drifted from the results: python -m flashrepro_harness readme --write")


def test_the_model_table_follows_model_json() -> None:
    """Every timed shape is a row; a changed tokens/s or ratio changes the README."""
    table = readme.model(MODEL)
    for row in MODEL["rows"]:
        assert f"{row['batch']} x {row['seqlen']}" in table
        assert f"{row['tokens_per_s'] / 1e3:.0f}" in table
    changed = copy.deepcopy(MODEL)
    changed["rows"][0]["tokens_per_s"] *= 2
    text = readme.README.read_text()
    assert readme.render(text, RESULTS, changed) != text


def test_the_model_table_shows_each_ratios_round_range_and_gpu_busy() -> None:
    """The range comes from the rows' round medians (round r of frepro against round r of the
    best SDPA backend), GPU busy from the profiled kernel time: a slower frepro round widens
    the range in the README, a changed kernel time changes GPU busy."""
    from flashrepro_harness.qwen3 import tables

    frepro = [r for r in MODEL["rows"] if r["impl"] == "frepro"]
    table = readme.model(MODEL)
    for row in frepro:
        best = tables.best_sdpa([r for r in MODEL["rows"] if (r["mode"], r["batch"], r["seqlen"])
                            == (row["mode"], row["batch"], row["seqlen"])])
        lo, hi = tables.ratio_round_range(row, best)
        # The median is monotone: if every round's ratio is at least lo, so is the medians'.
        assert lo * (1 - 1e-12) <= row["ratio_to_best_sdpa"] <= hi * (1 + 1e-12)
        assert f"({lo:.3f}-{hi:.3f})" in table
    changed = copy.deepcopy(MODEL)
    row = next(r for r in changed["rows"] if r["impl"] == "frepro")
    row["round_medians_ms"][0] *= 3
    row["gpu_us"] *= 0.5
    lo, _ = tables.ratio_round_range(row, tables.best_sdpa([r for r in changed["rows"] if (
        r["mode"], r["batch"], r["seqlen"]) == (row["mode"], row["batch"], row["seqlen"])]))
    assert f"({lo:.3f}-" in readme.model(changed) and f"({lo:.3f}-" not in table
    assert f"{tables.gpu_busy(row):.2f}" in readme.model(changed)


def test_the_setup_line_names_gpu_versions_and_commit() -> None:
    line = readme.setup(RESULTS)
    env = RESULTS["env"]
    for part in (env["gpu"]["name"], env["gpu"]["driver"], env["torch"], env["triton"],
                 env["git_commit"]):
        assert part in line


def test_the_setup_line_names_the_reference_of_a_paired_verdict() -> None:
    """A PASS paired with a reference says which: its commit, A/A (the reference's commit is
    recorded short, the run's in full), or that the commit was not recorded (a copy without
    .git), rather than nothing."""
    gate = {"status": "pass", "exit_code": 0}
    commit = RESULTS["env"]["git_commit"]
    for reference, said in ((None, "(exit 0)."), ({"src": "/r/src", "commit": None},
                                                    "of unrecorded commit."),
                            ({"src": "/r/src", "commit": commit}, "same commit (A/A)."),
                            ({"src": "/r/src", "commit": commit[:7]}, "same commit (A/A)."),
                            ({"src": "/r/src", "commit": "abc123"}, "paired with abc123.")):
        line = readme.setup({**RESULTS, "gate": gate, "reference": reference})
        assert line.endswith(said), line


def test_readme_is_short() -> None:
    assert len(readme.README.read_text().splitlines()) <= 150


def test_every_record_is_a_row_and_a_drift_is_caught() -> None:
    """Every kernel record is in the headline; the gate's reference twins are not (they time
    the reference commit's code, an input of the gate, not a kernel of the table)."""
    table = readme.headline(RESULTS)
    twins = [r for r in RESULTS["records"] if r["name"].startswith(REFERENCE_PREFIX)]
    for record in RESULTS["records"]:
        if record in twins:
            assert f"`{record['name']}`" not in table
            continue
        assert f"{record['median_us']:.1f}" in table
    changed = copy.deepcopy(RESULTS)
    changed["records"][0]["median_us"] += 1.0
    text = readme.README.read_text()
    assert readme.render(text, changed) != text


def test_new_records_and_optional_fields_appear() -> None:
    data = copy.deepcopy(RESULTS)
    first = data["records"][0]
    data["records"].append({**first, "name": "fa4-cute", "median_us": 12.345,
                            "ratio_vs_torch_flash": 0.2025})
    first["host_us"] = 249.0
    first["eager_us"] = 251.5
    table = readme.headline(data)
    assert "`fa4-cute`" in table and "12.3" in table and "0.203" in table
    header = table.splitlines()[0]
    assert "host µs" in header and "eager µs" in header
    assert "249.0" in table and "251.5" in table
    bare = copy.deepcopy(RESULTS)
    for record in bare["records"]:
        record.pop("host_us", None)
        record.pop("eager_us", None)
    assert "host µs" not in readme.headline(bare).splitlines()[0]


def test_missing_markers_are_an_error() -> None:
    with pytest.raises(ValueError, match="begin: setup"):
        readme.render("no tables here\n", RESULTS)


def test_the_model_header_names_the_range_only_when_a_cell_shows_one() -> None:
    """A header that promises per-round ranges must not sit over cells without them: rows
    without round medians (older results) give no range and no promise."""
    bare = copy.deepcopy(MODEL)
    for row in bare["rows"]:
        row.pop("round_medians_ms", None)
    header = readme.model(bare).splitlines()[0]
    assert "frepro / best SDPA" in header and "per-round range" not in header
    assert "(" not in "".join(readme.model(bare).splitlines()[2:])
    assert "per-round range" in readme.model(MODEL).splitlines()[0]


def test_readme_command_says_what_it_checked(tmp_path, capsys) -> None:
    """--check names the README and both results files, whether the tables match or not, and
    every option has a help text."""
    from flashrepro_harness.cli import build_parser, main

    assert main(["readme", "--check"]) == 0
    assert "match reproduce/results/nvidia-h200/reproduce.json and " \
           "reproduce/results/nvidia-h200/model.json" in capsys.readouterr().out
    drifted = tmp_path / "README.md"
    drifted.write_text(readme.README.read_text().replace("<!-- end: setup -->",
                                                         "stale\n<!-- end: setup -->"))
    assert main(["readme", "--check", "--readme", str(drifted)]) == 1
    out = capsys.readouterr().out
    assert f"tables in {drifted} differ" in out and "readme --write" in out
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["readme"]
    assert all(a.help for a in sub._actions), [a.dest for a in sub._actions if not a.help]


@pytest.mark.parametrize("option", ["--readme", "--results", "--model-results"])
def test_readme_command_names_a_missing_file_and_its_option(option: str, tmp_path,
                                                            capsys) -> None:
    """Outside a checkout README.md and the results are missing: the command names the file
    and the option that takes its path, exit 4 (unusable input), no traceback."""
    from flashrepro_harness.cli import main

    missing = tmp_path / "nowhere" / "file"
    assert main(["readme", "--check", option, str(missing)]) == 4
    err = capsys.readouterr().err
    assert err.startswith(f"readme: {option}: no such file: {missing}")
    assert f"give the path with {option}" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1
