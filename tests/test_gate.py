"""The performance gate on synthetic samples (CPU): decision rule, baselines, exit codes, output.

Synthetic runs come from :mod:`flashrepro_harness.gate.simulate` (article-config means, per-round
noise with heavy tails, drift shared by the kernels of a round, run-to-run machine factors).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashrepro_harness.cli import COMMANDS
from flashrepro_harness.commands import gate as command
from flashrepro_harness.gate import (
    BaselineError,
    ExitCode,
    ResultsError,
    check,
    compare,
    stats,
    update_baseline,
)
from flashrepro_harness.gate.baseline import SCHEMA, problem_key
from flashrepro_harness.gate.inject import ENV_VAR, requested
from flashrepro_harness.gate.simulate import (
    Noise,
    results_from_rounds,
    synthetic_env,
    synthetic_results,
    synthetic_rounds,
)
from flashrepro_harness.gate.stats import DEFAULT_THRESHOLD

ARTICLE_KEY = "b2-h16-q1024-k1024-d128-float16-causal"
SLOW_PROPERTY = settings(max_examples=15, deadline=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture])


def _run(seed: int, slowdown: float = 0.0, round_cv: float = 0.01, rounds: int = 100,
         env: dict | None = None, records: tuple[str, ...] = ("flashrepro",)) -> dict:
    return synthetic_results(np.random.default_rng(seed), rounds=rounds, slowdown=slowdown,
                             noise=Noise(round_cv=round_cv), env=env, records=records)


def _scaled(results: dict, names: tuple[str, ...], factor: float) -> dict:
    """``results`` with the round medians of ``names`` multiplied by ``factor``."""
    rounds = {r["name"]: [x * (factor if r["name"] in names else 1.0)
                          for x in r["round_medians_us"]] for r in results["records"]}
    return results_from_rounds(rounds, results["env"])


@pytest.fixture
def baseline_dir(tmp_path: Path) -> Path:
    d = tmp_path / "baselines"
    update_baseline(_run(seed=1), d)
    return d


# -- decision rule ----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [2, 3, 4])
def test_equal_distributions_pass(baseline_dir: Path, seed: int) -> None:
    v = check(_run(seed), baseline_dir)
    assert v.status == "pass" and v.exit_code == ExitCode.PASS
    (c,) = v.comparisons
    assert c.record == "flashrepro" and c.metric == "ratio" and not c.slower
    assert abs(c.change) < DEFAULT_THRESHOLD
    assert c.ci_low < DEFAULT_THRESHOLD


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_five_percent_slowdown_with_realistic_noise_fails(baseline_dir: Path, seed: int) -> None:
    v = check(_run(seed, slowdown=0.05, round_cv=0.02), baseline_dir)
    assert v.status == "regression" and v.exit_code == ExitCode.REGRESSION
    (c,) = v.regressions
    assert c.record == "flashrepro" and c.ci_low > DEFAULT_THRESHOLD and c.p_value < 0.025
    assert 0.03 < c.change < 0.07


def test_regression_of_one_record_among_several(tmp_path: Path) -> None:
    records = ("flashrepro", "article-kernel")
    update_baseline(_run(1, records=records), tmp_path)
    slow = _scaled(_run(2, records=records), ("article-kernel",), 1.06)
    v = check(slow, tmp_path)
    assert v.exit_code == ExitCode.REGRESSION
    assert [c.record for c in v.regressions] == ["article-kernel"]
    assert {c.record for c in v.comparisons} == set(records)


def test_faster_run_passes(baseline_dir: Path) -> None:
    v = check(_run(8, slowdown=-0.10), baseline_dir)
    assert v.exit_code == ExitCode.PASS
    assert v.comparisons[0].change < -0.05


def test_machine_slowdown_alone_is_only_a_warning(baseline_dir: Path) -> None:
    """Every kernel 15 % slower (clocks, a busy machine): ratio unchanged, µs warned."""
    slow = _scaled(_run(9), ("flashrepro", "torch-flash"), 1.15)
    v = check(slow, baseline_dir)
    assert v.exit_code == ExitCode.PASS
    assert {c.record for c in v.secondary if c.slower} == {"flashrepro", "torch-flash"}
    assert sum("absolute time" in w for w in v.warnings) == 2


def _with_outlier(results: dict, record: str, index: int, factor: float) -> dict:
    out = json.loads(json.dumps(results))
    for r in out["records"]:
        if r["name"] == record:
            r["round_medians_us"][index] *= factor
    return out


@SLOW_PROPERTY
@given(index=st.integers(0, 99), factor=st.sampled_from([0.15, 0.5, 3.0, 50.0]),
       record=st.sampled_from(["flashrepro", "torch-flash"]))
def test_one_outlier_round_does_not_flip_a_verdict(tmp_path_factory: pytest.TempPathFactory,
                                                   index: int, factor: float,
                                                   record: str) -> None:
    """A fast outlier stays above the time the work takes at the GPU's peak (0.15x the
    synthetic flashrepro round, about 1.4x the floor): a faster round is refused
    (``test_gate_faults.test_case8_times_faster_than_the_gpu_can_compute_are_refused``)."""
    d = tmp_path_factory.mktemp("b")
    update_baseline(_run(1), d)
    same, slow = _run(2), _run(3, slowdown=0.05)
    assert check(same, d).exit_code == ExitCode.PASS
    assert check(slow, d).exit_code == ExitCode.REGRESSION
    assert check(_with_outlier(same, record, index, factor), d).exit_code == ExitCode.PASS
    assert check(_with_outlier(slow, record, index, factor), d).exit_code == ExitCode.REGRESSION


@SLOW_PROPERTY
@given(factor=st.floats(0.5, 2.0), seed=st.integers(0, 2**16))
def test_ratio_verdict_ignores_a_machine_wide_speed_factor(factor: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = synthetic_rounds(rng, rounds=30)
    cur = synthetic_rounds(rng, rounds=30, slowdown=0.04)
    ratio = {k: np.divide(v["flashrepro"], v["torch-flash"]) for k, v in
             (("b", base), ("c", cur))}
    a = compare(ratio["c"], ratio["b"], record="x", metric="ratio")
    scaled = {k: np.asarray(v) * factor for k, v in cur.items()}
    b = compare(scaled["flashrepro"] / scaled["torch-flash"], ratio["b"], record="x",
                metric="ratio")
    assert a.slower == b.slower
    assert a.change == pytest.approx(b.change, rel=1e-9, abs=1e-12)


@SLOW_PROPERTY
@given(speedup=st.floats(0.0, 0.5), seed=st.integers(0, 2**16),
       cv=st.sampled_from([0.005, 0.01, 0.02]))
def test_a_run_no_slower_than_the_baseline_is_never_flagged(speedup: float, seed: int,
                                                            cv: float) -> None:
    rng = np.random.default_rng(seed)
    base = 0.77 * (1 + cv * rng.standard_normal(50))
    cur = base[rng.permutation(50)] * (1 - speedup)
    c = compare(cur, base, record="x", metric="ratio")
    assert not c.slower and c.change <= 1e-12


@pytest.mark.parametrize("bad", [[1.0] * 4, [1.0, 2.0, float("nan"), 1.0, 1.0],
                                 [1.0, 2.0, 0.0, 1.0, 1.0]])
def test_compare_rejects_unusable_samples(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="current must"):
        compare(bad, [1.0] * 10, record="x", metric="ratio")


def test_compare_rejects_bad_threshold() -> None:
    with pytest.raises(ValueError, match="threshold must be in"):
        compare([1.0] * 10, [1.0] * 10, record="x", metric="ratio", threshold=1.5)


# -- the rates the defaults were chosen for (simulation; lab/2026-11-29-gate-false-alarms/)

@pytest.mark.parametrize(("round_cv", "threshold", "slowdown"), [
    (0.005, DEFAULT_THRESHOLD, 0.05), (0.01, DEFAULT_THRESHOLD, 0.05),
    (0.02, DEFAULT_THRESHOLD, 0.05),
    (0.005, 0.015, 0.03),  # a quiet GPU with a 1.5 % threshold stored in its baseline
])
def test_simulated_false_alarms_and_detections(round_cv: float, threshold: float,
                                               slowdown: float) -> None:
    """One baseline, then 20 A/A runs and 20 slowed runs: no alarm, >= 19 caught."""
    rng = np.random.default_rng(2026)
    noise = Noise(round_cv=round_cv)

    def ratios(s: float) -> list[float]:
        r = synthetic_rounds(rng, rounds=100, noise=noise, slowdown=s)
        return list(np.divide(r["flashrepro"], r["torch-flash"]))

    base = ratios(0.0)
    flagged = {s: sum(compare(ratios(s), base, record="flashrepro", metric="ratio",
                              threshold=threshold).slower for _ in range(20))
               for s in (0.0, slowdown)}
    assert flagged[0.0] == 0
    assert flagged[slowdown] >= 19


# -- baselines, environment, exit codes ------------------------------------------------------

def test_no_baseline_exits_2_and_says_how_to_make_one(tmp_path: Path) -> None:
    v = check(_run(1), tmp_path, results_path="reproduce/results/nvidia-h200/reproduce.json")
    assert v.status == "no-baseline" and v.exit_code == ExitCode.NO_BASELINE
    assert v.baseline_path == tmp_path / "nvidia-h200" / f"{ARTICLE_KEY}.json"
    assert ("python -m flashrepro_harness gate --results "
            "reproduce/results/nvidia-h200/reproduce.json --update-baseline") in v.markdown
    assert not v.comparisons


def test_problem_key_of_the_article_config() -> None:
    assert problem_key(_run(1)["problem"]) == ARTICLE_KEY


@pytest.mark.parametrize(("field", "value"), [
    ("driver", "590.10.01"), ("torch", "2.12.0+cu130"), ("triton", "3.7.0"), ("cuda", "13.1"),
    ("sm_count", 114),
])
def test_software_or_hardware_mismatch_exits_3(baseline_dir: Path, field: str,
                                               value: object) -> None:
    v = check(_run(2, env=synthetic_env(**{field: value})), baseline_dir)
    assert v.status == "env-mismatch" and v.exit_code == ExitCode.ENV_MISMATCH
    assert [(d.field, d.current) for d in v.env_differences] == [(field, value)]
    assert not v.comparisons
    assert field in v.markdown and str(value) in v.markdown
    assert "--allow-env-mismatch" in v.markdown


def test_image_digest_compared_only_when_both_have_one(tmp_path: Path) -> None:
    update_baseline(_run(1, env=synthetic_env(image_digest="sha256:aaa")), tmp_path)
    assert check(_run(2), tmp_path).exit_code == ExitCode.PASS
    v = check(_run(2, env=synthetic_env(image_digest="sha256:bbb")), tmp_path)
    assert v.exit_code == ExitCode.ENV_MISMATCH
    assert [d.field for d in v.env_differences] == ["image_digest"]


def test_unknown_driver_counts_as_a_difference(baseline_dir: Path) -> None:
    v = check(_run(2, env=synthetic_env(driver=None)), baseline_dir)
    assert v.exit_code == ExitCode.ENV_MISMATCH
    assert [(d.field, d.baseline, d.current) for d in v.env_differences] == [
        ("driver", "580.159.03", None)]


def test_mismatched_gpu_key_in_the_baseline_file_is_refused(baseline_dir: Path) -> None:
    """A baseline copied under another GPU's folder is not used to judge this GPU."""
    src = baseline_dir / "nvidia-h200" / f"{ARTICLE_KEY}.json"
    dst = baseline_dir / "nvidia-h100-80gb-hbm3" / src.name
    dst.parent.mkdir()
    dst.write_text(src.read_text())
    v = check(_run(2, env=synthetic_env(gpu_key="nvidia-h100-80gb-hbm3")), baseline_dir)
    assert v.exit_code == ExitCode.ENV_MISMATCH
    assert ("gpu_key", "nvidia-h200", "nvidia-h100-80gb-hbm3") in [
        (d.field, d.baseline, d.current) for d in v.env_differences]


def test_timing_method_mismatch_exits_3(baseline_dir: Path) -> None:
    r = _run(2)
    r["method"]["calls_per_round"] = 50
    v = check(r, baseline_dir)
    assert v.exit_code == ExitCode.ENV_MISMATCH
    assert [d.field for d in v.env_differences] == ["method.calls_per_round"]


@pytest.mark.parametrize("field", ["calls_per_round", "timer", "l2"])
def test_a_timing_method_stated_on_one_side_only_differs(baseline_dir: Path,
                                                         field: str) -> None:
    """A results file that leaves a method field out is refused, paired or not (it does not
    say how it was timed); a baseline that leaves one out does not match the run's."""
    r = _run(2)
    del r["method"][field]
    with pytest.raises(ResultsError, match=f"'method.{field}' must be"):
        check(r, baseline_dir)
    path = next(baseline_dir.rglob("*.json"))
    stored = json.loads(path.read_text())
    del stored["method"][field]
    path.write_text(json.dumps(stored))
    v = check(_run(2), baseline_dir)
    assert v.exit_code == ExitCode.ENV_MISMATCH
    assert [d.field for d in v.env_differences] == [f"method.{field}"]


def test_results_that_are_not_a_plain_file_are_refused(tmp_path: Path) -> None:
    """A link could point at another run's results; a pipe would never end."""
    import os

    real = tmp_path / "reproduce.json"
    real.write_text(json.dumps(_run(1)))
    (tmp_path / "link.json").symlink_to(real)
    os.mkfifo(tmp_path / "pipe.json")
    for name, message in (("link.json", "a symbolic link"), ("pipe.json", "not a regular file")):
        assert cli_main(["gate", "--results", str(tmp_path / name), "--baseline-dir",
                         str(tmp_path)]) == ExitCode.BAD_INPUT, message


def test_allow_env_mismatch_compares_with_a_warning(baseline_dir: Path) -> None:
    env = synthetic_env(torch="2.12.0+cu130")
    v = check(_run(2, env=env), baseline_dir, allow_env_mismatch=True)
    assert v.exit_code == ExitCode.PASS and v.comparisons
    assert any("environment differs" in w and "torch: 2.11.0+cu130 -> 2.12.0+cu130" in w
               for w in v.warnings)
    v = check(_run(3, slowdown=0.05, env=env), baseline_dir, allow_env_mismatch=True)
    assert v.exit_code == ExitCode.REGRESSION


def test_update_baseline_writes_metadata_and_appends_history(tmp_path: Path) -> None:
    first = _run(1)
    first["env"]["git_commit"] = "a" * 40
    update_baseline(first, tmp_path, threshold=0.025)
    path = tmp_path / "nvidia-h200" / f"{ARTICLE_KEY}.json"
    b1 = json.loads(path.read_text())
    assert b1["schema"] == SCHEMA and b1["gpu_key"] == "nvidia-h200"
    assert b1["problem_key"] == ARTICLE_KEY
    for f in ("driver", "cuda", "torch", "triton", "image_digest", "sm_count"):
        assert f in b1["env"]
    assert b1["env"]["torch"] == "2.11.0+cu130" and b1["env"]["git_commit"] == "a" * 40
    assert b1["method"]["calls_per_round"] == 10 and b1["method"]["rounds"] == 100
    assert b1["gate"]["threshold"] == 0.025 and "Mann-Whitney" in b1["gate"]["rule"]
    rec = {r["name"]: r["round_medians_us"] for r in first["records"]}
    assert b1["records"]["torch-flash"]["round_medians_us"] == rec["torch-flash"]
    assert b1["records"]["flashrepro"]["round_ratios"] == pytest.approx(
        np.divide(rec["flashrepro"], rec["torch-flash"]).tolist(), rel=1e-12)
    (h1,) = b1["history"]
    assert h1["git_commit"] == "a" * 40
    assert h1["median_ratio"]["flashrepro"] == pytest.approx(
        np.median(np.divide(rec["flashrepro"], rec["torch-flash"])))
    assert h1["median_us"]["torch-flash"] == pytest.approx(np.median(rec["torch-flash"]))

    second = _run(2, slowdown=0.01, env=synthetic_env(torch="2.12.0+cu130"))
    second["env"]["git_commit"] = "b" * 40
    v = update_baseline(second, tmp_path)
    assert v.status == "baseline-updated" and v.exit_code == ExitCode.PASS
    assert [d.field for d in v.env_differences] == ["torch"]
    b2 = json.loads(path.read_text())
    assert b2["history"][0] == h1
    assert [h["git_commit"] for h in b2["history"]] == ["a" * 40, "b" * 40]
    assert b2["gate"]["threshold"] == 0.025  # kept from the previous baseline
    assert b2["env"]["torch"] == "2.12.0+cu130"


def test_drift_against_the_oldest_history_entry(tmp_path: Path) -> None:
    update_baseline(_run(1), tmp_path)
    update_baseline(_run(2, slowdown=0.015), tmp_path)
    v = check(_run(3, slowdown=0.03), tmp_path)
    (d,) = v.drift
    assert d["record"] == "flashrepro" and d["history_entries"] == 2
    assert 0.015 < d["change"] < 0.045
    assert v.comparisons[0].change < d["change"]  # the newest baseline hides part of it
    assert "**Drift**" in v.markdown


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda r: r["records"].pop(), "no timed 'torch-flash' record"),
    (lambda r: r["records"][0]["round_medians_us"].pop(), "per-round ratios need"),
    (lambda r: r["env"].update(gpu=None), "saw no GPU"),
    (lambda r: r["records"][0].update(name="other"), "none of the records"),
    (lambda r: r.pop("problem"), "'problem' must be an object"),
    (lambda r: r["records"][0].update(max_abs_err=-1.0), "a maximum of absolute differences"),
    (lambda r: r["records"][0].update(max_abs_err=float("-inf")),
     "a maximum of absolute differences"),
    (lambda r: r["records"][0].update(host_us=10**400), "'host_us' must be a finite number"),
    (lambda r: r["records"][0]["round_medians_us"].__setitem__(0, 2**60),
     r"round_medians_us'\[0\] is"),
])
def test_unusable_results_are_refused(tmp_path: Path, mutate, message: str) -> None:
    r = _run(1)
    mutate(r)
    with pytest.raises(ResultsError, match=message):
        check(r, tmp_path)


# -- output ------------------------------------------------------------------------------------

def test_markdown_holds_the_table_of_what_got_slower(baseline_dir: Path) -> None:
    v = check(_run(5, slowdown=0.05), baseline_dir)
    md = v.markdown
    assert "REGRESSION (exit 1)" in md and "**What got slower**" in md
    c = v.regressions[0]
    row = next(line for line in md.splitlines()
               if line.startswith("| flashrepro ") and "REGRESSION" in line)
    for text in (f"{c.baseline_median:.4f}", f"{c.current_median:.4f}", f"{c.change:+.2%}",
                 f"[{c.ci_low:+.2%}, {c.ci_high:+.2%}]"):
        assert text in row
    assert "| record " in md and "CI of change" in md
    assert "Mann-Whitney" in md


def test_as_dict_is_json_ready(baseline_dir: Path) -> None:
    d = json.loads(json.dumps(check(_run(5, slowdown=0.05), baseline_dir).as_dict()))
    assert d["status"] == "regression" and d["exit_code"] == 1
    assert d["comparisons"][0]["slower"] is True
    assert d["settings"]["threshold"] == DEFAULT_THRESHOLD


def cli_main(argv: list[str]) -> int:
    """``python -m flashrepro_harness gate ...`` (the gate's own parser, no other command)."""
    assert argv[0] == "gate" and COMMANDS["gate"][0] == command.__name__
    parser = argparse.ArgumentParser(prog="flashrepro gate")
    command.add_arguments(parser)
    return command.run(parser.parse_args(argv[1:]))


def _write(path: Path, results: dict) -> Path:
    path.write_text(json.dumps(results))
    return path


def test_cli_exit_codes_summary_and_results(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    bdir = tmp_path / "baselines"
    bdir.mkdir()
    args = ["gate", "--baseline-dir", str(bdir)]
    res = _write(tmp_path / "r.json", _run(1))
    verdict = tmp_path / "verdicts" / "v.json"
    assert cli_main([*args, "--results", str(res), "--verdict-json", str(verdict)]) == \
        ExitCode.NO_BASELINE
    assert json.loads(verdict.read_text())["status"] == "no-baseline"
    assert cli_main([*args, "--results", str(res), "--update-baseline"]) == ExitCode.PASS
    assert (bdir / "nvidia-h200" / f"{ARTICLE_KEY}.json").is_file()
    slow = _write(tmp_path / "slow.json", _run(5, slowdown=0.05))
    summary = tmp_path / "out" / "gate.md"
    slow_text = slow.read_text()
    assert cli_main([*args, "--results", str(slow), "--summary", str(summary),
                     "--verdict-json", str(verdict)]) == 1
    assert "REGRESSION (exit 1)" in summary.read_text()
    assert json.loads(verdict.read_text())["comparisons"][0]["slower"] is True
    assert slow.read_text() == slow_text, "gate rewrote its --results input"
    text = step.read_text()
    assert text.startswith("earlier step\n") and "REGRESSION (exit 1)" in text
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))  # in-image's /results/summary.md
    assert cli_main([*args, "--results", str(slow), "--summary", str(summary)]) == 1
    assert summary.read_text().count("REGRESSION (exit 1)") == 1, "summary appended to itself"
    other = _write(tmp_path / "o.json", _run(2, env=synthetic_env(triton="3.7.0")))
    assert cli_main([*args, "--results", str(other)]) == ExitCode.ENV_MISMATCH
    assert cli_main([*args, "--results", str(other), "--allow-env-mismatch"]) == ExitCode.PASS
    assert cli_main([*args, "--results", str(other), "--threshold", "0.1"]) == \
        ExitCode.ENV_MISMATCH


def test_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(1)
    r["records"].pop()
    res = _write(tmp_path / "r.json", r)
    assert cli_main(["gate", "--results", str(res)]) == ExitCode.BAD_INPUT
    assert "torch-flash" in capsys.readouterr().err
    assert cli_main(["gate", "--results", str(tmp_path / "missing.json")]) == ExitCode.BAD_INPUT
    for value in ("3", "0.11"):
        with pytest.raises(SystemExit):
            cli_main(["gate", "--results", str(res), "--threshold", value])
        assert "--threshold must be in [0, 0.1]" in capsys.readouterr().err


def test_cli_caps_agree_with_the_statistics() -> None:
    """commands.gate keeps its own copies of the caps (its --help imports no statistics)."""
    from flashrepro_harness.gate import stats

    assert (command.MAX_THRESHOLD, command.MIN_CONFIDENCE, command.MAX_CONFIDENCE) == (
        stats.MAX_THRESHOLD, stats.MIN_CONFIDENCE, stats.MAX_CONFIDENCE)


@pytest.mark.parametrize("value", ["0.9", "0.51"])
def test_a_confidence_below_the_floor_is_refused(value: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A lower confidence narrows the interval and lowers the rounds needed: it passes what
    the default holds inconclusive, so neither the option nor a baseline may set one."""
    with pytest.raises(SystemExit):
        cli_main(["gate", "--results", "r.json", "--confidence", value])
    assert "--confidence must be in [0.95, 0.99]" in capsys.readouterr().err
    base_dir = tmp_path / "baselines"
    update_baseline(_run(11), base_dir)
    path = next(base_dir.rglob("*.json"))
    stored = json.loads(path.read_text())
    stored["gate"]["confidence"] = float(value)
    path.write_text(json.dumps(stored))
    with pytest.raises(BaselineError, match="confidence"):
        check(_run(12), base_dir)


def test_a_bimodal_slowdown_is_not_a_pass() -> None:
    """40 % of rounds three times slower, the rest as fast as their twins: the median's
    interval stays at 0, but the rank test rejects "at most 2 % slower": inconclusive, not a
    pass."""
    rng = np.random.default_rng(5)
    reference = 30.0 * (1 + 0.002 * rng.standard_normal(200))
    current = reference.copy()
    current[rng.permutation(200)[:80]] *= 3.0
    c = stats.compare_paired(current, reference, record="flashrepro")
    assert not c.slower and c.ci_high <= c.threshold and c.p_value < 0.025
    assert c.inconclusive


# -- the slowdown test hook (its GPU part runs in scripts/gate_experiment.py) -------------------

@pytest.mark.parametrize(("value", "expected"), [("", None), ("0", 0.0), ("0.05", 0.05)])
def test_injection_variable(value: str, expected: float | None) -> None:
    assert requested({ENV_VAR: value}) == expected
    assert requested({}) is None


@pytest.mark.parametrize("value", ["abc", "1.5", "-0.1"])
def test_injection_variable_rejects_bad_values(value: str) -> None:
    with pytest.raises(ValueError, match=ENV_VAR):
        requested({ENV_VAR: value})


# -- the GPU experiment's bookkeeping, with its measurement replaced by synthetic runs ----------

def _experiment_module():
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "scripts" / "gate_experiment.py"
    spec = importlib.util.spec_from_file_location("gate_experiment", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_experiment_schedule_interleaves_scenarios_over_workers() -> None:
    exp = _experiment_module()
    shares = exp._schedule(runs=5, workers=4)
    flat = [r for share in shares for r in share]
    assert len(shares) == 4 and len(flat) == 15
    assert sorted((r["slowdown"], r["index"]) for r in flat) == sorted(
        (s, i) for s in exp.SCENARIOS for i in range(5))
    for share in shares:  # every process sees every scenario
        assert {r["slowdown"] for r in share} == set(exp.SCENARIOS)


def test_experiment_worker_summary_and_markdown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    exp = _experiment_module()
    rng = np.random.default_rng(11)
    cycles = {"0.0": 0, "0.03": 3000, "0.05": 5000}

    def fake_measure(slowdown: float, c: int, rounds: int, calls: int) -> dict:
        assert c == cycles[str(slowdown)]
        r = synthetic_results(rng, rounds=rounds, slowdown=c / 1e5,
                              noise=Noise(round_cv=0.005))
        return {**r, "clocks_after": {"sm_clock_mhz": 1980},
                "injection": {"flashrepro": {"fraction": slowdown, "cycles": c}}}

    monkeypatch.setattr(exp, "_measure", fake_measure)
    base_spec, base_out = tmp_path / "base.json", tmp_path / "base-results.json"
    base_spec.write_text(json.dumps({"baseline_out": str(base_out), "rounds": 100,
                                     "calls": 10}))
    exp.worker(base_spec)  # a baseline process: one run written, nothing judged
    assert capsys.readouterr().out == ""
    update_baseline([json.loads(base_out.read_text()), fake_measure(0.0, 0, 100, 10)],
                    tmp_path)
    runs = [{"slowdown": s, "index": i} for i in range(3) for s in exp.SCENARIOS]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"worker": 0, "runs": runs, "cycles": cycles, "rounds": 100,
                                "calls": 10, "thresholds": [DEFAULT_THRESHOLD, 0.015],
                                "baseline_dir": str(tmp_path)}))
    exp.worker(spec)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["slowdown"], x["index"]) for x in lines] == [(r["slowdown"], r["index"])
                                                            for r in runs]
    summary = {row["slowdown"]: row for row in exp._summary(lines)}
    assert summary[0.0]["flagged"] == {"0.02": 0, "0.015": 0}
    assert summary[0.05]["flagged"] == {"0.02": 3, "0.015": 3}
    assert summary[0.03]["runs"] == 3 and 0.02 < summary[0.03]["median_change"] < 0.04
    processes = exp._processes(lines, baseline_levels=[0.771, 0.768])
    assert set(processes["offsets"]) == {"0"} and processes["baseline_runs"] == 2
    assert list(processes["levels"]) == ["baseline 0", "baseline 1", "worker 0"]
    assert processes["levels"]["worker 0"] == pytest.approx(
        np.median([x["median_ratio"] for x in lines if x["slowdown"] == 0]))
    assert processes["min_quiet_threshold"] == pytest.approx(
        max(0.0, 3 * processes["sd"] * 1.5**0.5 - processes["ci_half_width"]))
    result = {"date": "2026-11-29", "gpu": "NVIDIA H200", "processes": processes,
              "args": {"rounds": 100, "calls": 10, "runs": 3, "workers": 1, "repeats": 15},
              "seconds": 1.0, "summary": exp._summary(lines),
              "baseline_noise": {"flashrepro_cv": 0.01, "torch_flash_cv": 0.01,
                                 "ratio_cv": 0.012},
              "injection": {"0.05": {"cycles": 5000, "base_us": 48.0,
                                     "measured_fraction": 0.051}},
              "spread": {m: {"flashrepro": {"median_us": 47.0, "cv_of_median": 0.004},
                             "torch-flash": {"median_us": 61.0, "cv_of_median": 0.003},
                             "ratio": {"median": 0.77, "cv": 0.005}}
                         for m in ("events", "graph")}}
    md = exp._markdown(result)
    row = {line.split("|")[1].strip(): [x.strip() for x in line.split("|")[2:4]]
           for line in md.splitlines() if line.startswith("| 0%") or line.startswith("| 5%")}
    assert row == {"0%": ["0/3", "0/3"], "5%": ["3/3", "3/3"]}
    assert "flagged at 2.0%" in md and "flagged at 1.5%" in md
    assert "+5.10%" in md and "0.40%" in md and "median A/A change of each worker" in md
    assert f"worker 0 {processes['offsets']['0']:+.2%}" in md and "pooled from 2" in md


def test_a_run_with_an_injected_slowdown_is_labelled_and_never_a_baseline(
        tmp_path: Path) -> None:
    slowed = _run(2, slowdown=0.05)
    slowed["injection"] = {"flashrepro": {"fraction": 0.05, "cycles": 4700}}
    with pytest.raises(ResultsError, match="FLASHREPRO_INJECT_SLOWDOWN"):
        update_baseline(slowed, tmp_path)
    assert not any(tmp_path.iterdir())
    reference = _run(1)
    reference["injection"] = {"flashrepro": {"fraction": 0.0, "cycles": 0}}
    update_baseline(reference, tmp_path)  # the hook at 0: a detection experiment's baseline
    v = check(slowed, tmp_path)
    assert v.exit_code == ExitCode.REGRESSION
    assert any("injected slowdown" in w and "0.05" in w for w in v.warnings)


def test_too_noisy_to_clear_is_inconclusive_not_a_pass(tmp_path: Path) -> None:
    """Not flagged, but not shown within the threshold either: exit 7, never a pass."""
    update_baseline(_run(1, rounds=10, round_cv=0.05), tmp_path)
    v = check(_run(2, rounds=10, round_cv=0.05, slowdown=0.03), tmp_path)
    (c,) = v.comparisons
    assert v.exit_code == ExitCode.INCONCLUSIVE and v.status == "inconclusive"
    assert c.inconclusive and not c.slower
    assert c.ci_low < DEFAULT_THRESHOLD < c.ci_high
    assert "inconclusive" in v.markdown
    assert any("only 10 rounds" in w for w in v.warnings)
    quiet = check(_run(3, rounds=10, round_cv=0.05, slowdown=-0.2), tmp_path).comparisons[0]
    assert not quiet.inconclusive and quiet.ci_high < DEFAULT_THRESHOLD


def test_calibration_arithmetic_with_a_simulated_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """calibrate() on a fake GPU: 48 µs calls, busy-wait 1/1980 µs per cycle of which the first
    300 cycles are lost (as the H200's first-pass shortfall suggests), 0.3 % noise."""
    import torch

    from flashrepro_harness.gate import inject

    rng = np.random.default_rng(3)
    slept: list[int] = []
    monkeypatch.setattr(torch.cuda, "_sleep", slept.append)

    def fake_rounds(fns: dict, rounds: int, calls_per_round: int) -> dict[str, list[float]]:
        out = {}
        for name, fn in fns.items():
            slept.clear()
            fn()
            added = sum(max(0, c - 300) for c in slept) / 1980.0
            out[name] = list((48.0 + added) * (1 + 0.003 * rng.standard_normal(rounds)))
        return out

    monkeypatch.setattr(inject, "interleaved_rounds", fake_rounds)
    result = inject.calibrate(lambda: None, (0.03, 0.05))
    for f in (0.03, 0.05):
        assert result[f].cycles == pytest.approx(f * 48.0 * 1980 + 300, rel=0.03)
        assert result[f].measured_fraction == pytest.approx(f, abs=0.002)
        assert result[f].us_per_cycle == pytest.approx(1 / 1980, rel=0.05)
    with pytest.raises(ValueError, match="fractions must be in"):
        inject.calibrate(lambda: None, (1.2,))


def test_apply_from_env_wraps_only_flashrepro_records(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from flashrepro_harness.gate import inject
    from flashrepro_harness.gate.baseline import FLASHREPRO_RECORDS

    slept: list[int] = []
    monkeypatch.setattr(torch.cuda, "_sleep", slept.append)
    monkeypatch.setattr(inject, "calibrate", lambda fn, fractions: {
        f: inject.Injection(f, 4321, 48.0, 1 / 1980, f) for f in fractions})
    fns = {"flashrepro": lambda: "fr", "torch-flash": lambda: "tf"}
    same, none = inject.apply_from_env(fns, FLASHREPRO_RECORDS, environ={})
    assert same is fns and none == {}
    out, injections = inject.apply_from_env(fns, FLASHREPRO_RECORDS,
                                            environ={ENV_VAR: "0.05"})
    assert set(injections) == {"flashrepro"} and injections["flashrepro"].cycles == 4321
    assert out["torch-flash"] is fns["torch-flash"]
    assert out["flashrepro"]() == "fr" and slept == [4321]


def test_measure_writes_results_the_gate_reads(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The experiment's measurement (timing faked) produces results check() accepts."""
    from flashrepro_harness.gate import measure as m

    rng = np.random.default_rng(4)

    def fake_rounds(fns: dict, rounds: int, calls_per_round: int) -> dict[str, list[float]]:
        means = {"flashrepro": 47.0, "torch-flash": 61.0}
        return {n: list(means[n] * (1 + 0.005 * rng.standard_normal(rounds))) for n in fns}

    monkeypatch.setattr(m, "interleaved_rounds", fake_rounds)
    monkeypatch.setattr(m, "output_errors", lambda causal, fns, inputs: {n: 4e-4 for n in fns})
    monkeypatch.setattr(m.Problem, "inputs", lambda self, seed=0: None)
    monkeypatch.delenv(ENV_VAR, raising=False)
    problem = _run(1)["problem"]
    fns = {"flashrepro": lambda: None, "torch-flash": lambda: None}
    results = m.measure(fns, problem, rounds=40, calls_per_round=10, env=synthetic_env())
    recs = {r["name"]: r for r in results["records"]}
    assert recs["flashrepro"]["ratio_vs_torch_flash"] == pytest.approx(47 / 61, rel=0.01)
    assert recs["flashrepro"]["tflops"] == pytest.approx(8.59e9 / 47.0 / 1e6, rel=0.02)
    assert results["method"]["rounds"] == 40 and "injection" not in results
    update_baseline(results, tmp_path)
    again = m.measure(fns, problem, rounds=40, calls_per_round=10, env=synthetic_env())
    assert check(again, tmp_path).exit_code == ExitCode.PASS


def test_runs_with_and_without_the_test_hook_are_not_compared(tmp_path: Path) -> None:
    """The hook's empty busy-wait costs ~1-3 µs: mixing would hide a slowdown that large."""
    hooked = _run(1)
    hooked["injection"] = {"flashrepro": {"fraction": 0.0, "cycles": 0}}
    update_baseline(hooked, tmp_path)
    v = check(_run(2), tmp_path)
    assert v.exit_code == ExitCode.ENV_MISMATCH
    assert [(d.field, d.baseline, d.current) for d in v.env_differences] == [
        ("method.injection_hook", True, False)]


def _reproduce_like(seed: int, child_slowdown: float = 0.0,
                    non_causal_slowdown: float = 0.0) -> dict:
    """Like reproduce.json: main rows, other torch backends, a skipped one, the non-causal
    rows (timed in rounds of their own) and the mma.sync child's rows (own torch-flash
    reference)."""
    rng = np.random.default_rng(seed)
    rounds = synthetic_rounds(rng, rounds=100, records=("flashrepro", "article-kernel"))
    rounds["torch-cudnn"] = list(np.asarray(rounds["torch-flash"]) * 0.57)
    full = synthetic_rounds(rng, rounds=100, records=("flashrepro",),
                            slowdown=non_causal_slowdown)
    rounds.update({f"{n} (non-causal)": v for n, v in full.items()})
    child = synthetic_rounds(rng, rounds=100, records=("flashrepro",), slowdown=child_slowdown)
    rounds.update({f"{n} (mma.sync)": v for n, v in child.items()})
    results = results_from_rounds(rounds, synthetic_env())
    results["records"].append({"name": "torch-efficient", "skipped": "not supported here"})
    return results


def test_records_pair_with_the_reference_of_their_own_process(tmp_path: Path) -> None:
    update_baseline(_reproduce_like(1), tmp_path)
    b = json.loads((tmp_path / "nvidia-h200" / f"{ARTICLE_KEY}.json").read_text())
    assert set(b["records"]) == {"flashrepro", "article-kernel", "torch-flash",
                                 "flashrepro (non-causal)", "torch-flash (non-causal)",
                                 "flashrepro (mma.sync)", "torch-flash (mma.sync)"}
    v = check(_reproduce_like(2), tmp_path)
    assert v.exit_code == ExitCode.PASS
    assert {c.record for c in v.comparisons} == {"flashrepro", "article-kernel",
                                                 "flashrepro (non-causal)",
                                                 "flashrepro (mma.sync)"}
    v = check(_reproduce_like(3, child_slowdown=0.06), tmp_path)
    assert [c.record for c in v.regressions] == ["flashrepro (mma.sync)"]
    v = check(_reproduce_like(4, non_causal_slowdown=0.06), tmp_path)
    assert [c.record for c in v.regressions] == ["flashrepro (non-causal)"]
    b_ratio = b["records"]["flashrepro (mma.sync)"]["round_ratios"]
    b_us = b["records"]["flashrepro (mma.sync)"]["round_medians_us"]
    b_ref = b["records"]["torch-flash (mma.sync)"]["round_medians_us"]
    assert b_ratio == pytest.approx(np.divide(b_us, b_ref).tolist(), rel=1e-12)


def test_an_old_baseline_without_a_record_does_not_pass(tmp_path: Path) -> None:
    """A flashrepro row with neither a twin nor baseline samples is unjudged: not a pass
    (exit 2, the rows named); a torch-flash reference the baseline lacks only warns."""
    update_baseline(_run(1), tmp_path)
    v = check(_reproduce_like(2), tmp_path)
    assert v.exit_code == ExitCode.NO_BASELINE
    assert [c.record for c in v.comparisons] == ["flashrepro"]
    assert any("'article-kernel'" in w and "'flashrepro (non-causal)'" in w
               and "'flashrepro (mma.sync)'" in w and "not a pass" in w for w in v.warnings)
    assert sum("has no baseline samples" in w for w in v.warnings) == 2


def test_a_baseline_pooled_from_several_runs(tmp_path: Path) -> None:
    runs = [_run(seed) for seed in (1, 2, 3)]
    runs[2]["env"]["git_commit"] = "c" * 40
    v = update_baseline(runs, tmp_path)
    assert v.status == "baseline-updated"
    b = json.loads((tmp_path / "nvidia-h200" / f"{ARTICLE_KEY}.json").read_text())
    assert b["method"]["rounds"] == 300 and b["method"]["pooled_runs"] == 3
    us = [next(r["round_medians_us"] for r in run["records"] if r["name"] == "flashrepro")
          for run in runs]
    assert b["records"]["flashrepro"]["round_medians_us"] == us[0] + us[1] + us[2]
    (h,) = b["history"]
    assert h["runs"] == 3 and h["git_commit"] == "c" * 40
    assert check(_run(4), tmp_path).exit_code == ExitCode.PASS
    assert check(_run(5, slowdown=0.05), tmp_path).exit_code == ExitCode.REGRESSION


def test_runs_of_different_environments_are_not_pooled(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=r"run 1 differs from run 0 in driver"):
        update_baseline([_run(1), _run(2, env=synthetic_env(driver="590.1"))], tmp_path)
    slowed = _run(2)
    slowed["injection"] = {"flashrepro": {"fraction": 0.05, "cycles": 4000}}
    with pytest.raises(ResultsError, match="FLASHREPRO_INJECT_SLOWDOWN"):
        update_baseline([_run(1), slowed], tmp_path)
    with pytest.raises(ResultsError, match="at least one"):
        update_baseline([], tmp_path)
    assert not any(tmp_path.iterdir())


def test_cli_pools_several_results_only_for_a_baseline(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    paths = [_write(tmp_path / f"r{i}.json", _run(i)) for i in (1, 2)]
    args = ["gate", "--baseline-dir", str(tmp_path / "b"), "--results", *map(str, paths)]
    assert cli_main(args) == ExitCode.BAD_INPUT
    assert "only with --update-baseline" in capsys.readouterr().err
    before = [p.read_text() for p in paths]
    verdict = tmp_path / "v.json"
    assert cli_main([*args, "--update-baseline", "--verdict-json", str(verdict)]) == ExitCode.PASS
    assert json.loads(verdict.read_text())["status"] == "baseline-updated"
    assert [p.read_text() for p in paths] == before, "gate rewrote its --results inputs"


# -- review findings: only reproduce results, and a GPU key that is its name's --

@pytest.mark.parametrize("field,value", [("schema", "flashrepro.results/99"), ("kind", "bench")])
def test_results_of_another_schema_or_kind_are_refused(baseline_dir: Path, field: str,
                                                        value: str) -> None:
    r = _run(2)
    r[field] = value
    with pytest.raises(ResultsError, match=r"must be a 'flashrepro.results/1' file of kind"):
        check(r, baseline_dir)


def test_gpu_key_that_is_not_its_names_is_refused(tmp_path: Path) -> None:
    """A key is a folder name: '../..' in it must not write outside the baseline folder, and a
    renamed GPU must not borrow another GPU's baseline."""
    for key in ("../../../evil", "nvidia-h200"):
        env = synthetic_env()
        env["gpu"]["key"] = key
        env["gpu"]["name"] = "NVIDIA A100-SXM4-80GB"
        with pytest.raises(ResultsError, match=r"is not the key of its GPU name"):
            update_baseline(_run(2, env=env), tmp_path / "baselines")
    assert not (tmp_path / "evil").exists()


def test_the_baseline_path_is_shown_relative_to_the_checkout(tmp_path: Path) -> None:
    """Results and summaries name a baseline inside the repository by its path from the root
    (committed results must not carry the absolute path of the machine that made them); one
    outside it by its absolute path."""
    from flashrepro_harness.results import BASELINE_DIR

    (tmp_path / "none").mkdir()
    outside = check(_run(2), tmp_path / "none")
    assert outside.as_dict()["baseline"] == str(outside.baseline_path)
    assert outside.as_dict()["baseline"].startswith(str(tmp_path))
    inside = dataclasses.replace(outside, baseline_path=BASELINE_DIR / "gpu" / "p.json")
    assert inside.as_dict()["baseline"] == "reproduce/baselines/gpu/p.json"
    assert "`reproduce/baselines/gpu/p.json`" in inside.markdown


def _with_host(results: dict, host_us: dict[str, float]) -> dict:
    """``results`` with ``host_us`` (and ``eager_us`` = host + 20) on the named records."""
    out = json.loads(json.dumps(results))
    for rec in out["records"]:
        if rec["name"] in host_us:
            rec["host_us"], rec["eager_us"] = host_us[rec["name"]], host_us[rec["name"]] + 20
    return out


@pytest.mark.parametrize(("base_us", "cur_us", "warns"), [
    (15.0, 40.0, True),    # 2.7x and +25 µs: both limits passed
    (4.0, 12.0, False),    # 3x but only +8 µs: jitter on a fast call
    (100.0, 190.0, False),  # +90 µs but under 2x
    (15.0, 15.5, False),
])
def test_host_cost_is_shown_and_only_warns_past_both_limits(
        tmp_path: Path, base_us: float, cur_us: float, warns: bool) -> None:
    """Host µs never gate: the verdict passes either way; it warns only when the run's host
    µs is more than 2x the baseline's and more than 10 µs above it (docs/gate.md)."""
    base = _with_host(_run(0), {"flashrepro": base_us, "torch-flash": 30.0})
    update_baseline(base, tmp_path)
    verdict = check(_with_host(_run(1), {"flashrepro": cur_us, "torch-flash": 30.0}), tmp_path)
    assert verdict.exit_code == ExitCode.PASS
    rows = {r["record"]: r for r in verdict.host_cost}
    assert rows["flashrepro"] == {"record": "flashrepro", "host_us": cur_us,
                                  "eager_us": cur_us + 20, "baseline_host_us": base_us,
                                  "baseline_eager_us": base_us + 20}
    host_warnings = [w for w in verdict.warnings if "host" in w and "flashrepro:" in w]
    assert bool(host_warnings) == warns, verdict.warnings
    text = verdict.markdown
    assert "Host cost per call" in text and f"{cur_us:.1f}" in text
    assert json.loads(json.dumps(verdict.as_dict()))["host_cost"] == verdict.host_cost


def test_host_cost_shown_without_a_baseline(tmp_path: Path) -> None:
    verdict = check(_with_host(_run(0), {"flashrepro": 12.0}), tmp_path)
    assert verdict.exit_code == ExitCode.NO_BASELINE
    assert verdict.host_cost == [{"record": "flashrepro", "host_us": 12.0, "eager_us": 32.0,
                                  "baseline_host_us": None, "baseline_eager_us": None}]
    assert "Host cost per call" in verdict.markdown


@pytest.mark.parametrize("command", ["reproduce", "gate"])
def test_baseline_dir_default_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, command: str) -> None:
    """``--baseline-dir`` defaults to $FLASHREPRO_BASELINE_DIR (a run that gates against a
    baseline it made on the same machine, through scripts/ci_steps.sh's unchanged steps), else
    the committed reproduce/baselines."""
    from flashrepro_harness.cli import build_parser
    from flashrepro_harness.results import BASELINE_DIR

    extra = ["--results", "x.json"] if command == "gate" else []
    monkeypatch.delenv("FLASHREPRO_BASELINE_DIR", raising=False)
    assert build_parser().parse_args([command, *extra]).baseline_dir == BASELINE_DIR
    monkeypatch.setenv("FLASHREPRO_BASELINE_DIR", str(tmp_path))
    assert build_parser().parse_args([command, *extra]).baseline_dir == tmp_path


def test_results_of_other_commits_are_refused(tmp_path: Path) -> None:
    """--expect-commit / --expect-reference-commit: a stale or copied results file (an earlier
    run's, the committed one) is never judged as the job's run; nor a run paired with itself,
    nor one whose expected reference did not load."""
    from flashrepro_harness.gate import check_provenance

    r = _run(1)
    r["env"]["git_commit"] = "ab12cd3" + "0" * 33
    r["reference"] = {"src": "/tmp/base/src", "commit": "ef45678"}
    check_provenance(r, "results", "AB12CD3", "ef45678" + "9" * 33)  # prefixes, any case
    for commit, reference, message in (
            ("1234567", None, "come from commit 'ab12cd3"),
            (None, "1234567", "paired reference is commit 'ef45678'")):
        with pytest.raises(ResultsError, match=message):
            check_provenance(r, "results", commit, reference)
    r["reference"] = {"src": "/tmp/base/src", "commit": "AB12CD3"}
    with pytest.raises(ResultsError, match="the paired reference is the measured commit"):
        check_provenance(r, "results", None, None)
    r["reference"] = {"src": "/tmp/base/src", "error": "ImportError: x"}
    check_provenance(r, "results", None, None)  # nothing paired: the baseline judges (warned)
    with pytest.raises(ResultsError, match="the reference did not load"):
        check_provenance(r, "results", None, "ef45678")  # the job meant to pair: refused
    del r["reference"]
    with pytest.raises(ResultsError, match="paired reference is commit None"):
        check_provenance(r, "results", None, "ef45678")
    del r["env"]["git_commit"]
    path = _write(tmp_path / "r.json", r)
    assert cli_main(["gate", "--results", str(path), "--baseline-dir", str(tmp_path),
                     "--expect-commit", "ab12cd3"]) == ExitCode.BAD_INPUT
    with pytest.raises(SystemExit):
        cli_main(["gate", "--results", str(path), "--expect-commit", "HEAD"])
