"""Decode and short-query attention over a KV cache: GQA packing and split-KV.

Algorithm: flash-decoding (T. Dao, D. Haziza, F. Massa, G. Sizov, "Flash-Decoding for
long-context inference", 2023), as in FlashAttention-3's split-KV forward. At Lq = 1 a
FlashAttention-2 program owns one query row of one head, so a 16-row or larger tile is
almost empty and only B·H programs stream the keys. Two changes fill the GPU:

* GQA packing: the G = H / H_kv query heads that share a key/value head, times the Lq query
  rows, are the rows of one tile. Row r is query head ``h_kv·G + r // Lq``, query row
  ``r % Lq``; K and V are read once for all G heads.
* Split-KV: the keys of a (batch, kv head) are divided between ``num_splits`` programs. Each
  writes its rows' output normalised by its own softmax sum, and its log-sum-exp;
  :func:`decode_combine_kernel` then merges the parts by their LSE:
  ``lse = log Σ_s exp(lse_s)``, ``o = Σ_s exp(lse_s - lse)·o_s``.

The number of splits comes from shapes only (the launcher's choice); each program reads its
sequence's length ``seqused_k[b]`` on the device and takes an equal share of that sequence's
key blocks, so a short sequence in a long cache leaves splits empty rather than a few
programs doing all the work. An empty split writes o_s = 0 and lse_s = -inf.

Causal semantics: query row i sees key j iff ``j <= i + seqused_k[b] - Lq`` (aligned to the
sequence's last valid key). The inner loop is the production kernel's (:mod:`.fwd`).
"""

import triton
import triton.language as tl

from flashrepro.kernels.fwd import _attn_stage

LN2 = tl.constexpr(0.6931471805599453)


# Lengths, head counts and the split count are runtime values: Triton would specialize an int
# equal to 1 (or divisible by 16), and a new length or L_max would then compile a new binary.
@triton.jit(do_not_specialize=["num_heads_kv", "kv_group", "seqlen_q", "max_seqlen_k",
                               "num_splits"])
def decode_fwd_kernel(
    Q, K, V, O, LSE, SEQUSED_K,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_ob, stride_oh, stride_om, stride_os, stride_od,
    stride_lb, stride_lh, stride_lm, stride_ls,
    num_heads_kv, kv_group, seqlen_q, max_seqlen_k, num_splits, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr,
):
    """Grid: (B·H_kv, cdiv(G·Lq, BLOCK_M), num_splits).

    Q is (B, H, Lq, HEAD_DIM); K and V are caches (B, H_kv, L_max, HEAD_DIM) with equal
    strides; SEQUSED_K (B,) int32, each value clamped to [0, L_max]. O and LSE are indexed
    (b, h, i, split): the partial buffers (B, H, Lq, num_splits[, HEAD_DIM]), or with one
    split the final (B, H, Lq, D) output and (B, H, Lq) LSE (split strides unused). O gets
    each row's output normalised by this split's sum, in O's dtype; LSE the natural-log
    log-sum-exp. ``qk_scale`` is sm_scale·log2(e).
    """
    off_bh = tl.program_id(0)
    start_m = tl.program_id(1)
    split = tl.program_id(2)
    off_b = off_bh // num_heads_kv
    off_hkv = off_bh % num_heads_kv

    # -- this split's share of the sequence's key blocks: [lo, hi) --
    seqlen_k = tl.load(SEQUSED_K + off_b)
    seqlen_k = tl.minimum(tl.maximum(seqlen_k, 0), max_seqlen_k)
    blocks_per_split = tl.cdiv(tl.cdiv(seqlen_k, BLOCK_N), num_splits)
    lo = split * blocks_per_split * BLOCK_N
    hi = tl.minimum(lo + blocks_per_split * BLOCK_N, seqlen_k)

    # -- packed rows: query head off_hkv·G + r // Lq, query row r % Lq --
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < kv_group * seqlen_q
    off_h = (off_hkv * kv_group + rows // seqlen_q).to(tl.int64)
    offs_m = rows % seqlen_q
    offs_d = tl.arange(0, BLOCK_D)
    io_mask = row_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
    q_ptrs = (Q + off_b.to(tl.int64) * stride_qb + off_h[:, None] * stride_qh
              + offs_m.to(tl.int64)[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    q = tl.load(q_ptrs, mask=io_mask, other=0.0)

    k_src = K + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
    v_src = V + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
    offs_n = tl.arange(0, BLOCK_N)
    kv_offs = offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # -- unmasked blocks: those every row sees in full; then the tail with the masks --
    causal_offset = seqlen_k - seqlen_q
    seen_by_all = hi
    if CAUSAL:
        seen_by_all = tl.minimum(hi, causal_offset + 1)  # keys visible to query row 0
    full_end = lo + tl.maximum(seen_by_all - lo, 0) // BLOCK_N * BLOCK_N
    acc, l_i, m_i = _attn_stage(acc, l_i, m_i, q, k_src, v_src, kv_offs, stride_kn,
                                off_b, off_hkv, offs_m, offs_d, lo, full_end, hi,
                                causal_offset, qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, CAUSAL,
                                False, False)
    acc, l_i, m_i = _attn_stage(acc, l_i, m_i, q, k_src, v_src, kv_offs, stride_kn,
                                off_b, off_hkv, offs_m, offs_d, full_end, hi, hi,
                                causal_offset, qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, CAUSAL,
                                True, False)

    # -- epilogue: a row that took no key here (l = 0, m = -inf) gives 0 and LSE -inf --
    l_i = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_i[:, None]
    o_ptrs = (O + off_b.to(tl.int64) * stride_ob + off_h[:, None] * stride_oh
              + offs_m.to(tl.int64)[:, None] * stride_om + split * stride_os
              + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=io_mask)
    if STORE_LSE:
        lse = (m_i + tl.math.log2(l_i)) * LN2
        lse_ptrs = (LSE + off_b.to(tl.int64) * stride_lb + off_h * stride_lh
                    + offs_m.to(tl.int64) * stride_lm + split * stride_ls)
        tl.store(lse_ptrs, lse, mask=row_ok)


@triton.jit(do_not_specialize=["num_heads", "seqlen_q", "num_splits"])
def decode_combine_kernel(
    O_PART, LSE_PART, O, LSE,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_lb, stride_lh, stride_lm,
    num_heads, seqlen_q, num_splits,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
    STORE_LSE: tl.constexpr,
):
    """Grid: (B·H·Lq,), one program per query row.

    O_PART (B, H, Lq, num_splits, HEAD_DIM) and LSE_PART (B, H, Lq, num_splits), float32 and
    contiguous: :func:`decode_fwd_kernel`'s parts. O (B, H, Lq, HEAD_DIM) gets the merged
    output in its dtype, LSE (B, H, Lq) the merged natural-log LSE. A row whose parts all
    have LSE -inf (it sees no key) gets 0 and -inf.
    """
    row = tl.program_id(0)  # (b, h, i) in row-major order: the parts' row
    off_m = row % seqlen_q
    off_h = (row // seqlen_q) % num_heads
    off_b = row // (seqlen_q * num_heads)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    lse_part = LSE_PART + row.to(tl.int64) * num_splits
    o_part = O_PART + row.to(tl.int64) * num_splits * HEAD_DIM

    # -- pass 1: the largest part LSE, the shift that keeps exp() in range --
    m = tl.full([BLOCK_S], float("-inf"), dtype=tl.float32)
    for s in range(0, num_splits, BLOCK_S):
        lse_s = tl.load(lse_part + s + offs_s, mask=s + offs_s < num_splits,
                        other=float("-inf"))
        m = tl.maximum(m, lse_s)
    m_max = tl.max(m, 0)
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)

    # -- pass 2: the parts' outputs weighted by exp(lse_s - m_max) --
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    weights = tl.zeros([BLOCK_S], dtype=tl.float32)
    for s in range(0, num_splits, BLOCK_S):
        in_range = s + offs_s < num_splits
        lse_s = tl.load(lse_part + s + offs_s, mask=in_range, other=float("-inf"))
        w = tl.exp(lse_s - m_max)
        o_s = tl.load(o_part + (s + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                      mask=in_range[:, None] & (offs_d[None, :] < HEAD_DIM), other=0.0)
        acc += tl.sum(w[:, None] * o_s, 0)
        weights += w
    total = tl.sum(weights, 0)
    no_keys = total == 0.0
    total = tl.where(no_keys, 1.0, total)
    o = acc / total
    o_ptrs = (O + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
              + off_m.to(tl.int64) * stride_om + offs_d * stride_od)
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=offs_d < HEAD_DIM)
    if STORE_LSE:
        lse_ptr = (LSE + off_b.to(tl.int64) * stride_lb + off_h.to(tl.int64) * stride_lh
                   + off_m.to(tl.int64) * stride_lm)
        tl.store(lse_ptr, tl.where(no_keys, float("-inf"), m_max + tl.log(total)))
