"""The article's Triton FlashAttention forward kernel, frozen: its SASS is pinned by
``reproduce/golden/`` (the article's counts at 64x64, 4 warps, D = 128, causal: 256 HMMA,
112 LDSM; docs/article.md). Do not optimise it; :mod:`flashrepro.kernels.fwd` is the fast one.

Scope: power-of-two head dims, top-left causal alignment, any Lq and Lk, H_kv = H. As in the
article and Triton's tutorial, masked scores get -1.0e6 rather than -inf, so a row whose
visible scores are all below about -1e6 attends to masked keys.
"""

import triton
import triton.language as tl


@triton.jit
def _article_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m, qk_scale, seqlen_k,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr,
                   offs_m: tl.constexpr, offs_n: tl.constexpr):
    # STAGE 1: blocks left of the diagonal (no mask); 2: the diagonal band and ragged tail;
    # 3: every block of a non-causal launch (length mask).
    if STAGE == 1:
        lo, hi = 0, tl.minimum(start_m * BLOCK_M, seqlen_k // BLOCK_N * BLOCK_N)
    elif STAGE == 2:
        lo = tl.minimum(start_m * BLOCK_M, seqlen_k // BLOCK_N * BLOCK_N)
        hi = tl.minimum((start_m + 1) * BLOCK_M, seqlen_k)
    else:
        lo, hi = 0, seqlen_k
    K_block_ptr = tl.advance(K_block_ptr, (0, lo))
    V_block_ptr = tl.advance(V_block_ptr, (lo, 0))
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = tl.load(K_block_ptr, boundary_check=(1,), padding_option="zero")
        qk = tl.dot(q, k)
        if STAGE == 1:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        else:
            mask = (start_n + offs_n[None, :]) < seqlen_k
            if STAGE == 2:
                mask = mask & (offs_m[:, None] >= (start_n + offs_n[None, :]))
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = tl.load(V_block_ptr, boundary_check=(0,), padding_option="zero")
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
        V_block_ptr = tl.advance(V_block_ptr, (BLOCK_N, 0))
        K_block_ptr = tl.advance(K_block_ptr, (0, BLOCK_N))
    return acc, l_i, m_i


@triton.jit
def article_fwd_kernel(Q, K, V, O, sm_scale,
                       stride_qz, stride_qh, stride_qm, stride_qk,
                       stride_kz, stride_kh, stride_kn, stride_kk,
                       stride_vz, stride_vh, stride_vk, stride_vn,
                       stride_oz, stride_oh, stride_om, stride_on,
                       H, seqlen_q, seqlen_k,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       CAUSAL: tl.constexpr):
    """Grid: (cdiv(Lq, BLOCK_M), B·H). Q, O: (B, H, Lq, HEAD_DIM); K, V: (B, H, Lk, HEAD_DIM)."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    q_offset = off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
    k_offset = off_z.to(tl.int64) * stride_kz + off_h.to(tl.int64) * stride_kh
    v_offset = off_z.to(tl.int64) * stride_vz + off_h.to(tl.int64) * stride_vh
    o_offset = off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh
    Q_block_ptr = tl.make_block_ptr(base=Q + q_offset, shape=(seqlen_q, HEAD_DIM),
                                    strides=(stride_qm, stride_qk), offsets=(start_m * BLOCK_M, 0),
                                    block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    # K is read as its transpose, a (HEAD_DIM, Lk) view, so Q·Kᵀ is a plain tl.dot(q, k).
    K_block_ptr = tl.make_block_ptr(base=K + k_offset, shape=(HEAD_DIM, seqlen_k),
                                    strides=(stride_kk, stride_kn), offsets=(0, 0),
                                    block_shape=(HEAD_DIM, BLOCK_N), order=(0, 1))
    V_block_ptr = tl.make_block_ptr(base=V + v_offset, shape=(seqlen_k, HEAD_DIM),
                                    strides=(stride_vk, stride_vn), offsets=(0, 0),
                                    block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    O_block_ptr = tl.make_block_ptr(base=O + o_offset, shape=(seqlen_q, HEAD_DIM),
                                    strides=(stride_om, stride_on), offsets=(start_m * BLOCK_M, 0),
                                    block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # log2(e): exp(x) = exp2(x·log2(e))
    q = tl.load(Q_block_ptr, boundary_check=(0,), padding_option="zero")
    if CAUSAL:
        acc, l_i, m_i = _article_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m,
                                       qk_scale, seqlen_k, BLOCK_M, BLOCK_N, 1, offs_m, offs_n)
        acc, l_i, m_i = _article_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m,
                                       qk_scale, seqlen_k, BLOCK_M, BLOCK_N, 2, offs_m, offs_n)
    else:
        acc, l_i, m_i = _article_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m,
                                       qk_scale, seqlen_k, BLOCK_M, BLOCK_N, 3, offs_m, offs_n)
    acc = acc / l_i[:, None]
    tl.store(O_block_ptr, acc.to(O.type.element_ty), boundary_check=(0,))
