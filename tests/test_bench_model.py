"""``flashrepro model`` on the CPU: arguments, shapes, the interleaving, the rows and the table
(timings from a fake timer), the FA4 attention function's layout, the CLI entry."""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

import pytest
import torch

from flashrepro_harness import cli, qwen3
from flashrepro_harness.paths import checkout_path
from flashrepro_harness.qwen3 import build, classify, measure, tables

RESULTS_ROOT = checkout_path("reproduce", "results")


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["model", *argv])


def test_defaults_cover_the_issue_grid() -> None:
    args = parse()
    assert args.modes == ["eager", "compile"] and args.impls == qwen3.IMPLS
    assert build.shapes(args.lengths, args.tokens, args.short) == [
        build.Shape(16, 1024), build.Shape(4, 4096), build.Shape(1, 16384), build.Shape(1, 1024)]


def test_flags_cut_the_run() -> None:
    args = parse("--modes", "eager", "--lengths", "4096", "--no-short", "--impls",
                 "frepro,sdpa-cudnn", "--layers", "2")
    assert args.modes == ["eager"] and args.impls == ["frepro", "sdpa-cudnn"]
    assert build.shapes(args.lengths, args.tokens, args.short) == [build.Shape(4, 4096)]
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
        build.shapes([3000], 16384, short=False)
    assert cli.main(["model", "--lengths", "3000"]) == 2


def test_run_without_gpu_says_so(capsys: pytest.CaptureFixture,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("FLASHREPRO_REQUIRE_GPU", raising=False)
    assert cli.main(["model"]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_interleave_and_summarize_with_a_fake_timer() -> None:
    rng = random.Random()
    base = {impl: rng.uniform(5.0, 50.0) for impl in qwen3.IMPLS}
    order: list[str] = []

    def timer(fn: object, calls: int) -> list[float]:
        name = fn()  # type: ignore[operator]
        order.append(name)
        return [base[name] * rng.uniform(0.9, 1.1) for _ in range(calls)]

    fns = {impl: (lambda n=impl: n) for impl in qwen3.IMPLS}
    rounds = 4
    per_round = measure.interleave(fns, rounds=rounds, calls=3, timer=timer)
    # Every round times every implementation once, in an order rotated by the round index.
    assert order == [n for r in range(rounds) for n in qwen3.IMPLS[r:] + qwen3.IMPLS[:r]]
    shape = build.Shape(4, 4096)
    diffs = {impl: rng.random() for impl in qwen3.IMPLS}
    rows = tables.summarize("eager", shape, per_round, diffs, {"frepro": {"fullgraph": True}})
    best_sdpa = max(shape.tokens / (statistics.median(per_round[n]) * 1e-3)
                    for n in qwen3.SDPA_IMPLS)
    for row in rows:
        ms = statistics.median(per_round[row["impl"]])
        assert row["ms"] == ms
        assert row["tokens_per_s"] == pytest.approx(16384 / (ms * 1e-3), rel=1e-12)
        assert row["ratio_to_best_sdpa"] == pytest.approx(row["tokens_per_s"] / best_sdpa)
        assert row["max_abs_diff_vs_ref"] == diffs[row["impl"]]
        assert (row["batch"], row["seqlen"], row["mode"]) == (4, 4096, "eager")
    assert rows[0]["fullgraph"] is True
    assert max(r["ratio_to_best_sdpa"] for r in rows if r["impl"] in qwen3.SDPA_IMPLS) == 1.0
    text = tables.table(rows, "github")
    for row in rows:
        assert f"{row['tokens_per_s'] / 1e3:.0f}" in text and row["impl"] in text


def test_round_range_pairs_each_round_with_the_best_sdpa_backend() -> None:
    """The range is of per-round ratios (round r against round r of the backend with the best
    median), not of one implementation's rounds alone: a slow phase that hits every
    implementation in round 2 leaves the paired ratios level."""
    rng = random.Random()
    phase = [1.0, rng.uniform(1.3, 1.6), 1.0, 1.0, 1.0]  # round 2 slow for everyone
    per_round = {"frepro": [10.0 * p for p in phase], "sdpa-cudnn": [11.0 * p for p in phase],
                 "sdpa-flash": [12.0 * p for p in phase]}
    per_round["frepro"][3] = 13.0  # one round where frepro alone was slow
    rows = {r["impl"]: r
            for r in tables.summarize("eager", build.Shape(1, 1024), per_round, {}, {})}
    ranges = {key[-1]: lo_hi
              for key, lo_hi in tables.ratio_round_ranges(list(rows.values())).items()}
    lo, hi = ranges["frepro"]
    assert lo == pytest.approx(11.0 / 13.0) and hi == pytest.approx(1.1)
    assert ranges["sdpa-cudnn"] == pytest.approx([1.0, 1.0])
    assert ranges["sdpa-flash"] == pytest.approx([11 / 12, 11 / 12])
    text = tables.table(list(rows.values()), "github")
    assert f"{11 / 13:.3f}-{1.1:.3f}" in text and "per-round range" in text


def test_gpu_busy_is_kernel_time_over_wall_time() -> None:
    row = {"ms": 20.0, "gpu_us": 5000.0}
    assert tables.gpu_busy(row) == pytest.approx(0.25)
    assert tables.gpu_busy({"ms": 20.0}) is None
    rows = tables.summarize("eager", build.Shape(1, 1024), {"sdpa-flash": [20.0]}, {},
                       {"sdpa-flash": {"gpu_us": 15000.0}})
    assert "0.75" in tables.table(rows, "github")


def test_no_sdpa_row_gives_no_ratio() -> None:
    rows = tables.summarize("compile", build.Shape(1, 1024), {"frepro": [2.0, 3.0]}, {}, {})
    assert rows[0]["ratio_to_best_sdpa"] is None and rows[0]["max_abs_diff_vs_ref"] is None
    assert "n/a" in tables.table(rows, "simple")


def test_plot_writes_a_png(tmp_path: object) -> None:
    pytest.importorskip("matplotlib")
    rows = []
    for mode in qwen3.MODES:
        for shape in (build.Shape(16, 1024), build.Shape(1, 1024)):
            rows += tables.summarize(mode, shape, {n: [random.uniform(1, 9)] for n in qwen3.IMPLS},
                                {}, {})
    path = tmp_path / "model.png"  # type: ignore[operator]
    tables.plot(rows, path, "caption")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_max_abs_diff_is_chunked_and_exact() -> None:
    a = torch.randn(3, 700, 17)
    b = a.clone()
    i, j, k = random.randrange(3), random.randrange(700), random.randrange(17)
    b[i, j, k] += 0.375
    assert measure.max_abs_diff(a, b, chunk=256) == pytest.approx(0.375, abs=1e-6)


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
    out, weights = build.fa4_attention_forward(module, q_bl.transpose(1, 2), k_bl.transpose(1, 2),
                                           k_bl.transpose(1, 2), None, scaling=0.25)
    assert weights is None and torch.equal(out, q_bl * 2)
    assert calls == [((2, 7, 4, 16), (2, 7, 2, 16), 0.25, True)]
    assert build.fa4_available() is None
    with pytest.raises(ValueError, match="no mask"):
        build.fa4_attention_forward(module, q_bl.transpose(1, 2), k_bl.transpose(1, 2),
                                k_bl.transpose(1, 2), torch.zeros(1))


def test_qwen3_0_6b_config() -> None:
    pytest.importorskip("transformers")
    c = build.qwen3_0_6b_config()
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
            c.head_dim, c.intermediate_size, c.vocab_size) == (28, 1024, 16, 8, 128, 3072,
                                                               151936)


@pytest.mark.interpreter
def test_make_forward_each_copy_keeps_its_attention() -> None:
    """Deep copies of one tiny fp16 Qwen3, one per implementation, give the same logits (the
    kernel under the interpreter on the CPU; SDPA's flash backend has a CPU kernel)."""
    pytest.importorskip("transformers")
    import copy

    from transformers import Qwen3ForCausalLM

    config = build.qwen3_0_6b_config(num_layers=1)
    for name, value in {"vocab_size": 256, "hidden_size": 128, "intermediate_size": 256,
                        "num_attention_heads": 4, "num_key_value_heads": 2,
                        "head_dim": 32}.items():
        setattr(config, name, value)
    torch.manual_seed(random.randrange(2**31))
    base = Qwen3ForCausalLM(config).half().eval()
    models = {impl: copy.deepcopy(base) for impl in ("frepro", "sdpa-flash")}
    fwds = {impl: build.make_forward(m, impl) for impl, m in models.items()}
    ids = torch.randint(0, 256, (2, 40))
    with torch.inference_mode():
        out = {impl: f(ids).float() for impl, f in fwds.items()}
    assert models["frepro"].config._attn_implementation == "frepro"
    assert models["sdpa-flash"].config._attn_implementation == "sdpa"
    assert out["frepro"].shape == (2, 40, 256)
    # Two fp16 attentions of one network: a few fp16 roundings (eps 2^-10) at the logits scale.
    assert (measure.max_abs_diff(out["frepro"], out["sdpa-flash"])
            < 4e-3 * out["sdpa-flash"].abs().max())


def _tiny_qwen3(layers: int = 2) -> torch.nn.Module:
    """A tiny fp16 Qwen3 with random weights (the kernel runs under the interpreter)."""
    from transformers import Qwen3ForCausalLM

    config = build.qwen3_0_6b_config(num_layers=layers)
    for name, value in {"vocab_size": 256, "hidden_size": 128, "intermediate_size": 256,
                        "num_attention_heads": 4, "num_key_value_heads": 2,
                        "head_dim": 32}.items():
        setattr(config, name, value)
    torch.manual_seed(random.randrange(2**31))
    return Qwen3ForCausalLM(config).half().eval()


def _aten_capture() -> tuple[object, list[set[str]]]:
    """A torch.compile backend (AOT, no inductor) recording each forward graph's attention and
    softmax ops: SDPA's backend choice shows as the aten op the graph was traced to."""
    from torch._dynamo.backends.common import aot_autograd

    graphs: list[set[str]] = []

    def fw_compiler(gm: torch.fx.GraphModule, example_inputs: object) -> object:
        graphs.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"
                       and ("attention" in str(n.target) or "softmax" in str(n.target))})
        return gm

    return aot_autograd(fw_compiler=fw_compiler), graphs


# On the CPU, cuDNN has no kernel: its stand-in is the math backend (seen as _safe_softmax).
CPU_BACKENDS = {"sdpa-cudnn": "MATH", "sdpa-flash": "FLASH_ATTENTION"}


@pytest.fixture
def cpu_compile(monkeypatch: pytest.MonkeyPatch):
    """The compile tests' set-up: transformers, the CPU stand-ins for SDPA's backends, a clean
    dynamo before and after, and (a 2-layer tiny Qwen3, :func:`_aten_capture`'s backend, its
    list of graphs)."""
    pytest.importorskip("transformers")
    monkeypatch.setattr(build, "SDPA_BACKENDS", CPU_BACKENDS)
    torch._dynamo.reset()
    yield (_tiny_qwen3(layers=2), *_aten_capture())
    torch._dynamo.reset()
CPU_OPS = {"sdpa-cudnn": {"aten._safe_softmax.default"},
           "sdpa-flash": {"aten._scaled_dot_product_flash_attention_for_cpu.default"},
           "frepro": {"flashrepro.attention_bshd.default"}}


@pytest.mark.interpreter
def test_regional_compile_one_graph_per_implementation_backend_baked_in(cpu_compile) -> None:
    """Each copy's decoder layers are compiled, not the model; the layers share one graph per
    implementation; each SDPA copy's graph has its own backend even though both run the same
    layer code, and the surrounding sdpa_kernel context no longer matters once traced."""
    import copy

    from torch.nn.attention import SDPBackend, sdpa_kernel

    base, backend, graphs = cpu_compile
    ids = torch.randint(0, 256, (2, 40))
    for impl in ("sdpa-cudnn", "sdpa-flash", "frepro"):
        model = copy.deepcopy(base)
        with torch.inference_mode():
            eager = build.make_forward(model, impl)(ids).float()
        _, info = measure.compile_forward(model, impl, ids, backend=backend)
        assert info["fullgraph"] is True and "fullgraph_error" not in info
        assert info["graphs_compiled"] == 1 and info["compile_s"] > 0
        assert graphs[-1] == CPU_OPS[impl], impl
        assert model._compiled_call_impl is None  # the model's own forward stays eager
        assert all(layer._compiled_call_impl is not None for layer in model.model.layers)
        other = SDPBackend.FLASH_ATTENTION if impl == "sdpa-cudnn" else SDPBackend.MATH
        count = len(graphs)
        with torch.inference_mode(), sdpa_kernel([other]):  # a wrong outer context
            out = model(ids, use_cache=False).logits.float()
        assert len(graphs) == count  # no retrace: the graph of the row's own backend ran
        assert measure.max_abs_diff(out, eager) < 4e-3 * eager.abs().max()
        measure.uncompile_layers(model)
        assert all(layer._compiled_call_impl is None for layer in model.model.layers)


@pytest.mark.interpreter
def test_each_implementation_compiles_its_own_code(cpu_compile) -> None:
    """The layers of one implementation share one code object, each implementation its own:
    with dynamo's recompile limit at 1, every implementation's compiled layers still run their
    graph (counted per run) after the others compiled. Under one shared code object the
    second implementation's layers would exceed the limit and run eagerly."""
    import copy

    base, _, _ = cpu_compile
    runs: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: object) -> object:
        def run(*args: object) -> object:
            runs.append(1)
            return gm(*args)
        return run

    ids = torch.randint(0, 256, (1, 24))
    models = {impl: copy.deepcopy(base) for impl in ("frepro", "sdpa-cudnn", "sdpa-flash")}
    with torch._dynamo.config.patch(recompile_limit=1):
        for impl, model in models.items():
            measure.compile_forward(model, impl, ids, backend=counting)
        codes = {impl: {layer._compiled_call_impl._torchdynamo_orig_callable.__code__
                        for layer in model.model.layers} for impl, model in models.items()}
        assert all(len(c) == 1 for c in codes.values())
        assert len(set.union(*codes.values())) == len(models)
        for impl, model in models.items():
            runs.clear()
            with torch.inference_mode():
                build.make_forward(model, impl)(ids)
            assert len(runs) == len(model.model.layers), impl


def test_outer_sdpa_context_alone_is_not_guarded(cpu_compile) -> None:
    """Why compile_layers traces sdpa_kernel inside the compiled call: with the plain
    ``layer.compile()`` and the context around the call, dynamo reuses the first SDPA copy's
    graph for the second copy (same code, equal guards), backend and all."""
    import copy

    base, backend, graphs = cpu_compile
    ids = torch.randint(0, 256, (1, 24))
    for impl in ("sdpa-cudnn", "sdpa-flash"):
        model = copy.deepcopy(base)
        fwd = build.make_forward(model, impl)  # sdpa_kernel(backend) around the model call
        for layer in model.model.layers:
            layer.compile(fullgraph=True, backend=backend)
        with torch.inference_mode():
            fwd(ids)
    assert graphs == [CPU_OPS["sdpa-cudnn"]]  # sdpa-flash ran the math graph, untraced


def test_compile_falls_back_to_graph_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer that cannot be traced whole is compiled again with fullgraph=False, recorded."""
    pytest.importorskip("transformers")
    torch._dynamo.reset()
    model = _tiny_qwen3(layers=2)
    ids = torch.randint(0, 256, (1, 16))
    calls: list[bool] = []
    real = measure.compile_layers

    def spy(model: torch.nn.Module, impl: str, fullgraph: bool, backend: object) -> None:
        calls.append(fullgraph)
        real(model, impl, fullgraph, backend)

    monkeypatch.setattr(measure, "compile_layers", spy)
    mlp = model.model.layers[0].mlp
    mlp_forward = type(mlp).forward

    def breaking_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return mlp_forward(self, x)

    monkeypatch.setattr(type(mlp), "forward", breaking_forward)
    with torch.inference_mode():
        eager = build.make_forward(model, "sdpa-flash")(ids).float()
    monkeypatch.setattr(build, "SDPA_BACKENDS", CPU_BACKENDS)
    fwd, info = measure.compile_forward(model, "sdpa-flash", ids, backend="eager")
    assert calls == [True, False]
    assert info["fullgraph"] is False and "graph_break" in info["fullgraph_error"].lower()
    with torch.inference_mode():
        assert measure.max_abs_diff(fwd(ids).float(), eager) < 4e-3 * eager.abs().max()
    torch._dynamo.reset()


def test_decoder_layers_refuses_other_models() -> None:
    with pytest.raises(ValueError, match=r"model\.model\.layers"):
        build.decoder_layers(torch.nn.Linear(2, 2))


# Kernel names as torch.profiler reports them on an H200 (forms of the names in the sources
# cited by classify.ATTENTION_KERNELS), and others every forward runs.
ATTENTION_NAMES = {
    "attn_fwd_gluon_ws_kernel": "flashrepro-ws",
    "attn_fwd_gluon_kernel": "flashrepro-gluon",
    "attn_fwd_kernel": "flashrepro-triton",
    "article_fwd_kernel": "flashrepro-article",
    "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__"
    "tensorptrbf16gmemalign16odiv8_0": "fa4",
    "cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0": "cudnn",
    "sm90_flash_fprop_wgmma_f16_knob_3_64x128x128_4x1x1_cga1x1x1_kernel0_0": "cudnn",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
    "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
    "false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)":
        "flash",
    "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
    "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)":
        "efficient",
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, "
    "false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)":
        "math",
    "triton_per_fused__safe_softmax_3": "math",
}
OTHER_NAMES = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::"
    "BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul>)",
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
    "unsigned int, 2, 2, -2, true>(...)",
    "Memcpy DtoD (Device -> Device)",
]


@pytest.mark.parametrize("name", sorted(ATTENTION_NAMES))
def test_attention_label(name: str) -> None:
    assert classify.attention_label(name) == ATTENTION_NAMES[name]
    assert classify.attention_label(name.upper()) == ATTENTION_NAMES[name]


@pytest.mark.parametrize("name", OTHER_NAMES)
def test_other_kernels_are_not_attention(name: str) -> None:
    assert classify.attention_label(name) is None


def _fake_forward(attention: dict[str, int], layers: int = 28
                  ) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """Kernel launches of a fake forward: per layer the given attention kernels (name ->
    launches per layer) among GEMMs and elementwise kernels; the exact µs per name."""
    rng = random.Random()
    launches: list[tuple[str, float]] = []
    for _ in range(layers):
        for name in OTHER_NAMES[:4]:
            launches.append((name, rng.uniform(1.0, 90.0)))
        for name, n in attention.items():
            launches += [(name, rng.uniform(5.0, 400.0)) for _ in range(n)]
    rng.shuffle(launches)
    totals: dict[str, float] = {}
    for name, us in launches:
        totals[name] = totals.get(name, 0.0) + us
    return launches, totals


def test_kernel_summary_counts_and_times_per_forward() -> None:
    ws = "attn_fwd_gluon_ws_kernel"
    launches, totals = _fake_forward({ws: 1})
    s = classify.kernel_summary(launches, "frepro")
    assert s["attention_kernel"] == "flashrepro-ws" and s["backend_mismatch"] is False
    assert s["attention_kernels"] == [{"label": "flashrepro-ws", "name": ws,
                                       "us": pytest.approx(totals[ws]), "calls": 28}]
    assert s["attention_us"] == pytest.approx(totals[ws])
    assert s["gpu_us"] == pytest.approx(sum(totals.values()))
    heaviest = sorted(totals, key=lambda n: -totals[n])[:5]
    assert [t["name"] for t in s["top_kernels"]] == heaviest
    assert [t["us"] for t in s["top_kernels"]] == pytest.approx([totals[n] for n in heaviest])
    assert all(t["calls"] == 28 for t in s["top_kernels"])


@pytest.mark.parametrize(("impl", "kernels", "label", "mismatch"), [
    ("sdpa-cudnn", ["cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0"],
     "cudnn", False),
    ("sdpa-cudnn", ["triton_per_fused__safe_softmax_3"], "math", True),
    ("sdpa-flash", ["void pytorch_flash::flash_fwd_kernel<>(pytorch_flash::Flash_fwd_params)"],
     "flash", False),
    ("sdpa-flash", ["fmha_cutlassF_bf16_aligned_64x128_rf_sm80(...)"], "efficient", True),
    ("frepro", ["attn_fwd_gluon_ws_kernel", "attn_fwd_gluon_kernel"], None, False),
    ("frepro", [], "none", True),
    ("fa4", ["kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_0"],
     "fa4", False),
    ("fa4", ["kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_0",
             "softmax_warp_forward"], None, True),
])
def test_kernel_summary_mismatch(impl: str, kernels: list[str], label: str | None,
                                 mismatch: bool) -> None:
    launches, totals = _fake_forward(dict.fromkeys(kernels, 1))
    s = classify.kernel_summary(launches, impl)
    assert s["backend_mismatch"] is mismatch
    if label is None:  # several labels: heaviest first
        labels = [classify.attention_label(n) for n in sorted(kernels, key=lambda n: -totals[n])]
        label = "+".join(labels)
    assert s["attention_kernel"] == label


def test_kernel_summary_refuses_an_unknown_impl() -> None:
    with pytest.raises(ValueError, match="impl: expected one of"):
        classify.kernel_summary([], "sdpa-math")


def test_kernel_events_keeps_the_gpu_side() -> None:
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    us = [random.uniform(1, 100) for _ in range(3)]
    events = [SimpleNamespace(name="attn_fwd_gluon_ws_kernel", device_type=DeviceType.CUDA,
                              device_time_total=us[0]),
              SimpleNamespace(name="aten::mm", device_type=DeviceType.CPU,
                              device_time_total=us[1]),
              SimpleNamespace(name="Memset (Device)", device_type=DeviceType.CUDA,
                              device_time_total=us[2])]
    assert classify.kernel_events(events) == [("attn_fwd_gluon_ws_kernel", us[0]),
                                       ("Memset (Device)", us[2])]


def test_table_shows_the_kernel_and_the_mismatch() -> None:
    good, _ = _fake_forward({"cudnn_generated_fort_native_sdpa_sm90_knob_7": 1}, layers=2)
    bad, _ = _fake_forward({"softmax_warp_forward": 1}, layers=2)
    extra = {"sdpa-cudnn": classify.kernel_summary(good, "sdpa-cudnn"),
             "sdpa-flash": classify.kernel_summary(bad, "sdpa-flash")}
    rows = tables.summarize("compile", build.Shape(16, 1024),
                            {"sdpa-cudnn": [9.0], "sdpa-flash": [8.0]}, {}, extra)
    text = tables.table(rows, "github")
    assert "attention kernel" in text and "| cudnn " in text and "math (MISMATCH)" in text
    notes = tables.mismatch_notes(rows)
    assert len(notes) == 1 and notes[0].startswith("compile B=16 L=1024 sdpa-flash: timed 'math'")
    assert "softmax_warp_forward" in notes[0]


EAGER_NAMES = [n for n in OTHER_NAMES if not n.startswith("triton_")]


def _launches(names: list[str], layers: int = 2) -> list[tuple[str, float]]:
    """A forward's (kernel, µs) launches: ``names`` once per layer, random µs."""
    return [(n, random.uniform(1.0, 90.0)) for _ in range(layers) for n in names]


def test_kernel_summary_counts_inductor_launches() -> None:
    inductor = ["triton_poi_fused__unsafe_view_mul_silu_4", "triton_red_fused_mean_0"]
    compiled = _launches(["attn_fwd_gluon_ws_kernel", *EAGER_NAMES, *inductor], layers=3)
    eager = _launches(["attn_fwd_gluon_ws_kernel", *EAGER_NAMES], layers=3)
    assert classify.kernel_summary(compiled, "frepro")["inductor_launches"] == 6
    assert classify.kernel_summary(eager, "frepro")["inductor_launches"] == 0


@pytest.mark.parametrize("mode", ["compile", "eager"])
def test_compile_rows_that_ran_eagerly_are_flagged(mode: str) -> None:
    """A compile row whose profiled forward ran no inductor kernel, or for which dynamo
    compiled no graph, is marked in the table and listed under the table; eager rows never."""
    fused = "triton_poi_fused_mul_0"
    extra = {"frepro": classify.kernel_summary(
                 _launches(["attn_fwd_gluon_ws_kernel", *EAGER_NAMES]), "frepro"),
             "sdpa-cudnn": {**classify.kernel_summary(
                 _launches(["cudnn_generated_fort_native_sdpa_sm90", fused]), "sdpa-cudnn"),
                 "graphs_compiled": 0},
             "sdpa-flash": {**classify.kernel_summary(
                 _launches(["pytorch_flash::flash_fwd_kernel", fused]), "sdpa-flash"),
                 "graphs_compiled": 1}}
    rows = tables.summarize(mode, build.Shape(16, 1024),
                            {"frepro": [7.0], "sdpa-cudnn": [9.0], "sdpa-flash": [8.0]}, {},
                            extra)
    notes = tables.not_compiled_notes(rows)
    text = tables.table(rows, "github")
    if mode == "eager":
        assert notes == [] and "NOT COMPILED" not in text
        return
    assert sorted(notes) == ["compile B=16 L=1024 frepro: the profiled forward ran no inductor "
                             "kernel", "compile B=16 L=1024 sdpa-cudnn: dynamo compiled no graph"]
    assert text.count("(NOT COMPILED)") == 2
    part = _part("compile", ("frepro",), "2026-12-03")
    assert "**Not compiled**" in tables.markdown({**part, "rows": rows})


def _part(mode: str, impls: tuple[str, ...], date: str) -> dict:
    rows = [{"mode": mode, "batch": 1, "seqlen": 1024, "impl": i, "ms": 1.0 + n,
             "tokens_per_s": 1024 / (1.0 + n) * 1e3, "ratio_to_best_sdpa": 1.0,
             "max_abs_diff_vs_ref": 0.05, "round_medians_us": [1.0]}
            for n, i in enumerate(impls)]
    return {"schema": tables.SCHEMA, "kind": "model", "model": {"num_hidden_layers": 2},
            "env": {"gpu": {"name": "NVIDIA H200", "key": "nvidia-h200"}, "torch": "2.11.0",
                    "triton": "3.6.0", "transformers": "5.17.0", "date": date,
                    "git_commit": "abc"},
            "method": {"rounds": 3}, "errors": {}, "skipped": {}, "rows": rows}


def test_merge_joins_runs_of_one_setup_and_refuses_others() -> None:
    eager = _part("eager", ("frepro", "sdpa-flash"), "d1")
    compiled = _part("compile", ("frepro", "sdpa-flash"), "d2")
    merged = tables.merge([compiled, eager])
    assert [(r["mode"], r["impl"]) for r in merged["rows"]] == [
        ("eager", "frepro"), ("eager", "sdpa-flash"), ("compile", "frepro"),
        ("compile", "sdpa-flash")]
    assert [m["date"] for m in merged["merged_from"]] == ["d2", "d1"]
    text = tables.markdown(merged)
    assert "Rows from runs ['compile'] at d2" in text and text.count("| frepro") == 2
    other = _part("eager", ("fa4",), "d3")
    other["env"]["torch"] = "2.12.0"
    with pytest.raises(ValueError, match="torch"):
        tables.merge([eager, other])
    with pytest.raises(ValueError, match="more than one file"):
        tables.merge([eager, _part("eager", ("frepro",), "d4")])
    slower = _part("compile", ("fa4",), "d5")
    slower["method"] = {"rounds": 5}
    with pytest.raises(ValueError, match="timing method"):
        tables.merge([eager, slower])
    with pytest.raises(ValueError, match="at least two"):
        tables.merge([eager])


def test_caption_names_the_native_launch() -> None:
    """A run with flashrepro.native switched on says so, and a merge says which runs did."""
    native = _part("compile", ("frepro", "sdpa-flash"), "d1")
    native["env"]["native_decode"] = True
    note = "attention calls launched from C++ after their first: FLASHREPRO_NATIVE=1"
    assert note in tables.results_caption(native)
    assert "C++" not in tables.results_caption(_part("eager", ("frepro",), "d2"))
    merged = tables.results_caption(tables.merge([native, _part("eager", ("frepro",), "d2")]))
    assert f"d1 (commit abc, {tables.NATIVE_NOTE})" in merged
    assert "d2 (commit abc)" in merged


@pytest.mark.parametrize("breakage", ["no rows", "row without mode", "env not a dict",
                                      "not JSON", "a list", "unknown mode"])
def test_merge_of_a_malformed_file_names_it(tmp_path: Path, breakage: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``model --merge``: a file lacking a key, or not model JSON at all, exits 2 with a
    message naming that file, never a KeyError traceback."""
    import json

    from flashrepro_harness.cli import main

    good, bad = _part("eager", ("frepro",), "d1"), _part("compile", ("frepro",), "d2")
    text = None
    if breakage == "no rows":
        del bad["rows"]
    elif breakage == "row without mode":
        del bad["rows"][0]["mode"]
    elif breakage == "env not a dict":
        bad["env"] = None
    elif breakage == "unknown mode":
        bad["rows"][0]["mode"] = "graph"
    elif breakage == "not JSON":
        text = "{not json"
    else:
        text = "[]"
    paths = [tmp_path / "eager.json", tmp_path / "broken.json"]
    paths[0].write_text(json.dumps(good))
    paths[1].write_text(text if text is not None else json.dumps(bad))
    code = main(["model", "--merge", *map(str, paths), "--out", str(tmp_path / "out")])
    assert code == 2
    assert str(paths[1]) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("inductor_launches", [0, 28])
def test_merge_exits_1_on_a_row_that_ran_eagerly(tmp_path: Path, inductor_launches: int,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``model --merge`` writes the merged table and, like a measuring run, exits 1 when a
    compile row is flagged as not compiled."""
    from flashrepro_harness.cli import main

    eager, compiled = _part("eager", ("frepro",), "d1"), _part("compile", ("frepro",), "d2")
    compiled["rows"][0]["inductor_launches"] = inductor_launches
    paths = [tmp_path / "eager.json", tmp_path / "compile.json"]
    for path, part in zip(paths, (eager, compiled), strict=True):
        path.write_text(json.dumps(part))
    code = main(["model", "--merge", *map(str, paths), "--out", str(tmp_path / "out")])
    assert code == (0 if inductor_launches else 1)
    assert ("NOT COMPILED: compile B=1 L=1024 frepro" in capsys.readouterr().out) is (
        not inductor_launches)
    assert list((tmp_path / "out").rglob("model.md"))


@pytest.mark.parametrize("path", sorted(RESULTS_ROOT.glob("*/model.json")),
                         ids=lambda p: p.parent.name)
def test_committed_model_md_is_the_table_of_model_json(path: Path) -> None:
    """reproduce/results/<gpu>/model.md is generated from the model.json beside it: a change
    to the table's code or to the results shows here until both are regenerated."""
    results = json.loads(path.read_text())
    assert path.with_suffix(".md").read_text() == tables.markdown(results)


def test_committed_model_results_include_the_readmes() -> None:
    from flashrepro_harness.readme import MODEL_RESULTS

    assert MODEL_RESULTS in set(RESULTS_ROOT.glob("*/model.json"))
