"""FlashAttention-2 forward kernel (the production kernel).

Algorithm: T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
Partitioning" (2023), Algorithm 1. One program owns BLOCK_M query rows of one (batch, head);
it streams the key/value rows in steps of BLOCK_N and keeps its output accumulator, the running
row maximum ``m_i`` and the running row sum ``l_i`` in registers (the "v2 loop order" of seed
``004_bbfcec059c1c5419.txt``). Softmax runs in base 2 (``exp2``) on fp32 statistics; the
accumulator stays unnormalised until the epilogue divides once by ``l_i`` (delayed
normalization).

The key range of a program is split in two stages, each one call of :func:`_attn_stage`:

* stage 1, ``MASKED=False``: key blocks that every query row of the program sees in full
  (for causal attention, the blocks left of the diagonal band) — no mask at all;
* stage 2, ``MASKED=True``: the remaining blocks — the diagonal band for causal attention and the
  ragged tail where Lk is not a multiple of BLOCK_N — with the causal and length masks.

This is the two-stage structure whose SASS the article (seed ``000_5de0d8ad12f287ab.txt``)
counts: each stage's loop body holds one Q·Kᵀ and one P·V matrix product.

Causal semantics: query row ``i`` sees key ``j`` iff ``j <= i + CAUSAL_OFFSET``. SDPA's
``is_causal`` (top-left alignment) is offset 0; the bottom-right alignment of FlashAttention-2
and KV-cache decoding is offset ``Lk - Lq``. The kernel needs Lk >= 1 (the API answers Lk = 0
itself).
"""

import triton
import triton.language as tl


@triton.jit
def _load_tile(ptrs, rows, n_rows, offs_d, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
               CHECK_ROWS: tl.constexpr):
    # Masks only where needed: rows past the sequence end (ragged tails) and head-dim
    # columns past HEAD_DIM (head dims padded up to the power of two BLOCK_D). Masked
    # elements read as 0 so they add nothing to Q·Kᵀ and P·V.
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
    # K and V are either tensor descriptors (USE_TMA: the copy engine loads whole tiles and
    # fills rows past Lk with zeros) or base pointers of this (batch, kv head) plus the
    # loop-invariant tile offsets `kv_offs` (rows x stride_n + columns x stride_d, int32),
    # shared by K and V, which have equal strides.
    offs_n = tl.arange(0, BLOCK_N)
    if not USE_TMA:
        # Loop-carried base pointers of the current K and V rows: 64-bit from the start
        # (lo x stride can pass 2^31 on long sequences), then stepped by BLOCK_N rows (the
        # launcher keeps BLOCK_N x stride in int32). Recomputing start_n x stride in int64 each
        # step instead made ptxas serialize every wgmma of the kernel on sm_90 (warning C7515;
        # lab/2026-11-29-pointer-path-wgmma-serialization/).
        k_base = K + tl.cast(lo, tl.int64) * stride_n
        v_base = V + tl.cast(lo, tl.int64) * stride_n
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_kn = start_n + offs_n
        # -- compute qk = Q·Kᵀ (BLOCK_M x BLOCK_N, fp32) --
        if USE_TMA:
            k = K.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        else:
            k = _load_tile(k_base + kv_offs, offs_kn, seqlen_k, offs_d, HEAD_DIM, BLOCK_D,
                           MASKED)
        qk = tl.dot(q, tl.trans(k))
        # -- update m_i (running max, base-2 units) --
        if MASKED:
            visible = offs_kn[None, :] < seqlen_k
            if CAUSAL:
                visible = visible & (offs_kn[None, :] <= offs_m[:, None] + causal_offset)
            # Scale before masking: -inf * qk_scale would be NaN for qk_scale == 0.
            qk = tl.where(visible, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            # A row that has seen no visible key yet still has m_ij = -inf; shift it by 0
            # instead, so exp2(-inf - (-inf)) never makes a NaN (its p is 0 either way).
            m_shift = tl.where(m_ij == float("-inf"), 0.0, m_ij)
            p = tl.math.exp2(qk - m_shift[:, None])
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            m_shift = m_ij
            # One FMA per score: scale and subtract the row max together.
            p = tl.math.exp2(qk * qk_scale - m_shift[:, None])
        # -- rescale the old statistics and accumulator to the new max --
        alpha = tl.math.exp2(m_i - m_shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        # -- acc += P·V --
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
    """This program's query block, batch, head and key/value head: (start_m, off_b, off_h,
    off_hkv), for a 1-D grid of B·H·cdiv(Lq, BLOCK_M) programs (:func:`tile_coords` of the
    program id)."""
    return tile_coords(tl.program_id(0), num_batch, num_heads, kv_group, heads_per_group,
                       seqlen_q, BLOCK_M)


@triton.jit
def tile_coords(tile, num_batch, num_heads, kv_group, heads_per_group, seqlen_q,
                BLOCK_M: tl.constexpr):
    """Tile ``tile``'s query block, batch, head and key/value head: (start_m, off_b, off_h,
    off_hkv), tiles numbered 0 .. B·H·cdiv(Lq, BLOCK_M) - 1.

    Tile order. CUDA starts programs in grid order, and a persistent kernel takes tiles in
    this order too. (Batch, head) pairs are taken in groups of ``heads_per_group``, chosen by
    the launcher so that one group's K and V fit in half of L2; inside a group the heads vary
    fastest and the query blocks go heaviest first. Under a causal mask query block m does
    m + 1 key blocks of work, so every head's longest blocks start in the first wave and the
    short ones fill the tail (longest-processing-time-first), while the tiles running at once
    share their K/V in L2. Measured on the H200: lab/2026-11-29-l2-head-groups/.
    """
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


# Lengths and the causal offset are never specialised: Triton would turn a value of 1 into a
# constant, and with seqlen_k = 1 and causal_offset = 0 both constant, ptxas of triton 3.6 crashes
# (segfault) on the 128x32, 4-warp, 2-stage sm_90 build. One binary per config also saves compiles.
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
    """Grid: (B·H·cdiv(Lq, BLOCK_M),), one program per (batch, head, query block).

    O is (B, H, Lq, HEAD_DIM); LSE is (B, H, Lq) fp32. Q, K, V, O are base pointers, or with
    ``USE_TMA`` 4-D tensor descriptors over the (B, H, L, D) tensors with block shapes
    [1, 1, BLOCK_M or BLOCK_N, BLOCK_D]. K and V share strides (the launcher checks it).
    ``qk_scale`` is sm_scale·log2(e), so that exp2(qk·qk_scale) = exp(qk·sm_scale).
    ``kv_group`` = H / H_kv query heads share one key/value head (GQA; 1 for plain MHA).
    ``heads_per_group``: see the program order below.
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

    # -- split the key range [0, Lk) into the unmasked and the masked stage --
    # Keys [0, full_end) are whole BLOCK_N blocks inside Lk; under the causal mask, only
    # those that the first row of this block already sees (j <= start + offset).
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

    # -- epilogue: normalise once. Rows that see no key (possible only with a bottom-right
    # causal offset and Lq > Lk) get output 0 and LSE -inf, as FlashAttention-2 defines;
    # rows that see keys whose scores are all -inf (infinite inputs) get 0/0 = NaN, as
    # SDPA's softmax does --
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
