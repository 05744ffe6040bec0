"""The gate's paired reference: a record timed beside its twin from a reference checkout
(``reproduce --reference-src``) is judged by the per-round ratio to the twin, and the committed
baseline's offset no longer decides (docs/gate.md, lab/2026-12-01-gate-power/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flashrepro_harness.gate import ExitCode, check, update_baseline
from flashrepro_harness.gate.check import MMA_SYNC_ROWS, required_rows
from flashrepro_harness.gate.simulate import results_from_rounds, synthetic_env
from flashrepro_harness.gate.stats import compare_paired
from flashrepro_harness.results import REFERENCE_PREFIX, split_name

ROUNDS = 100


def _rounds(rng: np.random.Generator, *, slowdown: float = 0.0, offset: float = 0.0,
            cv: float = 0.005) -> dict[str, list[float]]:
    """Per-round µs of torch-flash, flashrepro and its reference twin. Each round shares one
    machine factor (clocks); ``offset`` moves flashrepro and its twin alike (a process or a
    baseline offset), ``slowdown`` only flashrepro (the code under test)."""
    machine = 1.0 + 0.02 * rng.standard_normal(ROUNDS)
    noise = lambda: 1.0 + cv * rng.standard_normal(ROUNDS)
    torch_flash = 61.0 * machine * noise()
    twin = 26.0 * (1 + offset) * machine * noise()
    head = 26.0 * (1 + offset) * (1 + slowdown) * machine * noise()
    return {"torch-flash": torch_flash.tolist(), "flashrepro": head.tolist(),
            REFERENCE_PREFIX + "flashrepro": twin.tolist()}


def _results(rounds: dict[str, list[float]]) -> dict:
    res = results_from_rounds(rounds, synthetic_env())
    res["reference"] = {"src": "/tmp/base/src", "commit": "abc1234"}
    return res


@pytest.fixture
def baseline_dir(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    rounds = _rounds(rng)
    del rounds[REFERENCE_PREFIX + "flashrepro"]
    update_baseline(results_from_rounds(rounds, synthetic_env()), tmp_path / "baselines")
    return tmp_path / "baselines"


@pytest.mark.parametrize("seed", range(5))
def test_a_baseline_offset_does_not_fail_an_unchanged_kernel(baseline_dir: Path,
                                                              seed: int) -> None:
    # +4 % on both flashrepro and its twin: the committed baseline alone would call it a
    # regression; the pair says the code did not change.
    res = _results(_rounds(np.random.default_rng(100 + seed), offset=0.04))
    verdict = check(res, baseline_dir)
    assert verdict.exit_code == ExitCode.PASS, verdict.markdown
    assert [c.record for c in verdict.paired] == ["flashrepro"]
    assert not verdict.comparisons  # flashrepro is judged by its pair only
    (info,) = verdict.against_baseline
    assert info.slower and abs(info.change - 0.04) < 0.01
    assert any("paired reference decides" in w for w in verdict.warnings)


@pytest.mark.parametrize("seed", range(5))
def test_a_three_percent_code_slowdown_fails_even_with_a_fast_baseline(baseline_dir: Path,
                                                                       seed: int) -> None:
    # -3 % offset on both: against the baseline the change reads ~0 % and would pass.
    res = _results(_rounds(np.random.default_rng(200 + seed), slowdown=0.03, offset=-0.03))
    verdict = check(res, baseline_dir)
    assert verdict.exit_code == ExitCode.REGRESSION, verdict.markdown
    (c,) = verdict.paired
    assert c.slower and c.metric == "paired" and 0.025 < c.change < 0.035
    assert verdict.regressions == [c]
    assert "Paired with the reference" in verdict.markdown and "abc1234" in verdict.markdown


def _every_row(rng: np.random.Generator, *, slowdown: float = 0.0) -> dict[str, list[float]]:
    """:func:`_rounds` for each of the rows every reproduce run on an H200 has
    (gate.check.required_rows), each suffix with its own torch-flash."""
    out: dict[str, list[float]] = {}
    for row in required_rows({"causal": True}, {"capability": "9.0"}):
        suffix = split_name(row)[1]
        rows = _rounds(rng, slowdown=slowdown)
        out[f"torch-flash{suffix}"] = rows["torch-flash"]
        out[row] = rows["flashrepro"]
        out[f"{REFERENCE_PREFIX}{row}"] = rows[REFERENCE_PREFIX + "flashrepro"]
    return out


def test_paired_runs_are_judged_without_a_committed_baseline(tmp_path: Path) -> None:
    """A baseline folder without this GPU's file: the pair alone decides, on every row each
    run has; a run without one of them fails (no baseline says which rows it must have). A
    missing folder is refused (a misspelled --baseline-dir must not pass)."""
    from flashrepro_harness.gate import BaselineError

    rng = np.random.default_rng(3)
    (tmp_path / "empty").mkdir()
    ok = check(_results(_every_row(rng)), tmp_path / "empty")
    slow = check(_results(_every_row(rng, slowdown=0.05)), tmp_path / "empty")
    assert (ok.exit_code, slow.exit_code) == (ExitCode.PASS, ExitCode.REGRESSION), ok.markdown
    assert any("paired reference alone" in w for w in ok.warnings)
    dropped = check(_results(_rounds(rng)), tmp_path / "empty")
    assert dropped.exit_code == ExitCode.KERNEL_FAILURE
    assert {f["record"] for f in dropped.failures} == {
        "flashrepro-article-config", "article-kernel", "flashrepro (non-causal)",
        "flashrepro-article-config (non-causal)", "article-kernel (non-causal)",
        *MMA_SYNC_ROWS}
    with pytest.raises(BaselineError, match="no such folder"):
        check(_results(_rounds(rng)), tmp_path / "none")


def test_an_environment_change_leaves_the_pair_judged(baseline_dir: Path) -> None:
    res = _results(_rounds(np.random.default_rng(4), slowdown=0.05))
    res["env"]["torch"] = "9.9.9"
    verdict = check(res, baseline_dir)
    assert verdict.exit_code == ExitCode.REGRESSION
    assert any("only the paired comparisons" in w for w in verdict.warnings)
    unpaired = results_from_rounds({k: v for k, v in _rounds(np.random.default_rng(4)).items()
                                    if not k.startswith(REFERENCE_PREFIX)}, res["env"])
    assert check(unpaired, baseline_dir).exit_code == ExitCode.ENV_MISMATCH


def test_a_twin_with_other_rounds_is_refused(baseline_dir: Path) -> None:
    from flashrepro_harness.gate import ResultsError

    res = _results(_rounds(np.random.default_rng(5)))
    twin = next(r for r in res["records"] if r["name"] == REFERENCE_PREFIX + "flashrepro")
    twin["round_medians_us"] = twin["round_medians_us"][:50]
    with pytest.raises(ResultsError, match="twin has 50"):
        check(res, baseline_dir)


def test_update_baseline_keeps_twins_out_of_the_baseline(tmp_path: Path) -> None:
    import json

    verdict = update_baseline(_results(_rounds(np.random.default_rng(6))), tmp_path)
    stored = json.loads(verdict.baseline_path.read_text())
    assert sorted(stored["records"]) == ["flashrepro", "torch-flash"]


@pytest.mark.parametrize(("slowdown", "flagged"), [(0.0, False), (0.01, False), (0.05, True)])
def test_compare_paired_rule(slowdown: float, flagged: bool) -> None:
    rng = np.random.default_rng(7)
    ref = 26.0 * (1 + 0.03 * rng.standard_normal(ROUNDS))  # rounds move together ...
    cur = ref * (1 + slowdown) * (1 + 0.003 * rng.standard_normal(ROUNDS))  # ... pairs agree
    c = compare_paired(cur.tolist(), ref.tolist(), record="flashrepro")
    assert c.slower is flagged
    assert c.ci_low <= c.change <= c.ci_high
    assert abs(c.change - slowdown) < 0.002


@pytest.mark.parametrize("seed", range(10))
def test_compare_paired_at_the_threshold_is_not_flagged(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ref = np.full(ROUNDS, 26.0)
    cur = ref * 1.02 * (1 + 0.003 * rng.standard_normal(ROUNDS))
    c = compare_paired(cur.tolist(), ref.tolist(), record="flashrepro")
    assert not c.slower and c.p_value > 0.001


@pytest.mark.parametrize(("cur", "ref", "match"), [
    ([1.0] * 10, [1.0] * 9, "same rounds"),
    ([1.0] * 5, [1.0] * 5, "at least 6"),
    ([1.0] * 9 + [float("nan")], [1.0] * 10, "finite"),
])
def test_compare_paired_rejects_unusable_samples(cur: list[float], ref: list[float],
                                                 match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compare_paired(cur, ref, record="flashrepro")


def test_a_reference_that_did_not_load_is_said_and_the_baseline_judges(baseline_dir: Path
                                                                      ) -> None:
    rounds = _rounds(np.random.default_rng(8), slowdown=0.05)
    del rounds[REFERENCE_PREFIX + "flashrepro"]
    res = results_from_rounds(rounds, synthetic_env())
    res["reference"] = {"src": "../base/src", "error": "No module named 'newdep'"}
    verdict = check(res, baseline_dir)
    assert verdict.exit_code == ExitCode.REGRESSION and not verdict.paired
    assert any("did not load" in w and "newdep" in w for w in verdict.warnings)


@pytest.mark.parametrize("rounds", [20, ROUNDS])
def test_a_slowdown_of_exactly_the_threshold_in_every_round_is_not_flagged(rounds: int) -> None:
    """``cur = ref * 1.02`` in every round: the slowdown is the threshold, which the rule
    tolerates; float rounding of ``cur / ref`` (1.0200000000000000178) must not tip it over.
    A slowdown just above it (+1e-6 relative) still is flagged."""
    ref = np.random.default_rng(11).uniform(20.0, 30.0, rounds)
    at = compare_paired((ref * 1.02).tolist(), ref.tolist(), record="flashrepro")
    assert not at.slower, at
    above = compare_paired((ref * 1.02 * (1 + 1e-6)).tolist(), ref.tolist(), record="flashrepro")
    assert above.slower, above


def test_update_baseline_with_twins_shows_the_previous_baseline(tmp_path: Path) -> None:
    """A second --update-baseline of a paired run: its records are compared with the previous
    baseline (``against_baseline``), so the summary must not call it the history's first entry."""
    rng = np.random.default_rng(12)
    first = update_baseline(_results(_rounds(rng)), tmp_path)
    assert "the first entry of its history" in first.markdown
    second = update_baseline(_results(_rounds(rng)), tmp_path)
    assert [c.record for c in second.against_baseline] == ["flashrepro"]
    assert "the first entry of its history" not in second.markdown
    assert "comparison with the previous baseline" in second.markdown
    assert "| flashrepro | ratio to torch-flash |" in second.markdown


@pytest.mark.parametrize("reference", [{"src": "/tmp/base/src", "error": "ImportError: x",
                                        "commit": "abc1234"}, None],
                         ids=["did-not-load", "not-recorded"])
def test_twins_without_a_loaded_reference_are_refused(baseline_dir: Path,
                                                      reference: dict | None) -> None:
    """Twins in a run whose reference did not load (or is not recorded) were paired anyway,
    while the verdict warned that nothing was: such a file is refused."""
    from flashrepro_harness.gate import ResultsError

    res = _results(_rounds(np.random.default_rng(13)))
    if reference is None:
        del res["reference"]
    else:
        res["reference"] = reference
    with pytest.raises(ResultsError, match="has a reference twin, but the run's reference"):
        check(res, baseline_dir)
