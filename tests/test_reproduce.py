"""``reproduce``'s bookkeeping on the CPU: record names, masks, configs, ratios, skipped rows.

The kernels run for real (Triton's interpreter, a small problem) so ``max_abs_err`` is a real
check; only the GPU timer is replaced by synthetic per-round times, since the CPU has none.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import types
from typing import Any

import pytest
import torch

from flashrepro import select
from flashrepro.configs import ARTICLE, FA3_WS, P_IN_REGISTERS
from flashrepro.validation import interpreter_mode
from flashrepro_harness.bench import impls as K
from flashrepro_harness.bench import peers, sweep
from flashrepro_harness.bench import reproduce as R
from flashrepro_harness.problem import Problem

pytestmark = pytest.mark.skipif(not interpreter_mode(), reason="CPU (interpreter) bookkeeping")

PROBLEM = Problem(batch=1, heads=2, seqlen_q=64, seqlen_k=64, head_dim=16, dtype="float16",
                  causal=True)


@pytest.fixture
def cpu_measure(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[float]]:
    """Inputs on the CPU, no CUDA synchronisation, the mma.sync arch, a timer that gives
    kernel i of each call the per-round times 10 + i + r / 10, and a host timer that gives the
    k-th call (host, eager) = (100 + k, 200 + k) µs (both recorded in the returned dict, the
    host costs under ``"host"`` in call order)."""
    timed: dict[str, list[float]] = {}
    host: list[tuple[float, float]] = []

    def fake_rounds(fns, rounds, calls_per_round):
        out = {n: [10.0 + i + r / 10 for r in range(rounds)] for i, n in enumerate(fns)}
        timed.update(out)
        return out

    def fake_host(fns):
        out = {}
        for name in fns:
            host.append((100.0 + len(host), 200.0 + len(host)))
            out[name] = host[-1]
        return out

    inputs = Problem.inputs
    monkeypatch.setattr(Problem, "inputs",
                        lambda self, device="cpu", seed=0: inputs(self, device="cpu", seed=seed))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)
    monkeypatch.setattr(R, "interleaved_rounds", fake_rounds)
    monkeypatch.setattr(R, "launch_arch", lambda: 80)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda *args: types.SimpleNamespace(multi_processor_count=132))
    monkeypatch.setattr(R, "host_and_eager_rounds", fake_host)
    timed["host"] = host  # type: ignore[assignment]
    return timed


def test_mma_sync_child_records(cpu_measure: dict[str, list[float]]) -> None:
    names = [*K.FLASHREPRO, K.P_IN_REGISTERS, "torch-flash", "torch-cudnn"]
    records = {r["name"]: r for r in R.measure(PROBLEM, names, rounds=4, calls=2,
                                                suffix=" (mma.sync)")}
    assert list(records) == [n + " (mma.sync)" for n in names]
    assert "skipped" in records["torch-cudnn (mma.sync)"]  # no cuDNN on the CPU
    timed = {n + " (mma.sync)": v for n, v in cpu_measure.items() if n != "host"}
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


def test_the_record_names_the_schedule_that_runs(cpu_measure: dict[str, list[float]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The default launch's record gives the config select() runs: a table entry with the
    dynamic schedule at 2 tiles on 132 SMs runs (and is recorded) in the snake order."""
    dynamic = dataclasses.replace(FA3_WS, dynamic_schedule=True)
    monkeypatch.setattr(select, "default_config", lambda *args: dynamic)
    [record] = R.measure(PROBLEM, ["flashrepro"], rounds=2, calls=1)
    assert record["config"] == FA3_WS.as_dict()


def test_every_pairable_row_is_a_product_row() -> None:
    """The rows reproduce pairs with a reference are the ones the gate treats as the product
    (never skipped, a twin required in a paired run), and only those."""
    from flashrepro_harness.results import PRODUCT_RECORDS, is_product

    assert set(K.PAIRABLE) == set(PRODUCT_RECORDS)
    assert not [n for n in [*K.TORCH_BACKENDS, *peers.PEERS] if is_product(n)]
    assert is_product("flashrepro-new (mma.sync)") and not is_product("reference:flashrepro")


def test_a_raising_flashrepro_row_is_failed_a_raising_torch_row_skipped(
        cpu_measure: dict[str, list[float]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A flashrepro row whose first call raises is recorded ``failed`` with the error, never
    ``skipped``; torch's rows that cannot run here are skipped (cuDNN on the CPU)."""
    import flashrepro

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(flashrepro, "attention", broken)
    records = {r["name"]: r for r in R.measure(PROBLEM, ["flashrepro", "article-kernel",
                                                         "torch-flash", "torch-cudnn"],
                                                rounds=2, calls=1)}
    assert records["flashrepro"] == {
        "name": "flashrepro", "description": K.DESCRIPTIONS["flashrepro"], "causal": True,
        "failed": "RuntimeError: CUDA error: out of memory"}
    assert "skipped" in records["torch-cudnn"] and "failed" not in records["torch-cudnn"]
    assert records["article-kernel"]["max_abs_err"] < records["article-kernel"]["tolerance"]
    with pytest.raises(K.KernelFailed, match="flashrepro failed: RuntimeError"):
        K.available("flashrepro", PROBLEM.inputs(), True)


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


def test_host_cost_recorded_per_timed_kernel(cpu_measure: dict[str, list[float]]) -> None:
    """Each timed record carries its own host and eager µs (the fake host timer's k-th value
    for the k-th runnable kernel), a skipped one none."""
    names = ["flashrepro", "torch-flash", "torch-cudnn"]
    records = R.measure(PROBLEM, names, rounds=2, calls=1)
    host = cpu_measure["host"]
    timed = [r for r in records if "skipped" not in r]
    assert [r["name"] for r in timed] == ["flashrepro", "torch-flash"]  # no cuDNN on the CPU
    assert [(r["host_us"], r["eager_us"]) for r in timed] == host
    assert "host_us" not in records[2] and "skipped" in records[2]


def _no_flash_attn(monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in ("flash_attn", "flash_attn.cute"):
        monkeypatch.setitem(sys.modules, mod, None)  # import raises ImportError


def test_fa4_row_skipped_with_reason_without_flash_attn(
        cpu_measure: dict[str, list[float]], monkeypatch: pytest.MonkeyPatch) -> None:
    _no_flash_attn(monkeypatch)
    records = {r["name"]: r for r in R.measure(PROBLEM, R.KERNELS, rounds=2, calls=1)}
    assert "fa4-cute" in R.KERNELS and "fa4-cute" in sweep.KERNELS
    reason = records["fa4-cute"]["skipped"]
    assert "flash_attn.cute.flash_attn_func is not available" in reason and "Error" in reason
    assert records["fa4-cute"]["description"] == peers.PEERS["fa4-cute"].description
    assert "median_us" in records["flashrepro"] and "ratio_vs_torch_flash" in records["flashrepro"]
    from flashrepro_harness.report import HEADERS, reproduce_rows
    results = {"records": list(records.values()), "problem": PROBLEM.as_dict(),
               "published": {"ratio_first": 2.14, "ratio_tuned": 1.12}}
    rows = {row[0]: row for row in reproduce_rows(results)}
    assert len(rows["fa4-cute"]) == len(HEADERS)
    assert rows["fa4-cute"][HEADERS.index("max |err|")] == f"skipped: {reason}"


def _stub_fa4(monkeypatch: pytest.MonkeyPatch, poison: float = 0.0) -> list[tuple]:
    """A stand-in ``flash_attn.cute`` whose ``flash_attn_func`` takes (B, L, H, D), checks
    that layout is contiguous, computes attention in float32 and returns (out, None) as FA4
    does; ``poison`` is added to one element of the output. Returns the seen input shapes."""
    seen: list[tuple] = []

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):
        assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
        seen.append((tuple(q.shape), causal))
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(),
            is_causal=causal, scale=softmax_scale).transpose(1, 2).contiguous()
        out[0, -1, 0, 3] += poison
        return out.to(q.dtype), None

    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = flash_attn_func  # type: ignore[attr-defined]
    package = types.ModuleType("flash_attn")
    package.cute = cute  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flash_attn", package)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    return seen


@pytest.mark.parametrize("poison", [0.0, 0.25])
def test_fa4_row_appears_where_flash_attn_cute_imports(
        cpu_measure: dict[str, list[float]], monkeypatch: pytest.MonkeyPatch,
        poison: float) -> None:
    """With a stub module in place of FA4 the row is timed, fed (B, L, H, D) contiguous
    inputs, and its error is checked on every element against the float32 reference (a
    poisoned element shows up in max |err|)."""
    seen = _stub_fa4(monkeypatch, poison)
    records = {r["name"]: r for r in R.measure(PROBLEM, ["flashrepro", "torch-flash",
                                                         "fa4-cute"], rounds=3, calls=1)}
    rec = records["fa4-cute"]
    assert "skipped" not in rec
    b, h, length, d = PROBLEM.batch, PROBLEM.heads, PROBLEM.seqlen_q, PROBLEM.head_dim
    assert seen and all(s == ((b, length, h, d), True) for s in seen)
    assert rec["round_medians_us"] == cpu_measure["fa4-cute"]
    assert "ratio_vs_torch_flash" in rec and "host_us" in rec and "eager_us" in rec
    if poison:
        assert rec["max_abs_err"] == pytest.approx(poison, abs=2e-3)
    else:
        assert rec["max_abs_err"] < 2e-3  # fp16 rounding of the float32 result only
    assert "fa4-cute (B, L, H, D) contiguous" in peers.layouts_note(R.KERNELS)


def test_best_peer_is_the_fastest_of_cudnn_and_the_peers() -> None:
    """flashrepro's time over the fastest of cuDNN and FA4, never over torch flash; None
    without a candidate; the sweep table shows the ratio and the peer's name."""
    def us(**times: float) -> dict[str, dict[str, float]]:
        return {n.replace("_", "-"): {"median_us": t, "tflops": 1e3 / t} for n, t in times.items()}

    got = sweep.best_peer(us(flashrepro=30.0, torch_flash=10.0, torch_cudnn=40.0, fa4_cute=25.0))
    assert got == {"name": "fa4-cute", "ratio": pytest.approx(30.0 / 25.0)}
    got = sweep.best_peer(us(flashrepro=30.0, torch_cudnn=20.0, fa4_cute=25.0))
    assert got == {"name": "torch-cudnn", "ratio": pytest.approx(1.5)}
    assert sweep.best_peer(us(flashrepro=30.0, torch_cudnn=60.0)) == {
        "name": "torch-cudnn", "ratio": pytest.approx(0.5)}
    assert sweep.best_peer(us(flashrepro=30.0, torch_flash=20.0)) is None
    point = {"problem": PROBLEM.as_dict(), "skipped": {},
             "kernels": us(flashrepro=30.0, torch_flash=10.0, torch_cudnn=40.0, fa4_cute=24.0)}
    head, _, row = sweep.table([point], "github").splitlines()
    cells = dict(zip((c.strip() for c in head.split("|")), (c.strip() for c in row.split("|")),
                     strict=True))
    assert float(cells["flashrepro / best peer (time)"]) == pytest.approx(1.25)
    assert cells["best peer"] == "fa4-cute"


def test_best_peer_ratio_is_computed_round_by_round() -> None:
    """With per-round times the ratio is the median of each round's flashrepro time over that
    round's fastest candidate, with the range; the table shows both and the summary counts a
    point behind only when its median is above 1, surely behind when every round is."""
    def rounds(**times: list[float]) -> dict[str, dict[str, Any]]:
        return {n.replace("_", "-"): {"median_us": statistics.median(t), "round_medians_us": t,
                                      "tflops": 1e3 / statistics.median(t)}
                for n, t in times.items()}

    ks = rounds(flashrepro=[10.0, 12.0, 11.0], torch_cudnn=[10.0, 10.0, 13.0],
                fa4_cute=[11.0, 9.0, 10.5], torch_flash=[1.0, 1.0, 1.0])
    got = sweep.best_peer(ks)
    assert got is not None and got["name"] == "torch-cudnn"  # median 10.0 against FA4's 10.5
    per_round = [10.0 / 10.0, 12.0 / 9.0, 11.0 / 10.5]
    assert got["ratio"] == pytest.approx(statistics.median(per_round))
    assert (got["low"], got["high"]) == (pytest.approx(1.0), pytest.approx(12.0 / 9.0))
    point = {"problem": PROBLEM.as_dict(), "skipped": {}, "kernels": ks}
    head, _, row = sweep.table([point], "github").splitlines()
    cells = dict(zip((c.strip() for c in head.split("|")), (c.strip() for c in row.split("|")),
                     strict=True))
    assert cells["flashrepro / best peer (time)"] == "1.048 [1.000-1.333]"
    line = sweep.summary([point])
    assert "behind (median > 1.00) at 1, every round behind at 0" in line
    ahead = rounds(flashrepro=[9.0, 9.0, 9.0], torch_cudnn=[10.0, 10.0, 10.0])
    assert "behind (median > 1.00) at 0" in sweep.summary(
        [{"problem": PROBLEM.as_dict(), "kernels": ahead}])


def test_tune_table_has_the_peer_row_that_never_wins(
        cpu_measure: dict[str, list[float]], monkeypatch: pytest.MonkeyPatch) -> None:
    """tune times the peer in the candidates' rounds as a row ``peer fa4-cute`` (its error
    checked) that cannot win, even when it is the fastest; without FA4 the row says why."""
    from flashrepro_harness.bench import tune

    def fake_rounds(fns, rounds, calls_per_round):  # the peer fastest, then the candidates
        return {n: [5.0 if n.startswith("peer") else 10.0 + i] * rounds
                for i, n in enumerate(fns)}

    monkeypatch.setattr(tune, "interleaved_rounds", fake_rounds)
    pool = [ARTICLE]
    _stub_fa4(monkeypatch)
    cfg, rows = tune.best_config(PROBLEM, rounds=2, calls=1, pool=pool)
    assert cfg == ARTICLE
    peer = {r[0]: r for r in rows}["peer fa4-cute"]
    assert peer[1] == "5.0" and "(B, L, H, D) contiguous" in peer[2]
    assert float(peer[2].split("max err ")[1]) < 2e-3
    _no_flash_attn(monkeypatch)
    _, rows = tune.best_config(PROBLEM, rounds=2, calls=1, pool=pool)
    peer = {r[0]: r for r in rows}["peer fa4-cute"]
    assert peer[1] == "n/a" and peer[2].startswith("skipped: flash_attn.cute")


def test_host_cost_rounds_interleave_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """``host_and_eager_rounds`` measures every kernel in each round, the order rotated round
    by round, and reports the median of its own samples only."""
    from flashrepro_harness.bench import timing

    order: list[str] = []
    fns = {name: (lambda name=name: name) for name in "abc"}
    base = {"a": 10.0, "b": 20.0, "c": 30.0}

    def fake_host_times(fn, calls):
        order.append(fn())
        return [base[fn()] + i for i in range(calls)]

    monkeypatch.setattr(timing, "host_times", fake_host_times)
    monkeypatch.setattr(timing, "eager_us_per_call", lambda fn, calls: 2 * base[fn()] + len(order))
    out = timing.host_and_eager_rounds(fns, calls=3, eager_calls=5, repeats=4)
    assert order == list("abc" "bca" "cab" "abc")
    assert out["a"][0] == 11.0 and out["c"][0] == 31.0  # median of 10, 11, 12 repeated
    assert out["a"][1] == statistics.median([20 + 1, 20 + 6, 20 + 8, 20 + 10])
