"""References and the parity rule for the variable-length entry points (tests/test_decode.py,
tests/test_varlen.py): float64 attention per sequence, SDPA per sequence with the equivalent
boolean mask as the peer, and allocations poisoned with NaN."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

from tests.reference import FLOOR, reference_attention


def kvcache_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seqused: list[int],
                      *, causal: bool, scale: float | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) in float64 of each sequence b on its first ``seqused[b]`` keys (clamped into
    [0, L_max]), causal aligned to its last key; GQA by repeated heads."""
    outs, lses = [], []
    for b, used in enumerate(seqused):
        used = min(max(used, 0), k.shape[2])
        o, lse = reference_attention(q[b:b + 1], k[b:b + 1, :, :used], v[b:b + 1, :, :used],
                                     causal=causal, scale=scale, bottom_right=True,
                                     dtype=torch.float64)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def sequence_mask(lq: int, lk: int, causal: bool, device: torch.device) -> torch.Tensor:
    """The boolean SDPA mask (Lq, Lk) of one sequence: all True, or with ``causal`` aligned
    to its last key (row i sees key j iff j <= i + Lk - Lq)."""
    if not causal:
        return torch.ones(lq, lk, dtype=torch.bool, device=device)
    return (torch.arange(lk, device=device)
            <= torch.arange(lq, device=device)[:, None] + lk - lq)


def _sdpa_sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                   scale: float | None) -> torch.Tensor:
    """SDPA on one sequence, (1, H, Lq, D) against (1, H_kv, Lk, D), with its boolean mask;
    NaN where Lk = 0 (SDPA has no answer there)."""
    if k.shape[2] == 0:
        return torch.full_like(q, float("nan"))
    mask = sequence_mask(q.shape[2], k.shape[2], causal, q.device)
    return sdpa(q.contiguous(), k.contiguous(), v.contiguous(), attn_mask=mask, scale=scale,
                enable_gqa=q.shape[1] != k.shape[1])


def kvcache_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seqused: list[int], *,
                 causal: bool, scale: float | None = None) -> torch.Tensor:
    """torch SDPA (the peer) on each sequence's first ``seqused[b]`` keys with the equivalent
    boolean mask, one sequence at a time (the whole cache at once would take tens of GiB at
    B = 64, L_max = 32k). Rows with no visible key are NaN in SDPA."""
    return torch.cat([_sdpa_sequence(q[b:b + 1], k[b:b + 1, :, :used], v[b:b + 1, :, :used],
                                     causal, scale)
                      for b, used in enumerate(min(max(u, 0), k.shape[2]) for u in seqused)])


def varlen_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: list[int],
                     cu_k: list[int], *, causal: bool, scale: float | None = None,
                     seqused: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(o (total_q, H, D), lse (H, total_q)) in float64, each sequence alone. Rows no
    sequence covers are 0 and -inf."""
    total_q, h, d = q.shape
    o = torch.zeros((total_q, h, d), dtype=torch.float64, device=q.device)
    lse = torch.full((h, total_q), float("-inf"), dtype=torch.float64, device=q.device)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if seqused is not None:
            k1 = k0 + min(max(seqused[b], 0), k1 - k0)
        ob, lseb = reference_attention(*(t.transpose(0, 1)[None] for t in
                                         (q[q0:q1], k[k0:k1], v[k0:k1])),
                                       causal=causal, scale=scale, bottom_right=True,
                                       dtype=torch.float64)
        o[q0:q1] = ob[0].transpose(0, 1)
        lse[:, q0:q1] = lseb[0]
    return o, lse


def varlen_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: list[int],
                cu_k: list[int], *, causal: bool, scale: float | None = None,
                seqused: list[int] | None = None) -> torch.Tensor:
    """torch SDPA on each sequence alone with the equivalent boolean mask (the peer)."""
    o = torch.full_like(q, float("nan"))
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if seqused is not None:
            k1 = k0 + min(max(seqused[b], 0), k1 - k0)
        if q1 == q0:
            continue
        qb, kb, vb = (t.transpose(0, 1)[None] for t in (q[q0:q1], k[k0:k1], v[k0:k1]))
        o[q0:q1] = _sdpa_sequence(qb, kb, vb, causal, scale)[0].transpose(0, 1)
    return o


def assert_parity(o: torch.Tensor, lse: torch.Tensor | None, ref: torch.Tensor,
                  ref_lse: torch.Tensor, peer: torch.Tensor) -> None:
    """The project's parity rule (tests/reference.py): every element of o finite (a
    NaN-poisoned element never written fails), max |o - ref| at most 2x the peer's max error
    (over its finite elements) plus the dtype's floor, and the LSE within 1e-3 + 1e-4·|lse|
    of the reference's, -inf exactly where the reference's is."""
    assert torch.isfinite(o).all(), "unwritten (NaN) or non-finite output elements"
    if o.numel() == 0:
        return
    err = (o.double() - ref).abs().max().item()
    peer_diff = (peer.double() - ref)
    peer_diff = peer_diff[torch.isfinite(peer_diff)]
    peer_err = peer_diff.abs().max().item() if peer_diff.numel() else 0.0
    bound = 2 * peer_err + FLOOR[o.dtype]
    assert err <= bound, f"max |o - ref| = {err:.3g} > 2 x SDPA's {peer_err:.3g} + floor"
    if lse is not None:
        assert lse.dtype == torch.float32 and lse.shape == ref_lse.shape
        assert torch.allclose(lse.double(), ref_lse, atol=1e-3, rtol=1e-4), (
            f"LSE off by {(lse.double() - ref_lse).nan_to_num(math.inf).abs().max().item():.3g}")


@contextlib.contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Inside: every floating-point ``torch.empty`` and ``Tensor.new_empty`` (the launchers'
    outputs and LSE on their fast paths) is filled with NaN, so an output or partial-result
    element that a kernel never writes shows up as NaN."""
    empty, new_empty = torch.empty, torch.Tensor.new_empty

    def poisoned(*args, **kwargs):
        t = empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    def poisoned_new(self, *args, **kwargs):
        t = new_empty(self, *args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    torch.empty, torch.Tensor.new_empty = poisoned, poisoned_new
    try:
        yield
    finally:
        torch.empty, torch.Tensor.new_empty = empty, new_empty
