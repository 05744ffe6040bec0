"""FlashAttention-2 forward kernel in Triton (Dao 2023, Algorithm 1): the production kernel.

A program owns BLOCK_M query rows of one (batch, head) and streams K and V in BLOCK_N steps
through two :func:`_attn_stage` loops, the two whose SASS the article counts (docs/article.md):
blocks every row sees in full, unmasked; then the causal diagonal band and the ragged tail.
Causal: row ``i`` sees key ``j`` iff ``j <= i + causal_offset`` (0: SDPA's ``is_causal``;
``Lk - Lq``: bottom-right). Needs Lk >= 1.
"""

import triton
import triton.language as tl


@triton.jit
def _load_tile(ptrs, rows, n_rows, offs_d, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
               CHECK_ROWS: tl.constexpr):
    if CHECK_ROWS:
        if HEAD_DIM == BLOCK_D:
            tile = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
        else:
            tile = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM),
                           other=0.0)
    else:
        if HEAD_DIM == BLOCK_D:
            tile = tl.load(ptrs)
        else:
            tile = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
    return tile


@triton.jit
def _attn_stage(acc, l_i, m_i, q, K, V, kv_offs, stride_n, off_b, off_hkv,
                offs_m, offs_d, lo, hi, seqlen_k, causal_offset, qk_scale,
                BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                CAUSAL: tl.constexpr, MASKED: tl.constexpr, USE_TMA: tl.constexpr):
    # K, V: tensor descriptors (USE_TMA; rows past Lk read 0), or this (batch, kv head)'s base
    # pointers plus the int32 tile offsets `kv_offs`, shared as K and V have equal strides.
    offs_n = tl.arange(0, BLOCK_N)
    if not USE_TMA:
        # 64-bit bases stepped by BLOCK_N rows: start_n·stride in int64 each step makes ptxas
        # serialize every wgmma on sm_90 (lab/2026-11-29-pointer-path-wgmma-serialization/).
        k_base = K + tl.cast(lo, tl.int64) * stride_n
        v_base = V + tl.cast(lo, tl.int64) * stride_n
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_kn = start_n + offs_n
        if USE_TMA:
            k = K.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        else:
            k = _load_tile(k_base + kv_offs, offs_kn, seqlen_k, offs_d, HEAD_DIM, BLOCK_D,
                           MASKED)
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            visible = offs_kn[None, :] < seqlen_k
            if CAUSAL:
                visible = visible & (offs_kn[None, :] <= offs_m[:, None] + causal_offset)
            # Scale before masking: -inf * qk_scale would be NaN for qk_scale == 0.
            qk = tl.where(visible, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            # A row with no visible key yet shifts by 0, not -inf: exp2(-inf + inf) is NaN.
            m_shift = tl.where(m_ij == float("-inf"), 0.0, m_ij)
            p = tl.math.exp2(qk - m_shift[:, None])
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            m_shift = m_ij
            # One FMA per score: scale and subtract the row max together.
            p = tl.math.exp2(qk * qk_scale - m_shift[:, None])
        alpha = tl.math.exp2(m_i - m_shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if USE_TMA:
            v = V.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        else:
            v = _load_tile(v_base + kv_offs, offs_kn, seqlen_k, offs_d, HEAD_DIM, BLOCK_D,
                           MASKED)
            k_base += BLOCK_N * stride_n
            v_base += BLOCK_N * stride_n
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def program_tile(num_batch, num_heads, kv_group, heads_per_group, seqlen_q,
                 BLOCK_M: tl.constexpr):
    """:func:`tile_coords` of this program, in a 1-D grid of B·H·cdiv(Lq, BLOCK_M) programs."""
    return tile_coords(tl.program_id(0), num_batch, num_heads, kv_group, heads_per_group,
                       seqlen_q, BLOCK_M)


@triton.jit
def tile_coords(tile, num_batch, num_heads, kv_group, heads_per_group, seqlen_q,
                BLOCK_M: tl.constexpr):
    """(start_m, off_b, off_h, off_hkv) of tile 0 <= ``tile`` < B·H·cdiv(Lq, BLOCK_M), in run
    order: (batch, head) pairs in groups of ``heads_per_group`` whose K/V fit in half of L2, heads
    fastest, the last query block (the longest under a causal mask) first
    (lab/2026-11-29-l2-head-groups/)."""
    num_m = tl.cdiv(seqlen_q, BLOCK_M)
    group = tile // (heads_per_group * num_m)
    first_hb = group * heads_per_group
    heads_here = tl.minimum(heads_per_group, num_heads * num_batch - first_hb)
    rank = tile - group * heads_per_group * num_m
    start_m = num_m - 1 - rank // heads_here
    off_hb = first_hb + rank % heads_here
    off_b = off_hb // num_heads
    off_h = off_hb % num_heads
    off_hkv = off_h // kv_group
    return start_m, off_b, off_h, off_hkv


# Not specialised: with seqlen_k = 1 and causal_offset = 0 as constants, Triton 3.6's ptxas
# segfaults on the 128x32 w4 s2 sm_90 build; one binary per config also saves compiles.
@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "causal_offset"])
def attn_fwd_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_lb, stride_lh,
    num_batch, num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k, causal_offset,
    qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    """Grid: (B·H·cdiv(Lq, BLOCK_M),). Q, O: (B, H, Lq, HEAD_DIM); K, V: (B, H_kv, Lk, HEAD_DIM)
    with equal strides; LSE: (B, H, Lq) fp32. With ``USE_TMA`` Q, K, V, O are 4-D descriptors
    with blocks [1, 1, BLOCK_M or BLOCK_N, BLOCK_D]. ``qk_scale`` = sm_scale·log2(e);
    ``kv_group`` = H / H_kv; ``heads_per_group``: see :func:`tile_coords`.
    """
    start_m, off_b, off_h, off_hkv = program_tile(num_batch, num_heads, kv_group,
                                                  heads_per_group, seqlen_q, BLOCK_M)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    if USE_TMA:
        q = Q.load([off_b, off_h, start_m * BLOCK_M, 0]).reshape(BLOCK_M, BLOCK_D)
        k_src = K
        v_src = V
        kv_offs = 0
    else:
        # int64 base offsets: B·H·L·D can exceed 2^31 elements.
        q_ptrs = (Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
                  + offs_m.to(tl.int64)[:, None] * stride_qm + offs_d[None, :] * stride_qd)
        q = _load_tile(q_ptrs, offs_m, seqlen_q, offs_d, HEAD_DIM, BLOCK_D, True)
        k_src = K + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
        v_src = V + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
        kv_offs = offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Unmasked stage: whole BLOCK_N blocks inside Lk that this block's first row already sees.
    full_end = (seqlen_k // BLOCK_N) * BLOCK_N
    hi = seqlen_k
    if CAUSAL:
        first_row_limit = start_m * BLOCK_M + causal_offset + 1  # keys visible to row 0
        full_end = tl.minimum(full_end, tl.maximum(first_row_limit, 0) // BLOCK_N * BLOCK_N)
        hi = tl.minimum(hi, tl.maximum(first_row_limit + BLOCK_M - 1, 0))
    acc, l_i, m_i = _attn_stage(acc, l_i, m_i, q, k_src, v_src, kv_offs, stride_kn,
                                off_b, off_hkv, offs_m, offs_d, 0, full_end, seqlen_k,
                                causal_offset, qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, CAUSAL,
                                False, USE_TMA)
    acc, l_i, m_i = _attn_stage(acc, l_i, m_i, q, k_src, v_src, kv_offs, stride_kn,
                                off_b, off_hkv, offs_m, offs_d, full_end, hi, seqlen_k,
                                causal_offset, qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, CAUSAL,
                                True, USE_TMA)

    # Rows that see no key (bottom-right, Lq > Lk) give 0 and LSE -inf, as FlashAttention-2;
    # rows whose scores are all -inf give NaN, as SDPA.
    if CAUSAL:
        l_i = tl.where(offs_m + causal_offset < 0, 1.0, l_i)
    o = (acc / l_i[:, None]).to(q.dtype)
    if USE_TMA:
        # The copy engine drops rows past Lq and columns past HEAD_DIM.
        O.store([off_b, off_h, start_m * BLOCK_M, 0], o.reshape(1, 1, BLOCK_M, BLOCK_D))
    else:
        o_ptrs = (O + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
                  + offs_m.to(tl.int64)[:, None] * stride_om + offs_d[None, :] * stride_od)
        if HEAD_DIM == BLOCK_D:
            tl.store(o_ptrs, o, mask=offs_m[:, None] < seqlen_q)
        else:
            tl.store(o_ptrs, o, mask=(offs_m[:, None] < seqlen_q) & (offs_d[None, :] < HEAD_DIM))
    if STORE_LSE:
        # Natural-log LSE: m_i and log2(l_i) are in base 2, ln(x) = log2(x)·ln(2).
        lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
        lse_ptrs = LSE + off_b.to(tl.int64) * stride_lb + off_h.to(tl.int64) * stride_lh + offs_m
        tl.store(lse_ptrs, lse, mask=offs_m < seqlen_q)
