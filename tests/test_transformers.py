"""``attn_implementation="frepro"`` in transformers: logits against SDPA, GQA without copies,
and the clear refusals of what the kernel cannot do.

Models are built from ``Qwen3Config`` in code with random weights (nothing is downloaded). Each
test draws a fresh seed (printed in failures). Logits tolerance: the fp16/bf16 model through
flashrepro must be as close to a float32 run of the same weights (eager attention, float32
matmuls) as the same half-precision model through SDPA is, within a factor 2, plus one unit of
rounding of the half dtype at the logits' scale (eps · max|ref|; bf16 eps 2^-7, fp16 2^-10).
SDPA's own error is the bf16/fp16 noise floor of the whole network (GEMMs, norms, RoPE in half
precision); a wrong mask, GQA mapping or scale gives errors of the order of the logits.
"""

from __future__ import annotations

import random

import pytest
import torch

transformers = pytest.importorskip("transformers")

import flashrepro  # noqa: E402
from flashrepro import launch  # noqa: E402
from flashrepro.integrations import transformers as fr_tf  # noqa: E402

Qwen3Config = transformers.Qwen3Config
Qwen3ForCausalLM = transformers.Qwen3ForCausalLM


def fresh_seed() -> int:
    return random.SystemRandom().randrange(2**31)


def small_config(**overrides: object) -> transformers.Qwen3Config:
    """A small Qwen3: GQA 4/2, head_dim 128, 2 layers, vocab 512."""
    kwargs = {"vocab_size": 512, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 128, "max_position_embeddings": 1024}
    kwargs.update(overrides)
    return Qwen3Config(**kwargs)


def build(config: transformers.Qwen3Config, seed: int, device: torch.device,
          impl: str) -> transformers.Qwen3ForCausalLM:
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(device).eval()
    model.set_attn_implementation(impl)
    # Random weights large enough that attention is not near-uniform (std 0.02 default).
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.05)
    return model


def logits_of(model: torch.nn.Module, impl: str, dtype: torch.dtype,
              ids: torch.Tensor) -> torch.Tensor:
    model.set_attn_implementation(impl)
    model.to(dtype)
    with torch.inference_mode():
        return model(ids, use_cache=False).logits.float()


def compare(device: torch.device, dtype: torch.dtype, batch: int, seqlen: int) -> None:
    seed = fresh_seed()
    config = small_config()
    model = build(config, seed, device, "eager")
    ids = torch.randint(0, config.vocab_size, (batch, seqlen), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    ref = logits_of(model, "eager", torch.float32, ids)
    sdpa = logits_of(model, "sdpa", dtype, ids)
    model.to(torch.float32)
    ours = logits_of(model, fr_tf.NAME, dtype, ids)
    assert_within_sdpa_noise(ours, sdpa, ref, dtype, seed)


def test_registered_on_import_and_idempotent() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    fr_tf.register()
    fr_tf.register()
    assert AttentionInterface._global_mapping[fr_tf.NAME] is fr_tf.attention_forward
    assert AttentionMaskInterface._global_mapping[fr_tf.NAME] is fr_tf.mask


def test_logits_match_sdpa_fp16_interpreter(device: torch.device) -> None:
    """Tiny fp16 case; on the CPU the kernel runs under Triton's interpreter."""
    compare(device, torch.float16, batch=2, seqlen=48)


@pytest.mark.gpu
@pytest.mark.parametrize("batch,seqlen", [(2, 256), (1, 1000)])
def test_logits_match_sdpa_bf16_gpu(batch: int, seqlen: int) -> None:
    compare(torch.device("cuda"), torch.bfloat16, batch, seqlen)


def test_gqa_without_repeat_kv(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys reach the kernel with H_kv heads and enable_gqa=True; the output is (B, L, H, D)."""
    seen: list[tuple[int, int, bool, bool, str]] = []
    real = launch.forward

    def spy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            **kw: object) -> tuple[torch.Tensor, None]:
        seen.append((q.shape[1], k.shape[1], kw["enable_gqa"], kw["causal"],
                     kw["causal_alignment"]))
        return real(q, k, v, **kw)

    monkeypatch.setattr(launch, "forward", spy)
    config = small_config(num_hidden_layers=1)
    model = build(config, fresh_seed(), device, fr_tf.NAME).half()
    with torch.inference_mode():
        out = model(torch.randint(0, 512, (1, 40), device=device), use_cache=False)
    assert out.logits.shape == (1, 40, 512)
    assert seen == [(4, 2, True, True, "bottom_right")]


def test_decode_with_cache_matches_sdpa(device: torch.device) -> None:
    """Prefill then one decode step through a DynamicCache (L_q = 1 < L_k)."""
    seed = fresh_seed()
    config = small_config()
    model = build(config, seed, device, "sdpa").half()
    ids = torch.randint(0, 512, (1, 33), device=device)
    outs = {}
    for impl in ("sdpa", fr_tf.NAME):
        model.set_attn_implementation(impl)
        with torch.inference_mode():
            first = model(ids[:, :32], use_cache=True)
            step = model(ids[:, 32:], past_key_values=first.past_key_values, use_cache=True)
        outs[impl] = torch.cat([first.logits, step.logits], dim=1).float()
    model.set_attn_implementation("eager")
    with torch.inference_mode():
        ref = model.float()(ids, use_cache=False).logits.float()
    err_ours = (outs[fr_tf.NAME] - ref).abs().max().item()
    err_sdpa = (outs["sdpa"] - ref).abs().max().item()
    bound = 2 * err_sdpa + torch.finfo(torch.float16).eps * ref.abs().max().item()
    assert err_ours <= bound, f"seed {seed}: {err_ours:.4g} > {bound:.4g}"


def test_unpadded_mask_takes_the_equal_length_kernel(device: torch.device,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An all-ones attention_mask is read on the host in eager mode and runs the
    equal-length kernel's launch, as no mask does; padding runs the varlen kernel."""
    calls: list[str] = []
    for module, name in ((launch, "forward"), (flashrepro, "attention_varlen")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name,
                            lambda *a, _n=name, _f=real, **k: calls.append(_n) or _f(*a, **k))
    model = build(small_config(num_hidden_layers=1), fresh_seed(), device, fr_tf.NAME).half()
    ids = torch.randint(0, 512, (2, 20), device=device)
    mask = torch.ones(2, 20, dtype=torch.long, device=device)
    with torch.inference_mode():
        model(ids, attention_mask=mask, use_cache=False)
        assert calls == ["forward"]
        mask[1, :4] = 0
        model(ids, attention_mask=mask, use_cache=False)
        assert calls == ["forward", "attention_varlen"]


def test_sliding_window_is_refused(device: torch.device) -> None:
    config = small_config(num_hidden_layers=1, use_sliding_window=True, sliding_window=8,
                          max_window_layers=0, layer_types=["sliding_attention"])
    model = build(config, fresh_seed(), device, fr_tf.NAME).half()
    with torch.inference_mode(), pytest.raises(ValueError, match="sliding window"):
        model(torch.randint(0, 512, (1, 16), device=device), use_cache=False)


def test_dropout_in_training_is_refused(device: torch.device) -> None:
    model = build(small_config(num_hidden_layers=1, attention_dropout=0.1), fresh_seed(), device,
                  fr_tf.NAME).half().train()
    with torch.no_grad(), pytest.raises(ValueError, match="dropout"):
        model(torch.randint(0, 512, (1, 16), device=device), use_cache=False)


def test_grad_is_refused(device: torch.device) -> None:
    model = build(small_config(num_hidden_layers=1), fresh_seed(), device, fr_tf.NAME).half()
    with pytest.raises(ValueError, match="requires grad"):
        model(torch.randint(0, 512, (1, 16), device=device), use_cache=False)


@pytest.mark.parametrize("kwargs,match", [
    ({"softcap": 30.0}, "soft-capping"),
    ({"sliding_window": 128}, "sliding window"),
    ({"s_aux": torch.zeros(4)}, "sinks"),
    ({"output_attentions": True}, "output_attentions"),
])
def test_unsupported_kwargs_are_refused(kwargs: dict, match: str) -> None:
    q = torch.zeros(1, 4, 8, 16, dtype=torch.float16)
    k = torch.zeros(1, 2, 8, 16, dtype=torch.float16)
    module = torch.nn.Module()
    with pytest.raises(ValueError, match=match):
        fr_tf.attention_forward(module, q, k, k, None, **kwargs)


def test_explicit_4d_mask_is_refused() -> None:
    q = torch.zeros(1, 4, 8, 16, dtype=torch.float16)
    k = torch.zeros(1, 2, 8, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="explicit attention mask"):
        fr_tf.attention_forward(torch.nn.Module(), q, k, k, torch.zeros(1, 1, 8, 8))


def test_integration_traces_fullgraph(monkeypatch: pytest.MonkeyPatch) -> None:
    """The integration's own code (mask function, checks, layout) has no graph break under
    ``torch.compile(fullgraph=True)``. The traced kernel call is replaced by SDPA here (backend
    "eager": dynamo only, a float32 model): the op itself is the next test's."""
    def stand_in(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 scale: float | None, enable_gqa: bool) -> torch.Tensor:
        assert q.shape[2] == k.shape[2]
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=enable_gqa
        ).transpose(1, 2).contiguous()

    monkeypatch.setattr(fr_tf, "traced_attention", stand_in)
    torch._dynamo.reset()
    model = build(small_config(), fresh_seed(), torch.device("cpu"), fr_tf.NAME)
    ids = torch.randint(0, 512, (2, 24))
    compiled = torch.compile(lambda x: model(x, use_cache=False).logits, fullgraph=True,
                             backend="eager")
    with torch.inference_mode():
        got = compiled(ids)
        model.set_attn_implementation("sdpa")
        want = model(ids, use_cache=False).logits
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_traced_dynamic_length_is_one_graph_across_decode_sizes(device: torch.device) -> None:
    """A model traced with a dynamic sequence length and no cache (transformers then adds its
    packed-sequence term: ``position_ids`` are set) runs the prefill kernels at every L_q,
    so one graph serves lengths on both sides of the decode kernel's 16 rows, and
    ``torch.export`` keeps a dynamic length that spans them (fp16; on the CPU the graph runs
    the kernels under Triton's interpreter)."""
    torch._dynamo.reset()
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: list) -> torch.fx.GraphModule:
        graphs.append(gm)
        return gm

    model = build(tiny_config(num_hidden_layers=1), fresh_seed(), device, fr_tf.NAME).half()
    compiled = torch.compile(lambda x: model(x, use_cache=False).logits, fullgraph=True,
                             dynamic=True, backend=capture)
    with torch.inference_mode():
        for length in (20, 24, 8, 12):
            compiled(torch.randint(0, 128, (2, length), device=device))
    assert len(graphs) == 1

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x, use_cache=False).logits

    length = torch.export.Dim("length", min=2, max=64)
    with torch.no_grad():
        program = torch.export.export(Logits(), (torch.randint(0, 128, (2, 20), device=device),),
                                      dynamic_shapes={"x": {1: length}})
    ranges = [(int(r.lower), int(r.upper)) for r in program.range_constraints.values()]
    assert (2, 64) in ranges, ranges


def test_compiled_model_calls_the_sequence_major_op_and_copies_nothing(device: torch.device
                                                                       ) -> None:
    """Under torch.compile the integration calls ``flashrepro::attention_bshd``, whose output
    is already (B, L, H, D): the graph holds that op once per layer and no ``copy_`` into an
    output buffer (the eager path's ``out=`` would need one under tracing). Logits match the
    eager frepro path on the same weights (fp16; on the CPU the kernel runs under Triton's
    interpreter)."""
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: list) -> torch.fx.GraphModule:
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    seed = fresh_seed()
    model = build(small_config(), seed, device, fr_tf.NAME).to(torch.float16)
    ids = torch.randint(0, 512, (1, 32), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    compiled = torch.compile(lambda x: model(x, use_cache=False).logits, fullgraph=True,
                             backend=capture)
    with torch.inference_mode():
        got = compiled(ids).float()
        want = model(ids, use_cache=False).logits.float()
    (graph,) = graphs
    targets = [n.target for n in graph.graph.nodes]
    assert targets.count(torch.ops.flashrepro.attention_bshd.default) == 2, f"seed {seed}"
    assert "copy_" not in targets, f"seed {seed}: a copy into an output buffer is traced"
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=0, atol=2e-3, msg=f"seed {seed}")


def test_the_tracing_check_agrees_with_transformers_is_tracing() -> None:
    """``needs_operator`` (the per-layer check) routes as transformers' ``is_tracing`` does for a
    plain tensor, a fake tensor, an FX proxy and dynamo; a tensor subclass goes to the
    operator, as :func:`flashrepro.attention` sends it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers.utils.import_utils import is_tracing

    from flashrepro.api import needs_operator

    class Sub(torch.Tensor):
        pass

    q = torch.randn(1, 2, 8, 16)
    assert needs_operator(q) is is_tracing(q) is False
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(q)
        assert needs_operator(fake) and is_tracing(fake)
    proxy = torch.fx.Proxy(torch.fx.Graph().placeholder("x"))
    assert needs_operator(proxy) and is_tracing(proxy)
    assert needs_operator(q.as_subclass(Sub))

    def flags(x: torch.Tensor) -> torch.Tensor:
        return x + (1 if needs_operator(x) else 0) + (2 if is_tracing(x) else 0)
    zeros = torch.zeros(2, dtype=torch.int64)
    assert torch.compile(flags, backend="eager", fullgraph=True)(zeros).tolist() == [3, 3]


def tiny_config(**overrides: object) -> transformers.Qwen3Config:
    """A tiny Qwen3 for the interpreter: GQA 4/2, head_dim 16, hidden 64, 2 layers, vocab 128."""
    kwargs: dict[str, object] = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
                                 "num_attention_heads": 4, "num_key_value_heads": 2,
                                 "head_dim": 16, "max_position_embeddings": 256}
    kwargs.update(overrides)
    return small_config(**kwargs)


def assert_within_sdpa_noise(ours: torch.Tensor, sdpa: torch.Tensor, ref: torch.Tensor,
                             dtype: torch.dtype, seed: int) -> None:
    """Every element of ``ours`` as close to the float32 reference ``ref`` as SDPA's half-precision
    run is, within a factor 2, plus one rounding unit of ``dtype`` at the reference's scale (the
    module docstring's bound: SDPA's error is the fp16 noise floor of the whole network)."""
    assert torch.isfinite(ours).all(), f"seed {seed}"
    err_ours = (ours - ref).abs().max().item()
    err_sdpa = (sdpa - ref).abs().max().item()
    bound = 2 * err_sdpa + torch.finfo(dtype).eps * ref.abs().max().item()
    assert err_ours <= bound, (f"seed {seed}: max|flashrepro - fp32| = {err_ours:.4g} > "
                               f"2·max|sdpa - fp32| + eps·max|ref| = {bound:.4g}")


def test_compiled_run_time_refusal_of_packing_by_position(device: torch.device) -> None:
    """Under torch.compile transformers cannot tell whether position_ids restart (packed
    sequences; it always and-s a packed-sequence term into the causal pattern): restarting
    position_ids without FlashAttentionKwargs must fail at run time by name, never give the
    logits of an unpacked batch, and a compiled call after the refusal must still give the
    eager answer (on CUDA a device-side assert would leave the process unusable)."""
    keyword, message = "position_ids", "packed sequences"
    torch._dynamo.reset()
    seed = fresh_seed()
    model = build(tiny_config(num_hidden_layers=1), seed, device, fr_tf.NAME).half()
    ids = torch.randint(0, 128, (2, 13), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    compiled = torch.compile(lambda x, a: model(x, use_cache=False, **{keyword: a}).logits,
                             fullgraph=True, backend="aot_eager")
    valid = torch.arange(13, device=device).expand(2, 13)
    refused = torch.cat([torch.arange(5), torch.arange(8)]).to(device).expand(2, 13)
    with torch.inference_mode():
        want = model(ids, use_cache=False, **{keyword: valid}).logits.float()
        got = compiled(ids, valid).float()
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"seed {seed}")
        with pytest.raises(RuntimeError, match=message):
            compiled(ids, refused)
        again = compiled(ids, valid).float()
        torch.testing.assert_close(again, want, rtol=0, atol=0, msg=f"seed {seed}")


@pytest.mark.parametrize("capturing", [False, True])
def test_run_time_check_copies_to_the_host_unless_capturing(monkeypatch: pytest.MonkeyPatch,
                                                           capturing: bool) -> None:
    """The run-time refusal asserts on a host copy of its condition (on CUDA an assert on the
    device has no message and loses the CUDA context), except during an eager CUDA-graph
    capture, where a host copy is illegal and the assert stays on the device to be captured.
    A meta tensor stands for the device tensor: it cannot be copied to the host, so the
    recorded device shows which path ran (capture simulated: transformers' check patched)."""
    seen = []
    monkeypatch.setattr(fr_tf, "is_cuda_stream_capturing", lambda: capturing)
    monkeypatch.setattr(torch, "_assert_async", lambda cond, msg: seen.append(cond.device.type))
    monkeypatch.setattr(torch.Tensor, "cpu", lambda t: torch.ones((), dtype=torch.bool))
    fr_tf._assert_at_run_time(torch.ones((), dtype=torch.bool, device="meta"), "message")
    assert seen == (["meta"] if capturing else ["cpu"])


def test_encoder_decoder_generate_matches_sdpa(device: torch.device) -> None:
    """A tiny BART (bidirectional encoder, causal decoder with a cache, cross-attention with
    L_q != L_k): teacher-forced logits within SDPA's fp16 noise of a float32 eager run, and
    greedy generation gives SDPA's tokens (up to fp16 near-ties, checked by their margin)."""
    seed = fresh_seed()
    config = transformers.BartConfig(
        vocab_size=128, d_model=64, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(seed)
    model = transformers.BartForConditionalGeneration(config).to(device).eval()
    gen = torch.Generator(device).manual_seed(seed)
    ids = torch.randint(4, 128, (2, 12), device=device, generator=gen)
    dec = torch.randint(4, 128, (2, 7), device=device, generator=gen)
    model.set_attn_implementation("eager")
    with torch.inference_mode():
        ref = model(ids, decoder_input_ids=dec).logits.float()
    model.half()
    logits, tokens = {}, {}
    for impl in ("sdpa", fr_tf.NAME):
        model.set_attn_implementation(impl)
        with torch.inference_mode():
            logits[impl] = model(ids, decoder_input_ids=dec).logits.float()
            tokens[impl] = model.generate(ids, max_new_tokens=4, do_sample=False, num_beams=1,
                                          output_scores=True, return_dict_in_generate=True)
    assert_within_sdpa_noise(logits[fr_tf.NAME], logits["sdpa"], ref, torch.float16, seed)
    assert_same_greedy_tokens(tokens["sdpa"], tokens[fr_tf.NAME], seed)


def assert_same_greedy_tokens(sdpa: object, ours: object, seed: int,
                              dtype: torch.dtype = torch.float16) -> None:
    """Greedy sequences equal, up to a near-tie: where they first differ, SDPA's top-2 logit
    margin must be within 4 rounding units of ``dtype`` of the top logit (a tie), else fail."""
    a, b = sdpa.sequences, ours.sequences
    assert a.shape == b.shape, f"seed {seed}"
    start = a.shape[1] - len(sdpa.scores)
    for t, scores in enumerate(sdpa.scores):
        diff = (a[:, start + t] != b[:, start + t]).nonzero().flatten().tolist()
        for row in diff:
            top2 = scores[row].float().topk(2).values
            tie = 4 * torch.finfo(dtype).eps * top2[0].abs().item()
            assert (top2[0] - top2[1]).item() <= tie, (
                f"seed {seed}: row {row} step {t}: {b[row].tolist()} != {a[row].tolist()}")
        if diff:
            return  # past a tie the continuations may differ legitimately


def fp32_reference(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The float32 eager logits of ``model``'s weights (the model is left in float16, eager)."""
    model.float().set_attn_implementation("eager")
    with torch.inference_mode():
        ref = model(ids, use_cache=False).logits.float()
    model.half()
    return ref


def test_generate_with_dynamic_cache_matches_sdpa(device: torch.device) -> None:
    """Greedy generation through a DynamicCache (prefill L_q = L_k, then L_q = 1 < L_k): SDPA's
    tokens, up to an fp16 near-tie (``assert_same_greedy_tokens``)."""
    seed = fresh_seed()
    config = tiny_config()
    model = build(config, seed, device, "sdpa").half()
    ids = torch.randint(0, 128, (2, 12), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    out = {}
    for impl in ("sdpa", fr_tf.NAME):
        model.set_attn_implementation(impl)
        with torch.inference_mode():
            out[impl] = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                use_cache=True, past_key_values=transformers.DynamicCache(config=config),
                output_scores=True, return_dict_in_generate=True)
    assert_same_greedy_tokens(out["sdpa"], out[fr_tf.NAME], seed)


def test_chunked_prefill_matches_sdpa(device: torch.device) -> None:
    """Prefill in chunks of 5, 6 and 2 tokens through a DynamicCache (L_q > 1 against L_k > L_q:
    the bottom-right causal alignment), every logit within SDPA's fp16 noise of float32."""
    seed = fresh_seed()
    model = build(tiny_config(), seed, device, "sdpa")
    ids = torch.randint(0, 128, (3, 13), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    ref = fp32_reference(model, ids)
    outs = {}
    for impl in ("sdpa", fr_tf.NAME):
        model.set_attn_implementation(impl)
        cache, chunks = transformers.DynamicCache(config=model.config), []
        with torch.inference_mode():
            for lo, hi in ((0, 5), (5, 11), (11, 13)):
                chunks.append(model(ids[:, lo:hi], past_key_values=cache, use_cache=True).logits)
        outs[impl] = torch.cat(chunks, dim=1).float()
    assert_within_sdpa_noise(outs[fr_tf.NAME], outs["sdpa"], ref, torch.float16, seed)


def test_compiled_padding_matches_eager(device: torch.device) -> None:
    """A padded batch under torch.compile(fullgraph=True, backend="aot_eager"): the spans are
    built in the graph, the valid positions' logits equal the eager path's (no run-time
    refusal, no host read)."""
    torch._dynamo.reset()
    seed = fresh_seed()
    model = build(tiny_config(num_hidden_layers=1), seed, device, fr_tf.NAME).half()
    ids = torch.randint(0, 128, (2, 13), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    mask = torch.ones(2, 13, dtype=torch.long, device=device)
    mask[1, :4] = 0
    compiled = torch.compile(lambda x, a: model(x, attention_mask=a, use_cache=False).logits,
                             fullgraph=True, backend="aot_eager")
    with torch.inference_mode():
        want = model(ids, attention_mask=mask, use_cache=False).logits.float()
        got = compiled(ids, mask).float()
    valid = mask.bool()
    torch.testing.assert_close(got[valid], want[valid], rtol=0, atol=0, msg=f"seed {seed}")


@pytest.mark.parametrize("heads,kv_heads", [(4, 1), (4, 4)])
def test_gqa_ratios_batch_3_match_sdpa(device: torch.device, heads: int, kv_heads: int) -> None:
    seed = fresh_seed()
    model = build(tiny_config(num_attention_heads=heads, num_key_value_heads=kv_heads), seed,
                  device, "sdpa")
    ids = torch.randint(0, 128, (3, 20), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    ref = fp32_reference(model, ids)
    sdpa = logits_of(model, "sdpa", torch.float16, ids)
    ours = logits_of(model, fr_tf.NAME, torch.float16, ids)
    assert_within_sdpa_noise(ours, sdpa, ref, torch.float16, seed)


@pytest.mark.parametrize("module_causal,is_causal,lq,lk", [
    (False, None, 8, 8), (False, None, 4, 10), (True, False, 8, 8), (True, None, 1, 10)])
def test_non_causal_attention_forward_matches_sdpa(device: torch.device, module_causal: bool,
                                                   is_causal: bool | None, lq: int,
                                                   lk: int) -> None:
    """``is_causal`` from the call, else the module; one query row sees every key. Against
    ``sdpa_attention_forward`` in float32 on the same fp16 inputs: the kernel accumulates in
    float32 and rounds the output once to fp16, so each element is within 2 fp16 ulps of the
    float32 answer (|o| <= max|v|, about 4 for these normals)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = module_causal, 2
    q = torch.randn(2, 4, lq, 16, generator=gen).half().to(device)
    k, v = (torch.randn(2, 2, lk, 16, generator=gen).half().to(device) for _ in range(2))
    want, _ = sdpa_attention_forward(module, q.float(), k.float(), v.float(), None,
                                     is_causal=is_causal)
    with torch.inference_mode():
        got, weights = fr_tf.attention_forward(module, q, k, v, None, is_causal=is_causal)
    assert weights is None and got.shape == want.shape == (2, lq, 4, 16)
    tol = 2 * torch.finfo(torch.float16).eps * want.abs().max().item()
    torch.testing.assert_close(got.float(), want, rtol=0, atol=tol, msg=f"seed {seed}")


def test_compiled_prefill_and_decode_match_eager(device: torch.device) -> None:
    """torch.compile(fullgraph=True, backend="aot_eager") of a prefill and a decode step through
    a DynamicCache: the op's logits equal the eager frepro path's (the same kernel calls on the
    same inputs) and are within SDPA's fp16 noise of float32."""
    seed = fresh_seed()
    model = build(tiny_config(), seed, device, "sdpa")
    ids = torch.randint(0, 128, (2, 13), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    ref = fp32_reference(model, ids)

    def step(x: torch.Tensor, cache: transformers.DynamicCache) -> torch.Tensor:
        return model(x, past_key_values=cache, use_cache=True).logits

    outs = {}
    for name, impl, fn in (("sdpa", "sdpa", step), ("eager", fr_tf.NAME, step),
                           ("compiled", fr_tf.NAME, None)):
        torch._dynamo.reset()
        model.set_attn_implementation(impl)
        fn = fn or torch.compile(step, fullgraph=True, backend="aot_eager")
        cache = transformers.DynamicCache(config=model.config)
        with torch.inference_mode():
            outs[name] = torch.cat([fn(ids[:, :12], cache), fn(ids[:, 12:], cache)], 1).float()
    torch.testing.assert_close(outs["compiled"], outs["eager"], rtol=0, atol=0,
                               msg=f"seed {seed}")
    assert_within_sdpa_noise(outs["compiled"], outs["sdpa"], ref, torch.float16, seed)


def test_bert_encoder_matches_sdpa(device: torch.device) -> None:
    """A bidirectional encoder (BERT, module.is_causal False, all-ones attention_mask)."""
    seed = fresh_seed()
    config = transformers.BertConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    model = transformers.BertModel(config, add_pooling_layer=False).to(device).eval()
    ids = torch.randint(0, 128, (2, 12), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    mask = torch.ones_like(ids)
    outs = {}
    for name, impl, dtype in (("ref", "eager", torch.float32), ("sdpa", "sdpa", torch.float16),
                              ("ours", fr_tf.NAME, torch.float16)):
        model.to(dtype).set_attn_implementation(impl)
        with torch.inference_mode():
            outs[name] = model(ids, attention_mask=mask).last_hidden_state.float()
    assert_within_sdpa_noise(outs["ours"], outs["sdpa"], outs["ref"], torch.float16, seed)
