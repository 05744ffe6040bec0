"""Decode and short-query attention over a KV cache: GQA packing and split-KV.

Algorithm: flash-decoding (T. Dao, D. Haziza, F. Massa, G. Sizov, "Flash-Decoding for
long-context inference", 2023), as in FlashAttention-3's split-KV forward. At Lq = 1 a
FlashAttention-2 program owns one query row of one head, so a 16-row or larger tile is
almost empty and only B·H programs stream the keys. Two changes fill the GPU:

* GQA packing: the G = H / H_kv query heads that share a key/value head, times the Lq query
  rows, are the rows of one tile. Row r is query head ``h_kv·G + r // Lq``, query row
  ``r % Lq``; K and V are read once for all G heads.
* Split-KV: the keys of a (batch, kv head) are divided between ``num_splits`` programs. Each
  writes its rows' output normalised by its own softmax sum, and its log-sum-exp, to a float32
  scratch buffer; the last of them to finish merges the parts by their LSE,
  ``lse = log Σ_s exp(lse_s)``, ``o = Σ_s exp(lse_s - lse)·o_s``, in the same launch: each
  program takes a ticket from an int32 counter of its tile (an acq_rel atomic after a barrier,
  so its stores are visible to whoever draws the last ticket), and the last ticket's holder
  merges and puts the counter back to 0 for the next launch (FlashAttention-3's split-KV
  forward merges in a second kernel; the "last block" pattern is CUDA's threadFenceReduction
  sample).

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


@triton.jit
def _merge_parts(o_parts, lse_parts, O, LSE, off_b, off_bh, off_hkv, kv_group, seqlen_q,
                 rows_per_kv, row_start, row_end, num_splits,
                 stride_ob, stride_oh, stride_om, stride_od,
                 stride_lb, stride_lh, stride_lm,
                 HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, STORE_LSE: tl.constexpr,
                 MERGE_S: tl.constexpr, MERGE_R: tl.constexpr):
    """Merge the parts of packed rows [row_start, row_end) into O (and LSE): MERGE_R rows by
    MERGE_S splits per step, every load of a step issued at once (a loop over single splits
    would wait one L2 round trip per split). Online over the splits, as the main loop over
    keys; a row whose parts all have LSE -inf (it sees no key) gets 0 and -inf."""
    offs_r = tl.arange(0, MERGE_R)
    offs_s = tl.arange(0, MERGE_S)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    for r0 in range(row_start, row_end, MERGE_R):
        r = r0 + offs_r
        r_ok = r < row_end
        part_rows = off_bh.to(tl.int64) * rows_per_kv + r
        m = tl.full([MERGE_R], float("-inf"), dtype=tl.float32)
        total = tl.zeros([MERGE_R], dtype=tl.float32)
        acc = tl.zeros([MERGE_R, BLOCK_D], dtype=tl.float32)
        for s0 in range(0, num_splits, MERGE_S):
            s = s0 + offs_s
            ok = r_ok[:, None] & (s[None, :] < num_splits)
            part = part_rows[:, None] * num_splits + s[None, :]
            # .cg: read at L2, where the other programs' stores are, never a stale L1 line
            lse_s = tl.load(lse_parts + part, mask=ok, other=float("-inf"),
                            cache_modifier=".cg")
            o_s = tl.load(o_parts + part[:, :, None] * HEAD_DIM + offs_d[None, None, :],
                          mask=ok[:, :, None] & d_ok[None, None, :], other=0.0,
                          cache_modifier=".cg")
            m_new = tl.maximum(m, tl.max(lse_s, 1))
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
            w = tl.exp(lse_s - shift[:, None])
            alpha = tl.exp(m - shift)
            acc = acc * alpha[:, None] + tl.sum(w[:, :, None] * o_s, 1)
            total = total * alpha + tl.sum(w, 1)
            m = m_new
        no_keys = total == 0.0
        o = acc / tl.where(no_keys, 1.0, total)[:, None]
        off_h = (off_hkv * kv_group + r // seqlen_q).to(tl.int64)
        off_m = (r % seqlen_q).to(tl.int64)
        o_ptrs = (O + off_b.to(tl.int64) * stride_ob + off_h[:, None] * stride_oh
                  + off_m[:, None] * stride_om + offs_d[None, :] * stride_od)
        tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=r_ok[:, None] & d_ok[None, :])
        if STORE_LSE:
            lse = tl.where(no_keys, float("-inf"), m + tl.log(tl.where(no_keys, 1.0, total)))
            tl.store(LSE + off_b.to(tl.int64) * stride_lb + off_h * stride_lh
                     + off_m * stride_lm, lse, mask=r_ok)


# Lengths, head counts and the split count are runtime values: Triton would specialize an int
# equal to 1 (or divisible by 16), and a new length or L_max would then compile a new binary.
@triton.jit(do_not_specialize=["num_heads_kv", "kv_group", "seqlen_q", "max_seqlen_k",
                               "num_splits"])
def decode_fwd_kernel(
    Q, K, V, O, LSE, SEQUSED_K, PARTS, LOCKS,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_lb, stride_lh, stride_lm,
    num_heads_kv, kv_group, seqlen_q, max_seqlen_k, num_splits, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, SPLIT: tl.constexpr, STORE_LSE: tl.constexpr,
    HAS_SEQUSED: tl.constexpr, MERGE_S: tl.constexpr, MERGE_R: tl.constexpr,
):
    """Grid: (B·H_kv, cdiv(G·Lq, BLOCK_M), num_splits).

    Q is (B, H, Lq, HEAD_DIM); K and V are caches (B, H_kv, L_max, HEAD_DIM) with equal
    strides; SEQUSED_K (B,) int32, each value clamped to [0, L_max], when HAS_SEQUSED (else
    every sequence holds L_max keys and SEQUSED_K is any pointer, never touched). O
    (B, H, Lq, HEAD_DIM) gets the output in its dtype, LSE (B, H, Lq) float32 the natural-log
    log-sum-exp when STORE_LSE (otherwise any pointer, never touched). ``qk_scale`` is
    sm_scale·log2(e).

    SPLIT (num_splits > 1): PARTS is float32 scratch of B·H·Lq·num_splits·(HEAD_DIM + 1)
    elements, each split's outputs then its LSEs, in packed-row order; LOCKS holds one int32
    counter per (B·H_kv, row block), 0 before the launch and 0 again after it. Without SPLIT
    both are any pointers, never touched.
    """
    off_bh = tl.program_id(0)
    start_m = tl.program_id(1)
    split = tl.program_id(2)
    off_b = off_bh // num_heads_kv
    off_hkv = off_bh % num_heads_kv

    # -- this split's share of the sequence's key blocks: [lo, hi) --
    if HAS_SEQUSED:
        seqlen_k = tl.load(SEQUSED_K + off_b)
        seqlen_k = tl.minimum(tl.maximum(seqlen_k, 0), max_seqlen_k)
    else:
        seqlen_k = max_seqlen_k
    blocks_per_split = tl.cdiv(tl.cdiv(seqlen_k, BLOCK_N), num_splits)
    lo = split * blocks_per_split * BLOCK_N
    hi = tl.minimum(lo + blocks_per_split * BLOCK_N, seqlen_k)

    # -- packed rows: query head off_hkv·G + r // Lq, query row r % Lq --
    rows_per_kv = kv_group * seqlen_q
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < rows_per_kv
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
    lse = (m_i + tl.math.log2(l_i)) * LN2
    if SPLIT:
        # part (row, split) of packed row `row` = off_bh·G·Lq + r
        part_rows = off_bh.to(tl.int64) * rows_per_kv + rows
        o_parts = PARTS
        lse_parts = PARTS + tl.num_programs(0).to(tl.int64) * rows_per_kv * num_splits * HEAD_DIM
        part = part_rows * num_splits + split
        tl.store(o_parts + part[:, None] * HEAD_DIM + offs_d[None, :], o, mask=io_mask)
        tl.store(lse_parts + part, lse, mask=row_ok)
        # Every thread's stores, then one release: the last ticket's holder sees them all.
        tl.debug_barrier()
        lock = LOCKS + off_bh * tl.num_programs(1) + start_m
        ticket = tl.atomic_add(lock, 1, sem="acq_rel", scope="gpu")
        if ticket == num_splits - 1:
            tl.atomic_xchg(lock, 0, sem="relaxed", scope="gpu")  # ready for the next launch
            row_end = tl.minimum(start_m * BLOCK_M + BLOCK_M, rows_per_kv)
            _merge_parts(o_parts, lse_parts, O, LSE, off_b, off_bh, off_hkv, kv_group,
                         seqlen_q, rows_per_kv, start_m * BLOCK_M, row_end, num_splits,
                         stride_ob, stride_oh, stride_om, stride_od,
                         stride_lb, stride_lh, stride_lm,
                         HEAD_DIM, BLOCK_D, STORE_LSE, MERGE_S, MERGE_R)
    else:
        o_ptrs = (O + off_b.to(tl.int64) * stride_ob + off_h[:, None] * stride_oh
                  + offs_m.to(tl.int64)[:, None] * stride_om + offs_d[None, :] * stride_od)
        tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=io_mask)
        if STORE_LSE:
            lse_ptrs = (LSE + off_b.to(tl.int64) * stride_lb + off_h * stride_lh
                        + offs_m.to(tl.int64) * stride_lm)
            tl.store(lse_ptrs, lse, mask=row_ok)
