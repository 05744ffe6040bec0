"""``flashrepro model --generate`` on the CPU: options, the rows, ratios, round ranges, tables,
plot and merge from synthetic numbers, and the driver itself on a tiny model (kernels under
Triton's interpreter, CUDA events replaced by a host clock, the static mode compiled with
dynamo's eager backend)."""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from flashrepro_harness import cli
from flashrepro_harness.paths import checkout_path
from flashrepro_harness.qwen3 import generate_tables as gt


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["model", *argv])


def test_generate_options() -> None:
    args = parse("--generate")
    assert args.generate and args.gen_modes == ["eager", "static"] and args.gen_impls is None
    assert (args.batches, args.prompt, args.new_tokens, args.gen_rounds) == ([1, 16], 1024,
                                                                            128, 3)
    assert args.packed and args.packed_seqs == 16 and args.packed_lengths == [128, 2048]
    args = parse("--generate", "--gen-modes", "static", "--gen-impls", "frepro,sdpa-efficient",
                 "--batches", "4", "--new-tokens", "2", "--no-packed")
    assert args.gen_modes == ["static"] and args.gen_impls == ["frepro", "sdpa-efficient"]
    assert args.batches == [4] and args.new_tokens == 2 and not args.packed


@pytest.mark.parametrize("argv", [["--gen-modes", "jit"], ["--gen-impls", "sdpa-math"],
                                  ["--new-tokens", "1"], ["--batches", "0"]])
def test_bad_generate_options_are_argparse_errors(argv: list[str],
                                                  capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--generate", *argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


def synthetic_group(mode: str, batch: int, rounds: int, rng: random.Random,
                    impls: tuple[str, ...] = gt.GEN_IMPLS) -> list[dict[str, Any]]:
    round_ms = {i: [(rng.uniform(20, 90), rng.uniform(300, 900)) for _ in range(rounds)]
                for i in impls}
    return gt.summarize_generate(mode, batch, 1024, 127, round_ms,
                                 {i: rng.random() for i in impls}, {"frepro": {"fullgraph": True}})


def test_generate_rows_ratios_and_round_ranges() -> None:
    """tokens/s from the medians (B·prompt per prefill, B·steps per decode loop), ratios to the
    SDPA backend with the most tokens/s, and each round's ratio to that backend's round."""
    rng = random.Random()
    rows = synthetic_group("static", 16, 5, rng)
    by = {r["impl"]: r for r in rows}
    for r in rows:
        p = statistics.median(r["prefill_round_ms"])
        d = statistics.median(r["decode_round_ms"])
        assert r["prefill_tokens_per_s"] == pytest.approx(16 * 1024 / (p * 1e-3))
        assert r["decode_tokens_per_s"] == pytest.approx(16 * 127 / (d * 1e-3))
    best_d = max(gt.GEN_SDPA, key=lambda i: by[i]["decode_tokens_per_s"])
    best_p = max(gt.GEN_SDPA, key=lambda i: by[i]["prefill_tokens_per_s"])
    for r in rows:
        assert r["decode_ratio_to_best_sdpa"] == pytest.approx(
            r["decode_tokens_per_s"] / by[best_d]["decode_tokens_per_s"])
        assert r["prefill_ratio_to_best_sdpa"] == pytest.approx(
            r["prefill_tokens_per_s"] / by[best_p]["prefill_tokens_per_s"])
        per_round = [b / m for b, m in zip(by[best_d]["decode_round_ms"],
                                           r["decode_round_ms"], strict=True)]
        assert r["decode_ratio_range"] == pytest.approx([min(per_round), max(per_round)])
        assert r["decode_ratio_round_median"] == pytest.approx(statistics.median(per_round))
    assert by["frepro"]["fullgraph"] is True
    assert max(r["decode_ratio_to_best_sdpa"] for r in rows if r["impl"] in gt.GEN_SDPA) == 1


def test_groups_are_compared_within_themselves() -> None:
    """Each (mode, B) has its own best SDPA backend; without one the ratio is n/a."""
    rng = random.Random()
    rows = synthetic_group("eager", 1, 3, rng) + synthetic_group("eager", 16, 3, rng)
    lone = synthetic_group("static", 1, 3, rng, ("frepro",))
    for group in (rows[:5], rows[5:]):
        assert max(r["decode_ratio_to_best_sdpa"] for r in group
                   if r["impl"] in gt.GEN_SDPA) == pytest.approx(1.0)
    assert lone[0]["decode_ratio_to_best_sdpa"] is None
    assert "n/a" in gt.table_generate(lone, "simple")


def test_packed_rows_count_real_tokens_against_sdpa_on_padding() -> None:
    rng = random.Random()
    round_ms = {("packed", "frepro"): [rng.uniform(5, 9) for _ in range(4)],
                ("packed", "fa4"): [rng.uniform(5, 9) for _ in range(4)],
                ("padded", "frepro"): [rng.uniform(9, 20) for _ in range(4)],
                ("padded", "sdpa-cudnn"): [rng.uniform(9, 20) for _ in range(4)],
                ("padded", "sdpa-efficient"): [rng.uniform(9, 20) for _ in range(4)]}
    rows = gt.summarize_packed(round_ms, 17000, 16 * 2048)
    by = {(r["layout"], r["impl"]): r for r in rows}
    best = max((("padded", "sdpa-cudnn"), ("padded", "sdpa-efficient")),
               key=lambda k: by[k]["tokens_per_s"])
    for key, r in by.items():
        assert r["tokens_per_s"] == pytest.approx(17000 / (statistics.median(round_ms[key])
                                                           * 1e-3))
        assert r["ratio_to_best_sdpa"] == pytest.approx(r["tokens_per_s"]
                                                        / by[best]["tokens_per_s"])
        assert r["padded_tokens"] == (16 * 2048 if key[0] == "padded" else 17000)
    text = gt.table_packed(rows, "github")
    assert text.count("| packed") == 2 and text.count("| padded") == 3


def _results(rows: list[dict[str, Any]], date: str) -> dict[str, Any]:
    return {"schema": gt.SCHEMA, "kind": "generate",
            "env": {"gpu": {"name": "NVIDIA H200", "key": "nvidia-h200"}, "torch": "2.11.0",
                    "triton": "3.6.0", "transformers": "5.17.0", "date": date,
                    "git_commit": "abc"},
            "model": {"num_hidden_layers": 28}, "method": {"rounds": 3, "prompt": 1024,
                                                           "new_tokens": 128},
            "errors": {}, "skipped": {"static sdpa-flash": "a mask"}, "rows": rows}


def test_markdown_plot_and_files(tmp_path: Path) -> None:
    rng = random.Random()
    rows = synthetic_group("eager", 1, 3, rng) + synthetic_group("static", 16, 3, rng)
    rows += gt.summarize_packed({("packed", "frepro"): [5.0], ("padded", "sdpa-cudnn"): [9.0]},
                                100, 160)
    results = _results(rows, "d1")
    gt.write_results(tmp_path, results)
    text = (tmp_path / "generate.md").read_text()
    assert text.count("| eager") == 5 and text.count("| static") == 5
    assert "## Packed-sequence prefill" in text and "static sdpa-flash: a mask" in text
    assert json.loads((tmp_path / "generate.json").read_text())["rows"] == json.loads(
        json.dumps(rows))
    assert (tmp_path / "generate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_caption_names_the_native_decode_launch() -> None:
    """A run with flashrepro.native switched on says so, and a merge says which runs did and
    which ran a checkout with changes to its commit."""
    rng = random.Random()
    plain = _results(synthetic_group("eager", 1, 3, rng), "d1")
    assert "FLASHREPRO_NATIVE" not in gt.caption(plain)
    native = _results(synthetic_group("eager", 1, 3, rng), "d1")
    native["env"]["native_decode"] = True
    assert "eager attention calls launched from C++: FLASHREPRO_NATIVE=1" in gt.caption(native)
    static = _results(synthetic_group("static", 1, 3, rng), "d2")
    static["env"]["git_modified"] = True
    merged = gt.caption(gt.merge([native, static]))
    assert ("d1 (commit abc, launched from C++: FLASHREPRO_NATIVE=1); d2 (commit abc with "
            "changes)." in merged)


def test_merge_joins_runs_and_refuses_what_it_cannot_pair() -> None:
    rng = random.Random()
    eager = _results(synthetic_group("eager", 1, 3, rng), "d1")
    static = _results(synthetic_group("static", 1, 3, rng), "d2")
    static["skipped"] = {"fa4": "does not import"}
    merged = gt.merge([eager, static], ["e.json", "s.json"])
    assert merged["skipped"] == {"static sdpa-flash": "a mask",  # e.json measured fa4:
                                 "fa4 (in s.json)": "does not import"}
    assert len(merged["rows"]) == 10 and [m["date"] for m in merged["merged_from"]] == ["d1",
                                                                                      "d2"]
    assert "Rows from runs d1 (commit abc); d2 (commit abc)" in gt.markdown(merged)
    with pytest.raises(ValueError, match="more than one file"):
        gt.merge([eager, _results(synthetic_group("eager", 1, 3, rng), "d3")])
    split = _results(synthetic_group("eager", 1, 3, rng, ("fa4",)), "d4")
    eager_no_fa4 = _results([r for r in eager["rows"] if r["impl"] != "fa4"], "d1")
    with pytest.raises(ValueError, match="split between"):
        gt.merge([eager_no_fa4, split], ["a.json", "b.json"])
    other = _results(synthetic_group("static", 16, 3, rng), "d5")
    other["env"]["torch"] = "2.12.0"
    with pytest.raises(ValueError, match="torch"):
        gt.merge([eager, other])
    slower = _results(synthetic_group("static", 16, 3, rng), "d6")
    slower["method"] = {**eager["method"], "rounds": 5}
    merged = gt.merge([eager, slower])
    assert merged["method"]["rounds"] == f"{eager['method']['rounds']} / 5 (by run, in the " \
        "order below)"
    longer = _results(synthetic_group("static", 16, 3, rng), "d7")
    longer["method"] = {**eager["method"], "prompt": 4096}
    with pytest.raises(ValueError, match="another method"):
        gt.merge([eager, longer])
    both = _results(synthetic_group("static", 16, 3, rng), "d8")
    both["method"] = {**eager["method"], "packed": "p"}
    eager_packed = {**eager, "method": {**eager["method"], "packed": "p"}}
    with pytest.raises(ValueError, match="packed-sequence prefill"):
        gt.merge([eager_packed, both])
    with pytest.raises(ValueError, match="at least two"):
        gt.merge([eager])
    with pytest.raises(ValueError, match="not a generate results JSON"):
        gt.merge([eager, {"schema": gt.SCHEMA, "kind": "model"}], ["e.json", "m.json"])


def test_merge_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rng = random.Random()
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    paths[0].write_text(json.dumps(_results(synthetic_group("eager", 1, 3, rng), "d1")))
    paths[1].write_text(json.dumps(_results(synthetic_group("static", 1, 3, rng), "d2")))
    out = tmp_path / "out"
    assert cli.main(["model", "--generate", "--merge", *map(str, paths), "--out",
                     str(out)]) == 0
    assert (out / "generate.md").exists()
    paths[1].write_text("{not json")
    assert cli.main(["model", "--generate", "--merge", *map(str, paths), "--out",
                     str(tmp_path / "x")]) == 2
    assert str(paths[1]) in capsys.readouterr().err


def test_generate_without_gpu_says_so(capsys: pytest.CaptureFixture,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("FLASHREPRO_REQUIRE_GPU", raising=False)
    assert cli.main(["model", "--generate"]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out


# -- the driver on a tiny model (CPU, Triton's interpreter) --


class HostEvent:
    """A stand-in for a timing CUDA event: the host clock when recorded, ms between two."""

    def __init__(self) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, other: HostEvent) -> float:
        return (other.t - self.t) * 1e3


@pytest.fixture
def on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    pytest.importorskip("transformers")
    from flashrepro_harness.qwen3 import generate

    monkeypatch.setattr(generate, "_event", HostEvent)
    monkeypatch.setattr(generate, "_synchronize", lambda: None)
    monkeypatch.setattr(generate, "compile_decode", lambda model, impl, fullgraph: torch.compile(
        generate._in_backend(model, impl), backend="eager", fullgraph=fullgraph))
    return generate


def tiny_models(impls: list[str]) -> dict[str, torch.nn.Module]:
    import transformers

    import flashrepro.integrations.transformers  # noqa: F401

    config = transformers.Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=256)
    torch.manual_seed(0)
    base = transformers.Qwen3ForCausalLM(config).eval().half()
    return {i: base if i == impls[0] else copy.deepcopy(base) for i in impls}


@pytest.mark.interpreter  # frepro on CPU tensors: Triton's interpreter
def test_measure_generate_runs_both_modes_on_a_tiny_model(on_the_cpu: Any) -> None:
    """Every mode, B and implementation gives a row with its rounds; the static mode compiles
    its decode step (fullgraph) and reuses one cache; the reference agrees with itself; an
    SDPA backend that refuses the static mode's mask is an error found before compiling (no
    cuDNN on the CPU)."""
    generate = on_the_cpu
    models = tiny_models(["frepro", "sdpa-flash", "sdpa-cudnn"])
    torch._dynamo.reset()
    rows, errors = generate.measure_generate(
        models, ["eager", "static"], [2], prompt=12, new_tokens=4, rounds=2,
        impls={"eager": ["frepro", "sdpa-flash"],
               "static": ["frepro", "sdpa-flash", "sdpa-cudnn"]},
        vocab=128, progress=lambda _: None, device="cpu")
    assert list(errors) == ["static B=2 sdpa-cudnn"] and "boolean mask" in errors[
        "static B=2 sdpa-cudnn"]
    assert [(r["mode"], r["impl"]) for r in rows] == [
        ("eager", "frepro"), ("eager", "sdpa-flash"), ("static", "frepro"),
        ("static", "sdpa-flash")]
    for r in rows:
        assert len(r["prefill_round_ms"]) == len(r["decode_round_ms"]) == 2
        assert r["decode_steps"] == 3 and r["decode_ms"] > 0 and r["agreement"] is not None
        assert r["mode"] == "eager" or r["fullgraph"] is True
    assert rows[1]["agreement"] == 1.0  # the reference itself
    assert rows[1]["step_agreement"] == 1.0
    assert all(0.0 <= r["step_agreement"] <= 1.0 for r in rows)


class LoggedGeneration:
    """A Generation stand-in: ``forwards()`` logs (name, forward) and yields as one does."""

    def __init__(self, name: str, steps: int, log: list[tuple[str, int]]) -> None:
        self.name, self.steps, self.log = name, steps, log

    def forwards(self, settle: bool = False) -> Any:
        assert settle  # lockstep starts each forward on an idle GPU
        for i in range(self.steps + 1):
            self.log.append((self.name, i))
            yield None
        yield (self.name, 1.0, float(self.steps))


def test_lockstep_runs_each_forward_side_by_side_in_rotated_order() -> None:
    """Forward i of every implementation runs before forward i + 1 of any; the order rotates
    at each forward and each round; each round gives every implementation its result."""
    from flashrepro_harness.qwen3.generate import lockstep

    log: list[tuple[str, int]] = []
    gens = {n: LoggedGeneration(n, 3, log) for n in ("a", "b", "c")}
    out = lockstep(gens, rounds=2)  # type: ignore[arg-type]
    assert out == {n: [(n, 1.0, 3.0)] * 2 for n in "abc"}
    first = log[:12]
    assert [i for _, i in first] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [n for n, _ in first] == list("abc" "bca" "cab" "abc")
    assert [n for n, _ in log[12:15]] == list("bca")  # round 2 starts one further on
    assert len(log) == 24


def test_step_agreement_judges_each_step_on_the_reference_prefix() -> None:
    """One differing token costs one position, not every later one as in agreement()."""
    from flashrepro_harness.qwen3.generate import agreement, step_agreement

    ref = torch.tensor([[5, 6, 7, 8]])
    forced = torch.tensor([[5, 9, 7, 8]])
    assert step_agreement(ref, forced) == 0.75 and agreement(ref, forced) == 0.25


@pytest.mark.interpreter  # frepro on CPU tensors: Triton's interpreter
def test_measure_packed_runs_each_layout(on_the_cpu: Any) -> None:
    generate = on_the_cpu
    models = tiny_models(["frepro", "sdpa-cudnn"])
    rows, errors, lengths = generate.measure_packed(
        models, [("packed", "frepro"), ("padded", "frepro"), ("padded", "sdpa-cudnn")],
        seqs=3, lo=4, hi=9, rounds=2, calls=1, vocab=128, progress=lambda _: None,
        device="cpu")
    assert len(lengths) == 3 and all(4 <= n <= 9 for n in lengths)
    assert [(r["layout"], r["impl"]) for r in rows] == [("packed", "frepro"),
                                                         ("padded", "frepro")]
    assert rows[0]["tokens"] == sum(lengths) and rows[1]["padded_tokens"] == 3 * max(lengths)
    assert list(errors) == ["packed prefill padded sdpa-cudnn"]  # no cuDNN on the CPU


def test_packed_inputs_hold_the_same_tokens_both_ways() -> None:
    pytest.importorskip("transformers")
    from flashrepro_harness.qwen3 import generate

    x = generate.packed_inputs(5, 3, 11, 100, device="cpu")
    lengths = x["lengths"]
    assert x["cu"].tolist() == [0, *torch.tensor(lengths).cumsum(0).tolist()]
    assert x["longest"] == max(lengths) and x["cu"].dtype == torch.int32
    for i, n in enumerate(lengths):
        lo = int(x["cu"][i])
        assert torch.equal(x["packed"][0, lo:lo + n], x["padded"][i, :n])
        assert x["mask"][i].tolist() == [1] * n + [0] * (max(lengths) - n)
        assert x["positions"][0, lo:lo + n].tolist() == list(range(n))


def test_skip_reasons_name_the_cause() -> None:
    pytest.importorskip("transformers")
    from flashrepro_harness.qwen3 import generate

    assert "mask" in generate.skip_reason("sdpa-flash", "static")
    assert "unwritten slots" in generate.skip_reason("fa4", "static")
    assert "mask" in generate.skip_reason("sdpa-flash", "padded")
    assert all(generate.skip_reason(i, "eager") is None for i in gt.GEN_IMPLS)
    assert generate.agreement(torch.tensor([[1, 2, 3, 4]] * 2),
                              torch.tensor([[1, 2, 0, 4], [1, 2, 3, 4]])) == pytest.approx(0.75)


@pytest.mark.parametrize(
    "path", sorted(checkout_path("reproduce", "results").glob("*/generate.json")),
    ids=lambda p: p.parent.name)
def test_committed_generate_md_is_the_table_of_generate_json(path: Path) -> None:
    """reproduce/results/<gpu>/generate.md is generated from the generate.json beside it."""
    assert path.with_suffix(".md").read_text() == gt.markdown(json.loads(path.read_text()))
