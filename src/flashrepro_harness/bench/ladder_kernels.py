"""The memory article's ladder (docs/article.md): v1 → v2 → v2 with K pre-transposed.

Small forward-attention kernels, side by side so Nsight Compute shows what each step changes
(``flashrepro profile``):

``v1`` — FlashAttention-1 loop order (Dao et al. 2022, Algorithm 1). One program per (batch,
    head); the outer loop walks key/value blocks, the inner one query blocks, reading Q_i and
    the running O_i, m_i, l_i (fp32 scratch) from HBM and writing them back every step, O_i
    normalised each time; the last key block a query block sees writes the output. HBM reads
    grow as (key/value blocks) x (|Q| + |O_fp32| + |m| + |l|).

``v2`` — FlashAttention-2 loop order (Dao 2023, Algorithm 1). One program per (query block,
    batch x head); Q loaded once, K/V streamed, accumulator and statistics in registers,
    normalised once after the loop. Kᵀ is loaded as a (HEAD_DIM, BLOCK_N) tile through
    ``K + d·stride_kd + n·stride_kn``:

    * ``v2_kcol``: K as (B, H, Lk, D), read column-wise (``stride_kn = D``): the article's
      63.64% bank conflicts;
    * ``v2_kt``: K pre-transposed on the host (B, H, D, Lk), read row-wise (``stride_kn = 1``,
      which Triton specialises): the article's fix 1; the transpose is outside the kernel.

    ``v2_kcol_fma`` / ``v2_kt_fma``: both products on CUDA cores (``FMA_DOT``, fp32 operands),
    the code Triton emits for the article's sm_75 GPU: plain LDS from unswizzled tiles, where
    the column-wise read conflicts; sm_80+ ``tl.dot`` reads swizzled tiles instead
    (lab/2026-11-29-memory-ladder/). At D >= 64 the fp32 operands spill.

Every block is masked (causal, ragged lengths): rungs for measuring traffic, not tuned kernels.
The article's and the production kernel are the other rungs
(:func:`flashrepro_harness.bench.ladder_rungs.launch`). Scope: fp16/bf16, power-of-two D in
16..256, equal query and key/value heads, top-left causal alignment, Lq >= 0, Lk >= 1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from flashrepro.configs import KernelConfig

VARIANTS: tuple[str, ...] = ("v1", "v2_kcol", "v2_kt", "v2_kcol_fma", "v2_kt_fma", "article",
                             "fwd")
"""Every rung of the ladder, in ladder order."""

V2_MODES: dict[str, tuple[bool, bool]] = {  # variant -> (K pre-transposed, CUDA-core dot)
    "v2_kcol": (False, False),
    "v2_kt": (True, False),
    "v2_kcol_fma": (False, True),
    "v2_kt_fma": (True, True),
}

KERNEL_NAMES: dict[str, str] = {
    "v1": "ladder_v1_kernel",
    "v2_kcol": "ladder_v2_kernel",
    "v2_kt": "ladder_v2_kernel",
    "v2_kcol_fma": "ladder_v2_kernel",
    "v2_kt_fma": "ladder_v2_kernel",
    "article": "article_fwd_kernel",
    "fwd": "attn_fwd_kernel",
}
"""The GPU kernel (function) name each variant launches, as profilers report it."""


@triton.jit
def _masked_softmax_step(s, m_i, l_i, offs_m, offs_n, seqlen_k, qk_scale, CAUSAL: tl.constexpr):
    """One online-softmax step shared by every rung: mask the raw scores ``s`` (BLOCK_M x
    BLOCK_N) to the visible keys, scale them to base-2 units (qk_scale = sm_scale·log2 e) and
    return (p, alpha, m_new, l_new). Every row has a finite max: key 0 is visible to every row
    and the first key block initialises m_i."""
    visible = offs_n[None, :] < seqlen_k
    if CAUSAL:
        visible = visible & (offs_n[None, :] <= offs_m[:, None])
    s = tl.where(visible, s * qk_scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def ladder_v1_kernel(Q, K, V, O, Acc, M, L,
                     stride_qb, stride_qh, stride_qm, stride_qd,
                     stride_kb, stride_kh, stride_kn, stride_kd,
                     stride_vb, stride_vh, stride_vn, stride_vd,
                     stride_ob, stride_oh, stride_om, stride_od,
                     H, seqlen_q, seqlen_k, qk_scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr):
    """Grid: (B·H,). Acc: (B, H, Lq, HEAD_DIM) fp32 scratch; M, L: (B, H, Lq) fp32 scratch."""
    off_bh = tl.program_id(0)
    off_b = off_bh // H
    off_h = off_bh % H
    q_base = Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    k_base = K + off_b.to(tl.int64) * stride_kb + off_h.to(tl.int64) * stride_kh
    v_base = V + off_b.to(tl.int64) * stride_vb + off_h.to(tl.int64) * stride_vh
    o_base = O + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
    acc_base = Acc + off_bh.to(tl.int64) * seqlen_q * HEAD_DIM  # contiguous scratch
    m_base = M + off_bh.to(tl.int64) * seqlen_q
    l_base = L + off_bh.to(tl.int64) * seqlen_q
    offs_d = tl.arange(0, HEAD_DIM)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    # Under the causal mask key j is seen only by rows i >= j, so keys at or past Lq are
    # seen by nobody.
    n_end = tl.minimum(seqlen_k, seqlen_q) if CAUSAL else seqlen_k
    for start_n in range(0, n_end, BLOCK_N):
        # -- load K_j, V_j once per outer step --
        offs_n = start_n + offs_n0
        kv_rows = offs_n[:, None] < seqlen_k
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                    mask=kv_rows, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=kv_rows, other=0.0)
        # First query block with a row that sees key start_n (all of them without the mask).
        m_start = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
        for start_m in range(m_start, seqlen_q, BLOCK_M):
            offs_m = start_m + offs_m0
            rows = offs_m < seqlen_q
            # The last key block this query block sees: there it writes the output.
            last_key = seqlen_k - 1
            if CAUSAL:
                last_key = tl.minimum(last_key, tl.minimum(start_m + BLOCK_M, seqlen_q) - 1)
            last_n = (last_key // BLOCK_N) * BLOCK_N
            # -- load Q_i and the running O_i, m_i, l_i from HBM (nothing yet at j = 0) --
            seen = rows & (start_n > 0)
            acc_ptrs = acc_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
            o_i = tl.load(acc_ptrs, mask=seen[:, None], other=0.0)
            m_i = tl.load(m_base + offs_m, mask=seen, other=float("-inf"))
            l_i = tl.load(l_base + offs_m, mask=seen, other=0.0)
            q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                        mask=rows[:, None], other=0.0)
            # -- scores, then the masked online-softmax update --
            s = tl.dot(q, tl.trans(k))
            p, alpha, m_new, l_new = _masked_softmax_step(s, m_i, l_i, offs_m, offs_n, seqlen_k,
                                                          qk_scale, CAUSAL)
            # FA1: O_i is kept normalised, so every step divides by the new row sum.
            o_new = (o_i * (alpha * l_i)[:, None] + tl.dot(p.to(v.dtype), v)) / l_new[:, None]
            # -- write back to HBM: the final output on the last step, the scratch otherwise --
            tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                     o_new.to(O.dtype.element_ty), mask=rows[:, None] & (start_n == last_n))
            keep = rows & (start_n != last_n)
            tl.store(acc_ptrs, o_new, mask=keep[:, None])
            tl.store(m_base + offs_m, m_new, mask=keep)
            tl.store(l_base + offs_m, l_new, mask=keep)
        # The next key block re-reads these rows in other threads' layout: a CTA barrier makes
        # this step's global stores visible to them (with a single query block the load would
        # otherwise follow the store at once and can read stale data).
        tl.debug_barrier()


@triton.jit
def ladder_v2_kernel(Q, K, V, O,
                     stride_qb, stride_qh, stride_qm, stride_qd,
                     stride_kb, stride_kh, stride_kn, stride_kd,
                     stride_vb, stride_vh, stride_vn, stride_vd,
                     stride_ob, stride_oh, stride_om, stride_od,
                     H, seqlen_q, seqlen_k, qk_scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr, FMA_DOT: tl.constexpr):
    """Grid: (cdiv(Lq, BLOCK_M), B·H). K's element (b, h, n, d) is at
    ``K + b·stride_kb + h·stride_kh + n·stride_kn + d·stride_kd`` (either layout)."""
    start_m = tl.program_id(0) * BLOCK_M
    off_bh = tl.program_id(1)
    off_b = off_bh // H
    off_h = off_bh % H
    q_base = Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    k_base = K + off_b.to(tl.int64) * stride_kb + off_h.to(tl.int64) * stride_kh
    v_base = V + off_b.to(tl.int64) * stride_vb + off_h.to(tl.int64) * stride_vh
    o_base = O + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < seqlen_q
    # -- load the query block once --
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=rows[:, None], other=0.0)
    # -- accumulator and statistics stay in registers for the whole key loop --
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # Kᵀ tile pointers, (HEAD_DIM, BLOCK_N): column-wise over K for v2_kcol, row-wise over
    # the pre-transposed K for v2_kt.
    kt_ptrs = k_base + offs_d[:, None] * stride_kd + offs_n0[None, :] * stride_kn
    v_ptrs = v_base + offs_n0[:, None] * stride_vn + offs_d[None, :] * stride_vd
    n_end = tl.minimum(seqlen_k, start_m + BLOCK_M) if CAUSAL else seqlen_k
    for start_n in range(0, n_end, BLOCK_N):
        offs_n = start_n + offs_n0
        # -- scores: Q·Kᵀ, masked (base-2 units) --
        kt = tl.load(kt_ptrs + start_n * stride_kn, mask=offs_n[None, :] < seqlen_k, other=0.0)
        if FMA_DOT:  # CUDA-core dot, as Triton compiles tl.dot for sm_75 (the article's GPU)
            s = tl.dot(q.to(tl.float32), kt.to(tl.float32), input_precision="ieee")
        else:
            s = tl.dot(q, kt)
        # -- masked online-softmax update --
        p, alpha, m_new, l_i = _masked_softmax_step(s, m_i, l_i, offs_m, offs_n, seqlen_k,
                                                    qk_scale, CAUSAL)
        # -- acc += P·V, unnormalised --
        v = tl.load(v_ptrs + start_n * stride_vn, mask=offs_n[:, None] < seqlen_k, other=0.0)
        if FMA_DOT:
            pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    # -- epilogue: delayed normalization, one division per row --
    o = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             o.to(O.dtype.element_ty), mask=rows[:, None])


def launch_v1(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
               causal: bool, qk_scale: float, cfg: KernelConfig) -> None:
    """Launch :func:`ladder_v1_kernel` (one program per head): o from q, k, v (B, H, L, D);
    qk_scale is sm_scale·log2(e)."""
    b, h, lq, d = q.shape
    acc = torch.empty((b, h, lq, d), dtype=torch.float32, device=q.device)
    stats = torch.empty((2, b, h, lq), dtype=torch.float32, device=q.device)
    ladder_v1_kernel[(b * h,)](
        q, k, v, o, acc, stats[0], stats[1],
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        h, lq, k.shape[2], qk_scale,
        HEAD_DIM=d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=causal,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def launch_v2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
               causal: bool, qk_scale: float, cfg: KernelConfig, k_transposed: bool,
               fma_dot: bool) -> None:
    """Launch :func:`ladder_v2_kernel`: K read column-wise or pre-transposed
    (``k_transposed``), Q·Kᵀ on tensor cores or CUDA cores (``fma_dot``)."""
    b, h, lq, d = q.shape
    if k_transposed:
        kt = k.transpose(-1, -2).contiguous()  # (B, H, D, Lk): the memory article's fix 1
        k_strides = (kt.stride(0), kt.stride(1), kt.stride(3), kt.stride(2))
        k_arg = kt
    else:
        k_strides = k.stride()
        k_arg = k
    grid = (triton.cdiv(lq, cfg.block_m), b * h)
    ladder_v2_kernel[grid](
        q, k_arg, v, o,
        *q.stride(), *k_strides, *v.stride(), *o.stride(),
        h, lq, k.shape[2], qk_scale,
        HEAD_DIM=d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=causal, FMA_DOT=fma_dot,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
