"""README.md's tables are generated from the committed results JSON (flashrepro.readme): they
match it, and the generator shows new records and optional columns when the data has them."""

from __future__ import annotations

import copy
import json

import pytest

from flashrepro import readme

RESULTS = json.loads(readme.RESULTS.read_text())


def test_readme_tables_match_the_results() -> None:
    text = readme.README.read_text()
    assert readme.render(text, RESULTS) == text, (
        "README tables drifted from the results: python -m flashrepro readme --write")


def test_readme_is_short() -> None:
    assert len(readme.README.read_text().splitlines()) <= 150


def test_every_record_is_a_row_and_a_drift_is_caught() -> None:
    table = readme.headline(RESULTS)
    for record in RESULTS["records"]:
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
    assert "host µs" not in readme.headline(RESULTS).splitlines()[0]


def test_missing_markers_are_an_error() -> None:
    with pytest.raises(ValueError, match="begin: headline"):
        readme.render("no tables here\n", RESULTS)
