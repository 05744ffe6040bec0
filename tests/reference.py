"""Reference attention in high precision, the parity rule, and input/output functions shared by
the tests."""

from __future__ import annotations

import math
import warnings

import torch
from torch.nn.attention.bias import causal_lower_right
from torch.nn.functional import scaled_dot_product_attention as sdpa

import flashrepro
from flashrepro import KernelConfig

# Absolute floor of the parity rule, per dtype.
FLOOR = {torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _repeat_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """k and v with each key/value head repeated H / H_kv times (GQA), as SDPA's enable_gqa."""
    group = q.shape[1] // k.shape[1] if k.shape[1] else 1
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


# Score elements per chunk of query rows in :func:`reference_attention` (1 GiB in float32):
# the whole (B, H, Lq, Lk) score matrix of an L = 16k case, and the softmax's temporaries of
# its size, took ~32 GiB per test process and ran parallel GPU workers out of memory.
REFERENCE_CHUNK = 2**28


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                        scale: float | None = None, bottom_right: bool = False,
                        dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain softmax attention in ``dtype`` (float64 on CPU, float32 on GPU).

    Returns (o, lse): o (B, H, Lq, D) and lse (B, H, Lq), natural log. Rows that see no key
    give o = 0 and lse = -inf; NaN or inf in the inputs propagate as in SDPA's math backend
    (but the causal mask replaces masked scores, so a masked NaN key does not reach a row).
    Key/value heads are repeated for GQA. Query rows are taken in chunks of at most
    :data:`REFERENCE_CHUNK` score elements (each row's result does not depend on the others).
    """
    q, k, v = (t.to(dtype) for t in (q, k, v))
    k, v = _repeat_kv(q, k, v)
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    offset = lk - lq if bottom_right else 0
    rows = max(1, REFERENCE_CHUNK // max(1, b * h * lk))
    outs, lses = [], []
    for start in range(0, lq, rows):
        s = (q[:, :, start:start + rows] @ k.transpose(-1, -2)) * scale
        i = torch.arange(start, start + s.shape[2], device=q.device)[:, None]
        j = torch.arange(lk, device=q.device)[None, :]
        visible = (j <= i + offset if causal
                   else torch.ones(s.shape[2], lk, dtype=torch.bool, device=q.device))
        s = s.masked_fill(~visible, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None])
        # a row that sees no key gives 0; one whose visible scores are all -inf stays NaN (0/0)
        p = p.masked_fill(~visible.any(-1)[:, None], 0.0)
        outs.append(p @ v)
        lses.append(lse)
    if not outs:  # Lq = 0
        return q.new_empty(b, h, 0, v.shape[-1]), q.new_empty(b, h, 0)
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                   scale: float | None = None, bottom_right: bool = False) -> torch.Tensor:
    """torch's SDPA on the same inputs (its default backend); key/value heads repeated for GQA,
    the bottom-right mask as ``torch.nn.attention.bias.causal_lower_right``. The inputs are
    copied contiguous first: SDPA's CUDA backends refuse a last dimension with a stride
    ("Input tensor must have contiguous last dimension"), which flashrepro takes."""
    q = q.contiguous()
    k, v = (t.contiguous() for t in _repeat_kv(q, k, v))
    if causal and bottom_right:
        with warnings.catch_warnings():  # "will produce NaNs when seq_len_q > seq_len_kv"
            warnings.simplefilter("ignore", UserWarning)
            mask = causal_lower_right(q.shape[2], k.shape[2])
        return sdpa(q, k, v, attn_mask=mask, scale=scale)
    return sdpa(q, k, v, is_causal=causal, scale=scale)


def check_parity(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                 config: KernelConfig | str | None = None, article: bool = False,
                 scale: float | None = None, enable_gqa: bool = False,
                 bottom_right: bool = False,
                 out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run flashrepro into a NaN-poisoned ``out`` (default a fresh buffer), assert the parity
    rule (:func:`assert_parity`), and return (o, lse) (lse None for the article kernel)."""
    if out is None:
        out = poisoned_like(q)
    else:
        out.fill_(float("nan"))
    if article:
        o = flashrepro.article_attention(q, k, v, causal=causal, scale=scale, config=config,
                                         out=out)
        lse = None
    else:
        o, lse = flashrepro.attention(
            q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
            causal_alignment="bottom_right" if bottom_right else "top_left",
            config=config, out=out, return_lse=True)
    assert o is out, "the output was not written into out"
    assert_parity(o, lse, q, k, v, causal=causal, scale=scale, bottom_right=bottom_right)
    return o, lse


def assert_parity(o: torch.Tensor, lse: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, *, causal: bool, scale: float | None = None,
                  bottom_right: bool = False) -> None:
    """The parity rule for an output o (and lse, if not None) of inputs q, k, v.

    On the same inputs, o's max error against the reference (float64 on CPU, float32 on GPU)
    is at most 2x torch SDPA's max error plus ``FLOOR[dtype]``; every element of o must be
    finite (a NaN-poisoned element the kernel never wrote fails); the LSE must match the
    reference's. Elements where SDPA's own answer is not finite (rows that see no key under
    its lower-right mask; its CPU flash backend with scale = 0 and a causal mask) do not count
    towards SDPA's error.
    """
    assert torch.isfinite(o).all(), "unwritten (NaN) or non-finite output elements"
    if o.numel() == 0:
        return
    ref_dtype = torch.float32 if q.is_cuda else torch.float64
    ref, ref_lse = reference_attention(q, k, v, causal=causal, scale=scale,
                                       bottom_right=bottom_right, dtype=ref_dtype)
    err = (o.to(ref_dtype) - ref).abs().max().item()
    peer_diff = sdpa_attention(q, k, v, causal=causal, scale=scale,
                               bottom_right=bottom_right).to(ref_dtype) - ref
    peer_diff = peer_diff[torch.isfinite(peer_diff)]
    peer_err = peer_diff.abs().max().item() if peer_diff.numel() else 0.0
    bound = 2 * peer_err + FLOOR[q.dtype]
    assert err <= bound, f"max |o - ref| = {err:.3g} > 2 x SDPA's {peer_err:.3g} + floor"
    if lse is not None:
        assert lse.dtype == torch.float32 and lse.shape == ref_lse.shape
        assert torch.allclose(lse.to(ref_dtype), ref_lse, atol=1e-3, rtol=1e-4), (
            f"LSE off by {(lse.to(ref_dtype) - ref_lse).abs().max().item():.3g}")


def random_qkv(b: int, h: int, lq: int, lk: int, d: int, dtype: torch.dtype,
               device: torch.device, h_kv: int | None = None,
               generator: torch.Generator | None = None):
    """Fresh standard-normal q (B, H, Lq, D), k and v (B, H_kv, Lk, D); never zeros.

    Drawn on ``generator``'s device (default: on ``device``), then moved to ``device``.
    """
    h_kv = h if h_kv is None else h_kv
    draw_on = device if generator is None else generator.device
    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float32,
                           device=draw_on).to(device, dtype)
    return draw(b, h, lq, d), draw(b, h_kv, lk, d), draw(b, h_kv, lk, d)


def relayout(t: torch.Tensor, order: tuple[int, ...] = (0, 1, 2, 3),
             d_step: int = 1) -> torch.Tensor:
    """A strided copy of the 4-d ``t``: same values, memory laid out in dim ``order``
    (outermost first; (0, 2, 1, 3) is a (B, L, H, D) tensor seen as (B, H, L, D)), and a
    head-dim stride of ``d_step``. The buffer's other elements are NaN, so a kernel that
    reads outside the view gives NaN."""
    buf_shape = [t.shape[i] for i in order]
    buf_shape[order.index(3)] *= d_step
    buf = torch.full(buf_shape, float("nan"), dtype=t.dtype, device=t.device)
    inverse = [order.index(i) for i in range(4)]
    view = buf.permute(*inverse)[..., ::d_step]
    view.copy_(t)
    return view


def poisoned_like(q: torch.Tensor) -> torch.Tensor:
    """An output buffer full of NaN, so an element the kernel never writes fails the check."""
    return torch.full_like(q, float("nan"))


def compiled_kernels(jit_function) -> list:
    """The kernels a Triton or Gluon JIT function has compiled in this process, every device
    (Triton 3.6's ``JITFunction.device_caches``); each has ``.asm["ptx"]``."""
    return [kernel for cache, *_ in jit_function.device_caches.values()
            for kernel in cache.values()]

