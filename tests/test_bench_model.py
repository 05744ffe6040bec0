"""``flashrepro model`` on the CPU: arguments, shapes, the interleaving, the rows and the table
(timings from a fake timer), the FA4 attention function's layout, the CLI entry."""

from __future__ import annotations

import argparse
import random
import statistics

import pytest
import torch

from flashrepro import cli
from flashrepro.bench import model as M


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["model", *argv])


def test_defaults_cover_the_issue_grid() -> None:
    args = parse()
    assert args.modes == ["eager", "compile"] and args.impls == M.IMPLS
    assert M.shapes(args.lengths, args.tokens, args.short) == [
        M.Shape(16, 1024), M.Shape(4, 4096), M.Shape(1, 16384), M.Shape(1, 1024)]


def test_flags_cut_the_run() -> None:
    args = parse("--modes", "eager", "--lengths", "4096", "--no-short", "--impls",
                 "frepro,sdpa-cudnn", "--layers", "2")
    assert args.modes == ["eager"] and args.impls == ["frepro", "sdpa-cudnn"]
    assert M.shapes(args.lengths, args.tokens, args.short) == [M.Shape(4, 4096)]
    assert args.layers == 2


@pytest.mark.parametrize("argv", [["--modes", "eager,jit"], ["--modes", ""],
                                  ["--impls", "sdpa-math"], ["--rounds", "0"]])
def test_bad_flags_are_argparse_errors(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_length_must_divide_tokens() -> None:
    with pytest.raises(ValueError, match="--lengths: every L must divide --tokens=16384"):
        M.shapes([3000], 16384, short=False)
    assert cli.main(["model", "--lengths", "3000"]) == 2


def test_run_without_gpu_says_so(capsys: pytest.CaptureFixture,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("FLASHREPRO_REQUIRE_GPU", raising=False)
    assert cli.main(["model"]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_interleave_and_summarize_with_a_fake_timer() -> None:
    rng = random.Random()
    base = {impl: rng.uniform(5.0, 50.0) for impl in M.IMPLS}
    order: list[str] = []

    def timer(fn: object, calls: int) -> list[float]:
        name = fn()  # type: ignore[operator]
        order.append(name)
        return [base[name] * rng.uniform(0.9, 1.1) for _ in range(calls)]

    fns = {impl: (lambda n=impl: n) for impl in M.IMPLS}
    rounds = 4
    per_round = M.interleave(fns, rounds=rounds, calls=3, timer=timer)
    # Every round times every implementation once, in an order rotated by the round index.
    assert order == [n for r in range(rounds) for n in M.IMPLS[r:] + M.IMPLS[:r]]
    shape = M.Shape(4, 4096)
    diffs = {impl: rng.random() for impl in M.IMPLS}
    rows = M.summarize("eager", shape, per_round, diffs, {"frepro": {"fullgraph": True}})
    best_sdpa = max(shape.tokens / (statistics.median(per_round[n]) * 1e-3)
                    for n in M.SDPA_IMPLS)
    for row in rows:
        ms = statistics.median(per_round[row["impl"]])
        assert row["ms"] == ms
        assert row["tokens_per_s"] == pytest.approx(16384 / (ms * 1e-3), rel=1e-12)
        assert row["ratio_to_best_sdpa"] == pytest.approx(row["tokens_per_s"] / best_sdpa)
        assert row["max_abs_diff_vs_ref"] == diffs[row["impl"]]
        assert (row["batch"], row["seqlen"], row["mode"]) == (4, 4096, "eager")
    assert rows[0]["fullgraph"] is True
    assert max(r["ratio_to_best_sdpa"] for r in rows if r["impl"] in M.SDPA_IMPLS) == 1.0
    text = M.table(rows, "github")
    for row in rows:
        assert f"{row['tokens_per_s'] / 1e3:.0f}" in text and row["impl"] in text


def test_no_sdpa_row_gives_no_ratio() -> None:
    rows = M.summarize("compile", M.Shape(1, 1024), {"frepro": [2.0, 3.0]}, {}, {})
    assert rows[0]["ratio_to_best_sdpa"] is None and rows[0]["max_abs_diff_vs_ref"] is None
    assert "n/a" in M.table(rows, "simple")


def test_plot_writes_a_png(tmp_path: object) -> None:
    pytest.importorskip("matplotlib")
    rows = []
    for mode in M.MODES:
        for shape in (M.Shape(16, 1024), M.Shape(1, 1024)):
            rows += M.summarize(mode, shape, {n: [random.uniform(1, 9)] for n in M.IMPLS},
                                {}, {})
    path = tmp_path / "model.png"  # type: ignore[operator]
    M.plot(rows, path, "caption")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_max_abs_diff_is_chunked_and_exact() -> None:
    a = torch.randn(3, 700, 17)
    b = a.clone()
    i, j, k = random.randrange(3), random.randrange(700), random.randrange(17)
    b[i, j, k] += 0.375
    assert M.max_abs_diff(a, b, chunk=256) == pytest.approx(0.375, abs=1e-6)


def test_fa4_forward_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The FA4 function hands FA4 (B, L, H, D) views and returns its output as is."""
    import sys
    import types

    calls = []

    def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        softmax_scale: float | None = None,
                        causal: bool = False) -> tuple[torch.Tensor, None]:
        calls.append((q.shape, k.shape, softmax_scale, causal))
        return q * 2, None

    fake = types.ModuleType("flash_attn.cute")
    fake.flash_attn_func = flash_attn_func  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.cute", fake)
    q_bl = torch.randn(2, 7, 4, 16)
    k_bl = torch.randn(2, 7, 2, 16)
    module = torch.nn.Module()
    out, weights = M.fa4_attention_forward(module, q_bl.transpose(1, 2), k_bl.transpose(1, 2),
                                           k_bl.transpose(1, 2), None, scaling=0.25)
    assert weights is None and torch.equal(out, q_bl * 2)
    assert calls == [((2, 7, 4, 16), (2, 7, 2, 16), 0.25, True)]
    assert M.fa4_available() is None
    with pytest.raises(ValueError, match="no mask"):
        M.fa4_attention_forward(module, q_bl.transpose(1, 2), k_bl.transpose(1, 2),
                                k_bl.transpose(1, 2), torch.zeros(1))


def test_qwen3_0_6b_config() -> None:
    pytest.importorskip("transformers")
    c = M.qwen3_0_6b_config()
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
            c.head_dim, c.intermediate_size, c.vocab_size) == (28, 1024, 16, 8, 128, 3072,
                                                               151936)


def test_make_forward_each_copy_keeps_its_attention() -> None:
    """Deep copies of one tiny fp16 Qwen3, one per implementation, give the same logits (the
    kernel under the interpreter on the CPU; SDPA's flash backend has a CPU kernel)."""
    pytest.importorskip("transformers")
    import copy

    from transformers import Qwen3ForCausalLM

    config = M.qwen3_0_6b_config(num_layers=1)
    for name, value in {"vocab_size": 256, "hidden_size": 128, "intermediate_size": 256,
                        "num_attention_heads": 4, "num_key_value_heads": 2,
                        "head_dim": 32}.items():
        setattr(config, name, value)
    torch.manual_seed(random.randrange(2**31))
    base = Qwen3ForCausalLM(config).half().eval()
    models = {impl: copy.deepcopy(base) for impl in ("frepro", "sdpa-flash")}
    fwds = {impl: M.make_forward(m, impl) for impl, m in models.items()}
    ids = torch.randint(0, 256, (2, 40))
    with torch.inference_mode():
        out = {impl: f(ids).float() for impl, f in fwds.items()}
    assert models["frepro"].config._attn_implementation == "frepro"
    assert models["sdpa-flash"].config._attn_implementation == "sdpa"
    assert out["frepro"].shape == (2, 40, 256)
    # Two fp16 attentions of one network: a few fp16 roundings (eps 2^-10) at the logits scale.
    assert M.max_abs_diff(out["frepro"], out["sdpa-flash"]) < 4e-3 * out["sdpa-flash"].abs().max()
