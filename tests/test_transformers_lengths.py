"""``attn_implementation="frepro"`` on padded batches, packed sequences and static caches.

Two kinds of test. The integration's own logic (mask -> key spans -> kernel arguments ->
outputs added) runs in float32 with the three kernels replaced by float64 references of their
documented contracts (``simulated_kernels``): every logit at a valid position must equal SDPA's
with transformers' own boolean mask to float32 rounding, on fresh random padding patterns,
caches and chunkings. The kernels themselves then run under Triton's interpreter (fp16) and on
the GPU (bf16, torch.compile, CUDA graphs), against SDPA within its own half-precision noise.
"""

from __future__ import annotations

import contextlib
import math
import random

import pytest
import torch

transformers = pytest.importorskip("transformers")

import flashrepro  # noqa: E402
from flashrepro import launch, launch_varlen  # noqa: E402
from flashrepro.integrations import key_spans as ks  # noqa: E402
from flashrepro.integrations import transformers as fr_tf  # noqa: E402
from tests.reference import reference_attention  # noqa: E402
from tests.test_transformers import (  # noqa: E402
    assert_same_greedy_tokens,
    build,
    fresh_seed,
    small_config,
    tiny_config,
)

# -- float64 references of the kernels' contracts --


def _sim_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                 scale: float | None, enable_gqa: bool, causal_alignment: str,
                 return_lse: bool, config: None, out: None,
                 bshd: bool) -> tuple[torch.Tensor, None]:
    """``launch.forward`` as the integration calls it: the output born (B, L_q, H, D)."""
    assert causal_alignment == "bottom_right" and enable_gqa == (k.shape[1] != q.shape[1])
    assert bshd and out is None and config is None and not return_lse
    b, h, lq, d = q.shape
    o, _ = reference_attention(q, k, v, causal=causal, scale=scale, bottom_right=True)
    return torch.empty((b, lq, h, d), dtype=q.dtype).transpose(1, 2).copy_(o), None


def _sim_kvcache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 seqused_k: torch.Tensor | None, *, causal: bool, scale: float | None,
                 enable_gqa: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """``flashrepro.attention_kvcache``'s contract in float32: row b over its first
    ``seqused_k[b]`` keys (every key where ``seqused_k`` is None)."""
    if seqused_k is None:
        lengths = [k.shape[2]] * q.shape[0]
    else:
        assert seqused_k.dtype == torch.int32 and seqused_k.shape == (q.shape[0],)
        lengths = seqused_k.tolist()
    o = torch.full(q.shape, float("nan"), dtype=q.dtype)
    for b, used in enumerate(lengths):
        used = min(max(used, 0), k.shape[2])
        o[b] = reference_attention(q[b:b + 1], k[b:b + 1, :, :used], v[b:b + 1, :, :used],
                                   causal=causal, scale=scale, bottom_right=True)[0][0]
    return o if out is None else out.copy_(o)


def _sim_kvcache_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         seqused_k: torch.Tensor | None, *, causal: bool, scale: float | None,
                         enable_gqa: bool, num_splits: None, return_lse: bool,
                         bshd: bool) -> tuple[torch.Tensor, None]:
    """``launch_varlen.kvcache_forward`` as the integration calls it: the output a
    (B, L_q, H, D) tensor."""
    assert bshd and num_splits is None and not return_lse
    b, h, lq, d = q.shape
    out = torch.empty((b, lq, h, d), dtype=q.dtype)
    _sim_kvcache(q, k, v, seqused_k, causal=causal, scale=scale, enable_gqa=enable_gqa,
                 out=out.transpose(1, 2))
    return out, None


def _sim_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor,
                cu_k: torch.Tensor, max_q: int, max_k: int, *, causal: bool,
                scale: float | None, seqused_k: torch.Tensor | None = None) -> torch.Tensor:
    """The varlen kernel's contract, clamping included; rows no sequence writes stay NaN."""
    assert cu_q.dtype == cu_k.dtype == torch.int32 and isinstance(max_q, int)
    total_q, total_k = q.shape[0], k.shape[0]
    o = torch.full(q.shape, float("nan"), dtype=q.dtype)
    cq, ck = cu_q.tolist(), cu_k.tolist()
    used = None if seqused_k is None else seqused_k.tolist()
    for s in range(len(cq) - 1):
        q0 = min(max(cq[s], 0), total_q)
        q1 = min(max(cq[s + 1], q0), total_q)
        k0 = min(max(ck[s], 0), total_k)
        k1 = min(max(ck[s + 1], k0), total_k)
        if used is not None:
            k1 = k0 + min(max(used[s], 0), k1 - k0)
        q1 = min(q1, q0 + max_q)  # the grid covers max_seqlen_q rows of each sequence
        rows = reference_attention(*(t.transpose(0, 1)[None] for t in
                                     (q[q0:q1], k[k0:k1], v[k0:k1])),
                                   causal=causal, scale=scale, bottom_right=True)[0]
        o[q0:q1] = rows[0].transpose(0, 1)
    return o


@pytest.fixture
def simulated_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "forward", _sim_forward)
    monkeypatch.setattr(flashrepro, "attention_kvcache", _sim_kvcache)
    monkeypatch.setattr(launch_varlen, "kvcache_forward", _sim_kvcache_forward)
    monkeypatch.setattr(flashrepro, "attention_varlen", _sim_varlen)


# -- inputs --

PATTERNS = ("none", "left", "right", "both")


def padding_mask(batch: int, length: int, rng: random.Random,
                 patterns: tuple[str, ...] = PATTERNS) -> torch.Tensor:
    """(B, L) int64: row 0 unpadded, the others a random pattern with 1..L-1 tokens kept."""
    am = torch.ones(batch, length, dtype=torch.long)
    for b in range(1, batch):
        kind = rng.choice(patterns)
        lo = rng.randrange(0, length // 2) if kind in ("left", "both") else 0
        hi = length - rng.randrange(0, length // 2) if kind in ("right", "both") else length
        am[b, :lo] = 0
        am[b, hi:] = 0
    return am


def positions(am: torch.Tensor) -> torch.Tensor:
    """generate()'s position_ids of a padding mask: cumsum - 1, 0 on padding."""
    return (am.cumsum(-1) - 1).clamp(min=0)


def run_chunks(model: torch.nn.Module, impl: str, ids: torch.Tensor, am: torch.Tensor | None,
               chunks: list[int], cache: str, extra: int = 5) -> torch.Tensor:
    """Logits of ``ids`` fed in ``chunks`` (their lengths) through a cache ("none": one
    forward, use_cache=False; "dynamic"; "static" with ``extra`` unwritten slots), the mask
    and position_ids as generate() passes them."""
    model.set_attn_implementation(impl)
    length = ids.shape[1]
    pos = positions(am) if am is not None else torch.arange(length)[None].expand_as(ids)
    pos = pos.to(ids.device)
    if cache == "none":
        with torch.inference_mode():
            return model(ids, attention_mask=am, position_ids=pos, use_cache=False).logits
    past = (transformers.DynamicCache(config=model.config) if cache == "dynamic" else
            transformers.StaticCache(config=model.config, max_cache_len=length + extra))
    outs, lo = [], 0
    with torch.inference_mode():
        for n in chunks:
            hi = lo + n
            outs.append(model(ids[:, lo:hi], past_key_values=past, use_cache=True,
                              attention_mask=None if am is None else am[:, :hi],
                              position_ids=pos[:, lo:hi]).logits)
            lo = hi
    return torch.cat(outs, dim=1)


def chunking(length: int, rng: random.Random) -> list[int]:
    """A prefill of random length, then chunks of 1..3 tokens (decode-like steps)."""
    first = rng.randrange(1, length)
    rest, out = length - first, [first]
    while rest:
        out.append(min(rest, rng.randrange(1, 4)))
        rest -= out[-1]
    return out


# -- the integration's logic, kernels simulated (float32) --


@pytest.mark.parametrize("cache", ["none", "dynamic", "static"])
@pytest.mark.parametrize("length", [9, 23])
def test_padded_logits_equal_sdpa_with_simulated_kernels(simulated_kernels: None, cache: str,
                                                         length: int) -> None:
    """Every pattern of padding (left, right, both, none), every cache, a prefill then chunks
    of 1-3 tokens: at every valid position, frepro's logits are SDPA's with transformers'
    boolean mask (float32; the kernels replaced by their contracts in float64). L_q <= 16 runs
    the KV-cache kernel for unpadded rows and the varlen kernel for the rest, L_q > 16 the
    varlen kernel alone; a static cache's decode builds its spans without a host read."""
    seed = fresh_seed()
    rng = random.Random(seed)
    model = build(tiny_config(), seed, torch.device("cpu"), "sdpa")
    ids = torch.randint(0, 128, (4, length), generator=torch.Generator().manual_seed(seed))
    am = padding_mask(4, length, rng)
    chunks = [length] if cache == "none" else chunking(length, rng)
    want = run_chunks(model, "sdpa", ids, am, chunks, cache)
    got = run_chunks(model, fr_tf.NAME, ids, am, chunks, cache)
    valid = am.bool()
    assert torch.isfinite(got[valid]).all(), f"seed {seed} chunks {chunks}"
    torch.testing.assert_close(got[valid], want[valid], rtol=1e-4, atol=1e-4,
                               msg=f"seed {seed} chunks {chunks} mask {am.tolist()}")


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_unpadded_chunks_equal_sdpa_with_simulated_kernels(simulated_kernels: None,
                                                           cache: str) -> None:
    """No attention_mask at all (equal-length prompts): the decode steps read a dynamic cache
    whole (``seqused_k`` None) and a static one through ``seqused_k``; a static cache's
    unwritten slots are never read."""
    seed = fresh_seed()
    rng = random.Random(seed)
    model = build(tiny_config(), seed, torch.device("cpu"), "sdpa")
    ids = torch.randint(0, 128, (3, 21), generator=torch.Generator().manual_seed(seed))
    chunks = chunking(21, rng)
    want = run_chunks(model, "sdpa", ids, None, chunks, cache)
    got = run_chunks(model, fr_tf.NAME, ids, None, chunks, cache)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"seed {seed} {chunks}")


def test_packed_sequences_equal_each_sequence_alone(simulated_kernels: None) -> None:
    """position_ids that restart (transformers' packed-sequence mask, use_cache=False) and the
    same packing given as FlashAttentionKwargs: the logits of each packed sequence are those
    of the sequence run alone, and SDPA's with transformers' packed mask."""
    seed = fresh_seed()
    rng = random.Random(seed)
    model = build(tiny_config(), seed, torch.device("cpu"), "sdpa")
    width = 12
    lengths = []
    for _ in range(2):
        cuts = sorted(rng.sample(range(1, width), rng.randrange(0, 4)))
        lengths.append([b - a for a, b in zip([0, *cuts], [*cuts, width], strict=True)])
    ids = torch.randint(0, 128, (2, width), generator=torch.Generator().manual_seed(seed))
    pos = torch.stack([torch.cat([torch.arange(n) for n in r]) for r in lengths])
    starts = [b * width + s for b, r in enumerate(lengths)
              for s in torch.tensor([0, *r[:-1]]).cumsum(0).tolist()]
    cu = torch.tensor([*starts, 2 * width], dtype=torch.int32)
    longest = max(n for r in lengths for n in r)
    outs = {}
    with torch.inference_mode():
        model.set_attn_implementation("sdpa")
        outs["sdpa"] = model(ids, position_ids=pos, use_cache=False).logits
        model.set_attn_implementation(fr_tf.NAME)
        outs["positions"] = model(ids, position_ids=pos, use_cache=False).logits
        outs["kwargs"] = model(ids, position_ids=pos, use_cache=False, cu_seq_lens_q=cu,
                               cu_seq_lens_k=cu, max_length_q=longest,
                               max_length_k=longest).logits
        alone = torch.zeros_like(outs["sdpa"])
        for b, r in enumerate(lengths):
            lo = 0
            for n in r:
                alone[b, lo:lo + n] = model(ids[b:b + 1, lo:lo + n], use_cache=False).logits[0]
                lo += n
    msg = f"seed {seed} lengths {lengths}"
    for name in ("sdpa", "positions", "kwargs"):
        torch.testing.assert_close(outs[name], alone, rtol=1e-4, atol=1e-4, msg=f"{name} {msg}")


def test_packed_offsets_follow_the_batch(simulated_kernels: None) -> None:
    """One (1, L) position_ids tensor serves a batch of any size (transformers broadcasts it):
    the packed offsets made from it for one batch size must not serve another (the extra rows'
    outputs were left unwritten)."""
    seed = fresh_seed()
    model = build(tiny_config(), seed, torch.device("cpu"), "sdpa")
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4, 5, 6]])
    gen = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        for batch in (1, 3, 2):
            ids = torch.randint(0, 128, (batch, pos.shape[1]), generator=gen)
            model.set_attn_implementation("sdpa")
            want = model(ids, position_ids=pos, use_cache=False).logits
            model.set_attn_implementation(fr_tf.NAME)
            got = model(ids, position_ids=pos, use_cache=False).logits
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4,
                                       msg=f"seed {seed} B={batch}")


def test_broken_rows_are_refused_on_the_host_and_poisoned_on_the_device(
        simulated_kernels: None) -> None:
    """Right padding then more tokens leaves a row's valid keys in two pieces. Where the mask
    is read on the host (a dynamic cache), a ValueError names it; where it is not (a static
    cache's decode step), that row's logits are NaN and the other rows' are SDPA's."""
    seed = fresh_seed()
    model = build(tiny_config(), seed, torch.device("cpu"), "sdpa")
    ids = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(seed))
    am = torch.ones(2, 10, dtype=torch.long)
    am[1, 5:8] = 0  # right padding of the 8-token prompt, then two generated tokens
    with pytest.raises(ValueError, match="padding between the tokens of a row"):
        run_chunks(model, fr_tf.NAME, ids, am, [8, 1, 1], "dynamic")
    want = run_chunks(model, "sdpa", ids, am, [8, 1, 1], "static")
    got = run_chunks(model, fr_tf.NAME, ids, am, [8, 1, 1], "static")
    assert torch.isnan(got[1, 8:]).all(), f"seed {seed}"
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4, msg=f"seed {seed}")


# -- the descriptors --


def test_mask_descriptors() -> None:
    """What :func:`mask` returns: None without padding (at any L_q), a
    :class:`KeyPrefix` for a static cache's prefill read on the host, :class:`UsedKeys` on the
    device for its decode, :class:`KeySpans` for padding (``broken`` None when checked on the
    host, a tensor when not); a mask column past the keys is no padding, a missing one is."""
    assert fr_tf.mask(2, q_length=20, kv_length=20) is None
    assert fr_tf.mask(2, q_length=1, kv_length=9, q_offset=8) is None
    assert fr_tf.mask(2, q_length=1, kv_length=9, q_offset=7) == ks.KeyPrefix(8)
    assert fr_tf.mask(2, q_length=20, kv_length=64, q_offset=torch.tensor(4)) == ks.KeyPrefix(24)
    used = fr_tf.mask(2, q_length=3, kv_length=64, q_offset=torch.tensor(7))
    assert isinstance(used, ks.UsedKeys) and used.used.tolist() == [10, 10]
    ones = torch.ones(2, 14, dtype=torch.bool)
    trailing = ones.clone()
    trailing[:, 12:] = False  # columns of no key: kv_length 12 from kv_offset 0
    assert fr_tf.mask(2, q_length=4, kv_length=12, q_offset=8, attention_mask=trailing) is None
    short = fr_tf.mask(2, q_length=4, kv_length=12, q_offset=8, attention_mask=ones[:, :10])
    assert isinstance(short, ks.KeySpans) and short.broken is None
    assert short.end.tolist() == [10, 10] and short.query_start.tolist() == [8, 8]
    left = ones[:, :12].clone()
    left[1, :3] = False
    spans = fr_tf.mask(2, q_length=1, kv_length=30, q_offset=torch.tensor(11),
                       attention_mask=left)
    assert isinstance(spans, ks.KeySpans) and spans.broken.tolist() == [False, False]
    assert spans.start.tolist() == [0, 3] and spans.end.tolist() == [12, 12]



def test_mask_of_no_keys_is_spans_of_no_keys() -> None:
    """kv_length 0 with a padding mask (an empty mask): every row's span is empty, where
    ``argmax`` over zero columns raised an IndexError."""
    empty = torch.ones(2, 0, dtype=torch.bool)
    spans = fr_tf.mask(2, q_length=1, kv_length=0, attention_mask=empty)
    assert isinstance(spans, ks.KeySpans)
    assert spans.start.tolist() == [0, 0] and spans.end.tolist() == [0, 0]
    assert fr_tf.mask(2, q_length=0, kv_length=0, attention_mask=empty) is None

def test_bidirectional_masks_need_no_alignment() -> None:
    """A bidirectional pattern (an encoder, or cross-attention onto one) lets every query see
    every valid key, wherever the queries sit: L_q != L_k is no padding."""
    from transformers.masking_utils import bidirectional_mask_function
    ones = torch.ones(2, 12, dtype=torch.bool)
    assert fr_tf.mask(2, q_length=20, kv_length=12, mask_function=bidirectional_mask_function,
                      attention_mask=ones) is None
    assert fr_tf.mask(2, q_length=1, kv_length=12, q_offset=5,
                      mask_function=bidirectional_mask_function, attention_mask=ones) is None
    ones[0, 9:] = False
    spans = fr_tf.mask(2, q_length=7, kv_length=12, q_offset=3,
                       mask_function=bidirectional_mask_function, attention_mask=ones)
    assert spans.end.tolist() == [9, 12]


@pytest.mark.parametrize("layout", ["cache", "projection", "odd"])
def test_token_major_views_address_every_key(layout: str) -> None:
    """Row b's key j is token b·T + j of the (total, H_kv, D) view, for a cache's
    (B, H_kv, L, D) memory and a projection's (B, L, H_kv, D) without a copy, and through a
    contiguous copy for strides that allow no view."""
    b, h, n, d = 3, 2, 5, 4
    if layout == "cache":
        k = torch.randn(b, h, n, d)
    elif layout == "projection":
        k = torch.randn(b, n, h, d).transpose(1, 2)
    else:  # a batch stride of 43 elements, not a multiple of the key stride (4)
        k = torch.randn(b, h * n * d + 3)[:, :h * n * d].view(b, h, n, d)
    v = k + 1 if layout != "odd" else torch.randn(b, h * n * d + 3)[:, :h * n * d].view(
        b, h, n, d)
    kf, vf, tokens = ks.token_major(k, v)
    assert (kf.data_ptr() == k.data_ptr()) == (layout != "odd")
    for i in range(b):
        torch.testing.assert_close(kf[i * tokens:i * tokens + n].transpose(0, 1), k[i],
                                   rtol=0, atol=0)
        torch.testing.assert_close(vf[i * tokens:i * tokens + n].transpose(0, 1), v[i],
                                   rtol=0, atol=0)


def test_key_spans_against_transformers_mask() -> None:
    """The spans of random padding masks (holes included) against transformers' own boolean
    mask: a row is broken exactly when its valid keys are not contiguous; otherwise the real
    queries (:func:`span_layout`'s middle sequence) see exactly the keys transformers shows
    them, bottom-right, and the other queries none."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask
    seed = fresh_seed()
    rng = random.Random(seed)
    for _ in range(50):
        batch, lq = rng.randrange(1, 5), rng.randrange(1, 7)
        q_offset = rng.randrange(0, 6)
        lk = q_offset + lq + rng.randrange(0, 4)
        am = (torch.rand(batch, q_offset + lq, generator=torch.Generator().manual_seed(
            rng.randrange(2**31))) < 0.7).long()
        want = sdpa_mask(batch_size=batch, q_length=lq, kv_length=lk, q_offset=q_offset,
                         mask_function=causal_mask_function, attention_mask=am.bool(),
                         allow_is_causal_skip=False)[:, 0]
        valid = ks.key_validity(batch, lk, 0, q_offset + lq - 1, am, "cpu")
        spans = ks.key_spans(valid, q_offset)
        cu_q, cu_k, used = ks.span_layout(spans, lq, lk, lk, causal=True)
        for b in range(batch):
            cols = valid[b].nonzero().flatten().tolist()
            contiguous = not cols or cols == list(range(cols[0], cols[-1] + 1))
            assert bool(spans.broken[b]) != contiguous, f"seed {seed}"
            if not contiguous:
                continue
            seen = torch.zeros(lq, lk, dtype=torch.bool)
            q0, q1 = cu_q[3 * b + 1] - b * lq, cu_q[3 * b + 2] - b * lq
            k0, nk = cu_k[3 * b + 1] - b * lk, used[3 * b + 1]
            for i in range(q0, q1):  # bottom-right over the span
                last = (i - q0) + nk - (q1 - q0)
                seen[i, k0:k0 + max(0, min(nk, last + 1))] = True
            expect = want[b] & valid[b, q_offset:q_offset + lq, None]
            assert torch.equal(seen, expect), f"seed {seed} mask {am[b].tolist()}"


def test_layouts_are_fixed_shapes_of_the_batch() -> None:
    """The kernel arguments' shapes depend on B alone (3B + 1 offsets), never on the lengths:
    one compiled graph and one CUDA graph serve every decode step."""
    valid = torch.ones(4, 10, dtype=torch.bool)
    for lengths in ([1, 2, 3, 4], [10, 10, 10, 10]):
        for b, n in enumerate(lengths):
            valid[b] = torch.arange(10) < n
        spans = ks.key_spans(valid, 9)
        layout = ks.span_layout(spans, 1, 10, 10, True, ks.kv_split(spans, 1, True)[0])
        assert [t.shape for t in layout] == [(13,), (13,), (12,)]
        assert all(t.dtype == torch.int32 for t in layout)
        once = ks.with_layout(spans, 1, 10, True).layout  # what mask() computes per forward
        for tokens in (10, 30):
            want = ks.span_layout(spans, 1, 10, tokens, True, ks.kv_split(spans, 1, True)[0])
            got = (once.cu_seqlens_q, once.cu_seqlens_k(tokens), once.seqused_k)
            assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


# -- the kernels under the interpreter (fp16) and on the GPU (bf16) --


def assert_valid_within_sdpa_noise(ours: torch.Tensor, sdpa: torch.Tensor, ref: torch.Tensor,
                                   valid: torch.Tensor, dtype: torch.dtype, seed: int) -> None:
    """tests/test_transformers.py's bound (2x SDPA's error to float32 plus one rounding unit)
    on the valid positions."""
    ours, sdpa, ref = ours[valid], sdpa[valid], ref[valid]
    assert torch.isfinite(ours).all(), f"seed {seed}"
    err_ours = (ours - ref).abs().max().item()
    err_sdpa = (sdpa - ref).abs().max().item()
    bound = 2 * err_sdpa + torch.finfo(dtype).eps * ref.abs().max().item()
    assert err_ours <= bound, f"seed {seed}: {err_ours:.4g} > {bound:.4g}"


def compare_padded(device: torch.device, dtype: torch.dtype, config: object, batch: int,
                   length: int, cache: str, patterns: tuple[str, ...] = PATTERNS) -> None:
    seed = fresh_seed()
    rng = random.Random(seed)
    model = build(config, seed, device, "sdpa")
    ids = torch.randint(0, config.vocab_size, (batch, length), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    am = padding_mask(batch, length, rng, patterns).to(device)
    chunks = [length] if cache == "none" else chunking(length, rng)
    ref = run_chunks(model.float(), "eager", ids, am, chunks, cache).float()
    model.to(dtype)
    sdpa = run_chunks(model, "sdpa", ids, am, chunks, cache).float()
    ours = run_chunks(model, fr_tf.NAME, ids, am, chunks, cache).float()
    assert_valid_within_sdpa_noise(ours, sdpa, ref, am.bool(), dtype, seed)


@pytest.mark.parametrize("cache,patterns", [("none", PATTERNS), ("static", ("left",))])
def test_padded_logits_match_sdpa_fp16_interpreter(device: torch.device, cache: str,
                                                   patterns: tuple[str, ...]) -> None:
    compare_padded(device, torch.float16, tiny_config(), 3, 11, cache, patterns)


def test_left_padded_generate_matches_sdpa(device: torch.device) -> None:
    """generate() with left padding through a DynamicCache and a StaticCache (eager on the
    CPU; on CUDA transformers compiles the static decode): SDPA's greedy tokens up to fp16
    near-ties."""
    seed = fresh_seed()
    model = build(tiny_config(), seed, device, "sdpa").half()
    ids = torch.randint(0, 128, (3, 10), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    am = torch.ones_like(ids)
    am[1, :4] = 0
    am[2, :1] = 0
    for cache in ("dynamic", "static"):
        out = {}
        for impl in ("sdpa", fr_tf.NAME):
            model.set_attn_implementation(impl)
            with torch.inference_mode():
                out[impl] = model.generate(ids, attention_mask=am, max_new_tokens=4,
                                           do_sample=False, cache_implementation=cache,
                                           output_scores=True, return_dict_in_generate=True)
        assert_same_greedy_tokens(out["sdpa"], out[fr_tf.NAME], seed)


def test_packed_sequences_fp16_interpreter(device: torch.device) -> None:
    """Two rows of packed sequences (position_ids restarting): within SDPA's fp16 noise of the
    float32 model with transformers' packed mask; FlashAttentionKwargs give the same logits."""
    seed = fresh_seed()
    model = build(tiny_config(), seed, device, "sdpa")
    ids = torch.randint(0, 128, (2, 12), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    pos = torch.tensor([[*range(5), *range(7)], [*range(3), *range(4), *range(5)]],
                       device=device)
    with torch.inference_mode():
        model.float().set_attn_implementation("eager")
        ref = model(ids, position_ids=pos, use_cache=False).logits.float()
        model.half().set_attn_implementation("sdpa")
        sdpa = model(ids, position_ids=pos, use_cache=False).logits.float()
        model.set_attn_implementation(fr_tf.NAME)
        ours = model(ids, position_ids=pos, use_cache=False).logits.float()
        cu = torch.tensor([0, 5, 12, 15, 19, 24], dtype=torch.int32, device=device)
        kw = model(ids, position_ids=pos, use_cache=False, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                   max_length_q=7, max_length_k=7).logits.float()
    assert_valid_within_sdpa_noise(ours, sdpa, ref, torch.ones_like(ids, dtype=torch.bool),
                                   torch.float16, seed)
    torch.testing.assert_close(kw, ours, rtol=0, atol=0, msg=f"seed {seed}")


@pytest.mark.parametrize("with_mask", [False, True])
def test_compiled_static_cache_decode_matches_eager(device: torch.device,
                                                    with_mask: bool) -> None:
    """torch.compile(fullgraph=True, backend="aot_eager") of a StaticCache decode step, with
    left padding in the mask or without a mask: the logits of 3 steps equal the eager frepro
    path's (the same kernel calls), and a new cache position reuses the graph."""
    seed = fresh_seed()
    model = build(tiny_config(), seed, device, fr_tf.NAME).half()
    ids = torch.randint(0, 128, (2, 9), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    am = torch.ones_like(ids)
    am[1, :3] = 0
    pos = positions(am)

    def steps(compiled: bool) -> torch.Tensor:
        torch._dynamo.reset()
        cache = transformers.StaticCache(config=model.config, max_cache_len=16)

        def step(x: torch.Tensor, p: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
            return model(x, position_ids=p, attention_mask=mask, past_key_values=cache,
                         use_cache=True).logits

        run = torch.compile(step, fullgraph=True, backend="aot_eager") if compiled else step
        # generate() would pass the mask of the tokens so far; a fixed width keeps the shapes
        # of the compiled step's inputs (columns past the queries are hidden by causality).
        mask = torch.cat([am, torch.ones(2, 7, dtype=am.dtype, device=device)], 1)
        mask = mask if with_mask else None
        with torch.inference_mode():
            outs = [step(ids, pos, None if mask is None else mask[:, :9])]
            for t in range(3):
                tok = outs[-1][:, -1:].argmax(-1)
                outs.append(run(tok, pos[:, -1:] + 1 + t, mask))
        return torch.cat(outs, 1).float()

    from torch._dynamo.utils import counters
    counters.clear()
    eager, compiled = steps(False), steps(True)
    assert counters["stats"]["unique_graphs"] == 1, f"seed {seed}: one graph for every step"
    valid = torch.cat([am, torch.ones(2, 3, dtype=am.dtype, device=device)], 1).bool()
    torch.testing.assert_close(compiled[valid], eager[valid], rtol=0, atol=0,
                               msg=f"seed {seed}")


def test_generate_compiles_the_static_decode_step_once(device: torch.device) -> None:
    """generate() with a StaticCache and its own compiled decode step (transformers'
    CompileConfig; on the CPU backend "aot_eager", fullgraph, allowed on every device): the
    left-padded batch's spans, built eagerly by generate() each step, enter the compiled step
    as inputs; one graph serves every step and the scores equal the eager generate()'s."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    seed = fresh_seed()
    model = build(tiny_config(), seed, device, fr_tf.NAME).half()
    ids = torch.randint(0, 128, (3, 10), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    am = torch.ones_like(ids)
    am[1, :4], am[2, :1] = 0, 0
    config = CompileConfig(backend="aot_eager", mode=None, fullgraph=True)
    config._compile_all_devices = True
    out = {}
    for name, kwargs in (("eager", {"disable_compile": True}), ("compiled",
                                                                 {"compile_config": config})):
        torch._dynamo.reset()
        counters.clear()
        with torch.inference_mode():
            out[name] = model.generate(ids, attention_mask=am, max_new_tokens=5,
                                       do_sample=False, cache_implementation="static",
                                       output_scores=True, return_dict_in_generate=True,
                                       **kwargs)
        graphs = counters["stats"]["unique_graphs"]
    assert graphs == 1, f"seed {seed}"
    assert torch.equal(out["eager"].sequences, out["compiled"].sequences), f"seed {seed}"
    for a, b in zip(out["eager"].scores, out["compiled"].scores, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"seed {seed}")


def test_compiled_varlen_kwargs_match_eager(device: torch.device) -> None:
    """FlashAttentionKwargs under torch.compile(fullgraph=True): no run-time refusal of the
    restarting position_ids, the eager logits."""
    torch._dynamo.reset()
    seed = fresh_seed()
    model = build(tiny_config(num_hidden_layers=1), seed, device, fr_tf.NAME).half()
    ids = torch.randint(0, 128, (1, 11), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    pos = torch.tensor([[*range(4), *range(7)]], device=device)
    cu = torch.tensor([0, 4, 11], dtype=torch.int32, device=device)

    def forward(x: torch.Tensor, p: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return model(x, position_ids=p, use_cache=False, cu_seq_lens_q=c, cu_seq_lens_k=c,
                     max_length_q=7, max_length_k=7).logits

    compiled = torch.compile(forward, fullgraph=True, backend="aot_eager")
    with torch.inference_mode():
        torch.testing.assert_close(compiled(ids, pos, cu), forward(ids, pos, cu), rtol=0,
                                   atol=0, msg=f"seed {seed}")


def test_varlen_kwargs_must_come_together() -> None:
    q = torch.zeros(1, 4, 8, 16, dtype=torch.float16)
    k = torch.zeros(1, 2, 8, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="cu_seq_lens_q"):
        fr_tf.attention_forward(torch.nn.Module(), q, k, k, None,
                                cu_seq_lens_q=torch.zeros(2, dtype=torch.int32))


@pytest.mark.parametrize("offsets", [[0, 4, 8], torch.tensor([0.0, 3.9, 8.0]),
                                     torch.tensor([False, True, True])],
                         ids=["list", "float", "bool"])
def test_varlen_kwargs_must_be_integer_tensors(offsets: object) -> None:
    """FlashAttentionKwargs' offsets are integer tensors: anything else is refused by name,
    not truncated to int32 or failed on inside the conversion."""
    q = torch.zeros(1, 4, 8, 16, dtype=torch.float16)
    k = torch.zeros(1, 2, 8, 16, dtype=torch.float16)
    cu = torch.tensor([0, 4, 8], dtype=torch.int32)
    with pytest.raises(TypeError, match="cu_seq_lens_k must be a tensor of integer offsets"):
        fr_tf.attention_forward(torch.nn.Module(), q, k, k, None, cu_seq_lens_q=cu,
                                cu_seq_lens_k=offsets, max_length_q=4, max_length_k=4)


@pytest.mark.gpu
@pytest.mark.parametrize("cache", ["none", "dynamic", "static"])
def test_padded_logits_match_sdpa_bf16_gpu(cache: str) -> None:
    compare_padded(torch.device("cuda"), torch.bfloat16, small_config(), 4, 300, cache)


@pytest.mark.gpu
def test_packed_prefill_matches_sdpa_bf16_gpu() -> None:
    """16 sequences of random lengths packed into 2 rows (position_ids), bf16: within SDPA's
    noise of float32, SDPA with transformers' packed mask as the peer."""
    seed = fresh_seed()
    rng = random.Random(seed)
    device = torch.device("cuda")
    model = build(small_config(), seed, device, "sdpa")
    rows = [[rng.randrange(16, 200) for _ in range(8)] for _ in range(2)]
    width = max(sum(r) for r in rows)
    rows = [[*r, width - sum(r)] if sum(r) < width else r for r in rows]
    pos = torch.stack([torch.cat([torch.arange(n) for n in r]) for r in rows]).to(device)
    ids = torch.randint(0, 512, (2, width), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    with torch.inference_mode():
        model.float().set_attn_implementation("eager")
        ref = model(ids, position_ids=pos, use_cache=False).logits.float()
        model.bfloat16().set_attn_implementation("sdpa")
        sdpa = model(ids, position_ids=pos, use_cache=False).logits.float()
        model.set_attn_implementation(fr_tf.NAME)
        ours = model(ids, position_ids=pos, use_cache=False).logits.float()
    assert_valid_within_sdpa_noise(ours, sdpa, ref, torch.ones_like(ids, dtype=torch.bool),
                                   torch.bfloat16, seed)


def greedy_agreement(reference: torch.Tensor, other: torch.Tensor, prompt: int) -> list[float]:
    """Per sequence: the fraction of generated tokens before the first one that differs from
    ``reference``'s (1.0: all equal)."""
    out = []
    for a, b in zip(reference[:, prompt:].tolist(), other[:, prompt:].tolist(), strict=True):
        same = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
        out.append(same / len(a))
    return out


@pytest.mark.gpu
def test_greedy_tokens_agree_with_sdpa_math_as_often_as_sdpa_backends() -> None:
    """bf16 greedy generate() of 32 prompts x 24 new tokens against SDPA's math backend (eager,
    DynamicCache). frepro eager (DynamicCache) must agree with it at least as often as the less
    agreeing of SDPA flash and cuDNN (eager, DynamicCache), less two standard errors of that
    backend's rate (the rates are means of 32 per-sequence fractions) or one sequence's worth
    (1/32), whichever is larger. frepro compiled (StaticCache: generate() compiles the decode
    step with mode="reduce-overhead", CUDA graphs) is held to SDPA compiled the same way, by the
    same rule: inductor's kernels for the rest of the model round differently from eager ones,
    so an eager peer is no control for a compiled run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    seed = fresh_seed()
    device = torch.device("cuda")
    model = build(small_config(num_hidden_layers=4, vocab_size=2048), seed, device, "sdpa")
    model.bfloat16()
    ids = torch.randint(0, 2048, (32, 64), device=device,
                        generator=torch.Generator(device).manual_seed(seed))

    def generate(impl: str, cache: str, backend: SDPBackend | None = None) -> torch.Tensor:
        model.set_attn_implementation(impl)
        torch._dynamo.reset()
        ctx = sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()
        with ctx, torch.inference_mode():
            return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24,
                                  do_sample=False, cache_implementation=cache)

    reference = generate("sdpa", "dynamic", SDPBackend.MATH)
    rates = {name: greedy_agreement(reference, generate("sdpa", "dynamic", backend), 64)
             for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                   ("cudnn", SDPBackend.CUDNN_ATTENTION))}
    rates["sdpa static"] = greedy_agreement(reference, generate("sdpa", "static"), 64)
    for cache in ("dynamic", "static"):
        rates[cache] = greedy_agreement(reference, generate(fr_tf.NAME, cache), 64)
    mean = {k: sum(v) / len(v) for k, v in rates.items()}
    print(f"greedy agreement with sdpa math: {mean}")
    for ours, peers in (("dynamic", ("flash", "cudnn")), ("static", ("sdpa static",))):
        worst = min(peers, key=lambda k: mean[k])
        spread = torch.tensor(rates[worst], dtype=torch.float64)
        margin = max(2 * spread.std().item() / math.sqrt(len(spread)), 1 / len(spread))
        assert mean[ours] >= mean[worst] - margin, (
            f"seed {seed}: {ours} against {worst}: {mean} (margin {margin:.3f})")


@pytest.mark.gpu
def test_compiled_static_cache_generate_matches_sdpa_left_padded() -> None:
    """generate() with left padding and a StaticCache on the GPU (transformers compiles the
    decode step, mode="reduce-overhead"; the spans are built without a host read): SDPA's
    greedy tokens (math backend, same cache) up to bf16 near-ties, checked by their margin."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    seed = fresh_seed()
    device = torch.device("cuda")
    model = build(small_config(num_hidden_layers=2), seed, device, "sdpa").bfloat16()
    ids = torch.randint(0, 512, (4, 40), device=device,
                        generator=torch.Generator(device).manual_seed(seed))
    am = torch.ones_like(ids)
    am[1, :7], am[2, :20], am[3, :1] = 0, 0, 0
    out = {}
    for impl in ("sdpa", fr_tf.NAME):
        model.set_attn_implementation(impl)
        torch._dynamo.reset()
        with sdpa_kernel([SDPBackend.MATH]), torch.inference_mode():
            out[impl] = model.generate(ids, attention_mask=am, max_new_tokens=8,
                                       do_sample=False, cache_implementation="static",
                                       output_scores=True, return_dict_in_generate=True)
    assert_same_greedy_tokens(out["sdpa"], out[fr_tf.NAME], seed, dtype=torch.bfloat16)
