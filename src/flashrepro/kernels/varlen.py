"""FlashAttention-2 forward over packed sequences of different lengths (varlen).

The layout of FlashAttention's ``flash_attn_varlen_func``: the sequences of a batch are
concatenated along the token dim, q is (total_q, H, D), k and v (total_k, H_kv, D), and
sequence b owns the q rows ``cu_seqlens_q[b] .. cu_seqlens_q[b+1]`` and the key rows
``cu_seqlens_k[b] ..`` (``cu_seqlens_k[b+1]``, or ``seqused_k[b]`` keys where given). The
lengths are read on the device, so a new batch of lengths needs neither a host sync nor a
new binary; the grid covers the longest sequence (``max_seqlen_q``, a host int), and the
programs past their own sequence's end exit at once.

Causal semantics (FlashAttention's for varlen): aligned to each sequence's last key, query
row i sees key j iff ``j <= i + Lk_b - Lq_b``. The inner loop is the production kernel's
(:mod:`.fwd`), one program per (sequence, head, query block).
"""

import triton
import triton.language as tl

from flashrepro.kernels.fwd import _attn_stage, _load_tile

LN2 = tl.constexpr(0.6931471805599453)


# Totals and head counts are runtime values (no specialization on 1 or on divisibility by
# 16): a batch of other lengths runs the same binary.
@triton.jit(do_not_specialize=["num_heads", "kv_group", "total_q", "total_k"])
def varlen_fwd_kernel(
    Q, K, V, O, LSE, CU_SEQLENS_Q, CU_SEQLENS_K, SEQUSED_K,
    stride_qt, stride_qh, stride_qd,
    stride_kt, stride_kh, stride_kd,
    stride_ot, stride_oh, stride_od,
    stride_lh,
    num_heads, kv_group, total_q, total_k, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr, HAS_SEQUSED_K: tl.constexpr,
):
    """Grid: (B·H, cdiv(max_seqlen_q, BLOCK_M)).

    Q, O (total_q, H, HEAD_DIM); K, V (total_k, H_kv, HEAD_DIM) with equal strides; LSE
    (H, total_q) float32, natural log. CU_SEQLENS_Q, CU_SEQLENS_K (B + 1,) and SEQUSED_K
    (B,) int32, contiguous. Offsets are clamped into [0, total] and made non-decreasing, a
    used length into [0, the sequence's key count], so no value reads out of bounds.
    ``qk_scale`` is sm_scale·log2(e); ``kv_group`` = H / H_kv.
    """
    off_bh = tl.program_id(0)
    off_b = off_bh // num_heads
    off_h = off_bh % num_heads
    off_hkv = off_h // kv_group
    # Longest work first: under the causal mask a later query block sees more keys.
    start_m = tl.num_programs(1) - 1 - tl.program_id(1)

    q_start = tl.minimum(tl.maximum(tl.load(CU_SEQLENS_Q + off_b), 0), total_q)
    q_end = tl.minimum(tl.maximum(tl.load(CU_SEQLENS_Q + off_b + 1), q_start), total_q)
    seqlen_q = q_end - q_start
    if start_m * BLOCK_M >= seqlen_q:
        return
    k_start = tl.minimum(tl.maximum(tl.load(CU_SEQLENS_K + off_b), 0), total_k)
    k_end = tl.minimum(tl.maximum(tl.load(CU_SEQLENS_K + off_b + 1), k_start), total_k)
    seqlen_k = k_end - k_start
    if HAS_SEQUSED_K:
        seqlen_k = tl.minimum(tl.maximum(tl.load(SEQUSED_K + off_b), 0), seqlen_k)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    # int64 row offsets: total·H·D can exceed 2^31 elements.
    q_rows = (q_start + offs_m).to(tl.int64)
    q_ptrs = (Q + q_rows[:, None] * stride_qt + off_h.to(tl.int64) * stride_qh
              + offs_d[None, :] * stride_qd)
    q = _load_tile(q_ptrs, offs_m, seqlen_q, offs_d, HEAD_DIM, BLOCK_D, True)
    k_src = K + k_start.to(tl.int64) * stride_kt + off_hkv.to(tl.int64) * stride_kh
    v_src = V + k_start.to(tl.int64) * stride_kt + off_hkv.to(tl.int64) * stride_kh
    kv_offs = offs_n[:, None] * stride_kt + offs_d[None, :] * stride_kd

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # -- key range: whole blocks every row sees unmasked, then the band and ragged tail --
    causal_offset = seqlen_k - seqlen_q
    full_end = seqlen_k // BLOCK_N * BLOCK_N
    hi = seqlen_k
    if CAUSAL:
        first_row_limit = start_m * BLOCK_M + causal_offset + 1  # keys visible to row 0
        full_end = tl.minimum(full_end, tl.maximum(first_row_limit, 0) // BLOCK_N * BLOCK_N)
        hi = tl.minimum(hi, tl.maximum(first_row_limit + BLOCK_M - 1, 0))
    acc, l_i, m_i = _attn_stage(acc, l_i, m_i, q, k_src, v_src, kv_offs, stride_kt,
                                off_b, off_hkv, offs_m, offs_d, 0, full_end, seqlen_k,
                                causal_offset, qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, CAUSAL,
                                False, False)
    acc, l_i, m_i = _attn_stage(acc, l_i, m_i, q, k_src, v_src, kv_offs, stride_kt,
                                off_b, off_hkv, offs_m, offs_d, full_end, hi, seqlen_k,
                                causal_offset, qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, CAUSAL,
                                True, False)

    # -- epilogue: rows that see no key (an empty key range, or causal rows before the
    # first key) get 0 and LSE -inf; rows whose visible scores are all -inf NaN, as SDPA --
    no_keys = seqlen_k == 0
    if CAUSAL:
        no_keys = no_keys | (offs_m + causal_offset < 0)
    l_i = tl.where(no_keys, 1.0, l_i)
    o = (acc / l_i[:, None]).to(O.dtype.element_ty)
    o_ptrs = (O + q_rows[:, None] * stride_ot + off_h.to(tl.int64) * stride_oh
              + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, o, mask=(offs_m[:, None] < seqlen_q) & (offs_d[None, :] < HEAD_DIM))
    if STORE_LSE:
        lse = (m_i + tl.math.log2(l_i)) * LN2
        tl.store(LSE + off_h.to(tl.int64) * stride_lh + q_rows, lse, mask=offs_m < seqlen_q)
