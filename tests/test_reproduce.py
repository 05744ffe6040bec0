"""``reproduce``'s bookkeeping on the CPU: record names, masks, configs, ratios, skipped rows.

The kernels run for real (Triton's interpreter, a small problem) so ``max_abs_err`` is a real
check; only the GPU timer is replaced by synthetic per-round times, since the CPU has none.
"""

from __future__ import annotations

import pytest
import torch

from flashrepro.bench import kernels as K
from flashrepro.bench import reproduce as R
from flashrepro.bench.problem import Problem
from flashrepro.configs import ARTICLE, P_IN_REGISTERS
from flashrepro.validation import interpreter_mode

pytestmark = pytest.mark.skipif(not interpreter_mode(), reason="CPU (interpreter) bookkeeping")

PROBLEM = Problem(batch=1, heads=2, seqlen_q=64, seqlen_k=64, head_dim=16, dtype="float16",
                  causal=True)


@pytest.fixture
def cpu_measure(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[float]]:
    """Inputs on the CPU, no CUDA synchronisation, the mma.sync arch, and a timer that gives
    kernel i of each call the per-round times 10 + i + r / 10 (recorded in the returned dict)."""
    timed: dict[str, list[float]] = {}

    def fake_rounds(fns, rounds, calls_per_round):
        out = {n: [10.0 + i + r / 10 for r in range(rounds)] for i, n in enumerate(fns)}
        timed.update(out)
        return out

    inputs = Problem.inputs
    monkeypatch.setattr(Problem, "inputs",
                        lambda self, device="cpu", seed=0: inputs(self, device="cpu", seed=seed))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)
    monkeypatch.setattr(R, "interleaved_rounds", fake_rounds)
    monkeypatch.setattr(R, "launch_arch", lambda: 80)
    return timed


def test_mma_sync_child_records(cpu_measure: dict[str, list[float]]) -> None:
    names = [*K.FLASHREPRO, K.P_IN_REGISTERS, "torch-flash", "torch-cudnn"]
    records = {r["name"]: r for r in R.measure(PROBLEM, names, rounds=4, calls=2,
                                                suffix=" (mma.sync)")}
    assert list(records) == [n + " (mma.sync)" for n in names]
    assert "skipped" in records["torch-cudnn (mma.sync)"]  # no cuDNN on the CPU
    timed = {n + " (mma.sync)": v for n, v in cpu_measure.items()}
    ref = timed["torch-flash (mma.sync)"]
    for name, rec in records.items():
        if "skipped" in rec:
            continue
        assert rec["causal"] is True and rec["round_medians_us"] == timed[name]
        ratios = [a / b for a, b in zip(timed[name], ref, strict=True)]
        assert rec["ratio_rounds"] == pytest.approx(ratios)
        assert rec["max_abs_err"] < 2e-3, name  # the kernel's output vs float32 SDPA
    assert records["flashrepro-p-in-registers (mma.sync)"]["config"] == P_IN_REGISTERS.as_dict()
    assert records["flashrepro-article-config (mma.sync)"]["config"] == ARTICLE.as_dict()
    assert records["flashrepro (mma.sync)"]["config"]["tma"] is False  # sm_80's choice


def test_non_causal_twin_records(cpu_measure: dict[str, list[float]]) -> None:
    twin = Problem(**{**PROBLEM.as_dict(), "causal": False})
    records = R.measure(twin, ["flashrepro", "torch-flash"], rounds=3, calls=1,
                        suffix=R.NON_CAUSAL)
    assert [r["name"] for r in records] == ["flashrepro (non-causal)", "torch-flash (non-causal)"]
    assert all(r["causal"] is False for r in records)
    flops = 4 * 1 * 2 * 64 * 64 * 16  # no causal halving
    assert records[0]["tflops"] == pytest.approx(flops / (records[0]["median_us"] * 1e-6) / 1e12)


@pytest.mark.parametrize("same_file", [True, False])
def test_summary_written_once(tmp_path, monkeypatch: pytest.MonkeyPatch, same_file: bool) -> None:
    """In the image GITHUB_STEP_SUMMARY is /results/summary.md, the file reproduce writes: the
    summary must not be appended to itself (the job summary showed it twice)."""
    step = tmp_path / ("summary.md" if same_file else "step-summary.md")
    if not same_file:
        step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    R.write_results(tmp_path, {"records": []}, "# Article reproduction\n")
    assert (tmp_path / "summary.md").read_text().count("# Article reproduction") == 1
    if not same_file:
        assert step.read_text() == "earlier step\n# Article reproduction\n\n"
