"""FlashAttention forward for Hopper (sm_90) in Gluon, with FA3's softmax/wgmma overlap.

Same algorithm and semantics as :mod:`flashrepro.kernels.fwd` (FA2 loop order, online softmax
in base 2, delayed normalisation, causal mask ``j <= i + causal_offset``), written in Gluon,
Triton 3.6's lower-level language, because Triton itself cannot express the overlap: it waits
for every wgmma right after issuing it (lab/2026-11-29-triton-softmax-overlap/).

Intra-warpgroup pipelining (J. Shah et al., "FlashAttention-3", 2024, Algorithm 2): iteration j
issues S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1} as asynchronous wgmma groups, waits for the older
group only (S_j), runs the softmax of S_j while P_{j-1}·V_{j-1} is still on the tensor cores,
then waits for it and rescales O by this step's alpha. K and V arrive by TMA into NUM_STAGES
shared-memory slots, each with its own mbarrier, so Q·K_jᵀ can start before V_j has landed.

Scope (:func:`flashrepro.select.select` sends only these here): sm_90, fp16 or bf16, HEAD_DIM
64 or 128, inputs that TMA can address, and ``causal_offset >= 0`` (every query row sees key 0,
so no row's running max stays -inf).
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from flashrepro.kernels.call import KernelCall
from flashrepro.kernels.fwd import program_tile


@gluon.jit
def _running_max(m_i, m_block, MAX_LAG: gl.constexpr):
    """The rows' new reference max: the running max (MAX_LAG 0), or, with MAX_LAG > 0, the old
    one unless the block's exceeds it by more than MAX_LAG (log2 units), so that alpha is
    exactly 1 for most rows of most blocks and P stays <= 2^MAX_LAG (FlashAttention-4's
    conditional rescaling, T. Dao et al., 2025; lab/2026-11-29-conditional-rescaling/).

    The test is on the difference, the exponent of the block's largest P (in unmasked blocks
    ptxas fuses it with the scaling into one FFMA, as it does P's own), so rounding moves the
    bound by at most half a unit in MAX_LAG's last place. ``m_block > m_i + MAX_LAG`` rounded
    the sum instead: from |m_i| >= 2^27, where float32's spacing is 16, a tie rounds it up to
    m_i + 16, and P reached 2^16, past float16's largest value
    (tests/test_softmax_numerics.py)."""
    if MAX_LAG == 0.0:
        m_new = gl.maximum(m_i, m_block)
    else:
        m_new = gl.where(m_block - m_i > MAX_LAG, m_block, m_i)
    return m_new


@gluon.jit
def _max_of_halves(x):
    """[ROWS, n, 4] -> [ROWS, n / 2, 4]: the larger of k and k + n / 2, n / 2 independent
    maxima per row and thread (one level of a tree)."""
    ROWS: gl.constexpr = x.type.shape[0]
    N: gl.constexpr = x.type.shape[1]
    return gl.max(x.reshape([ROWS, 2, N // 2, 4]), 1)


@gluon.constexpr_function
def _log2(n):
    return n.bit_length() - 1


@gluon.jit
def _row_max(s, TREE: gl.constexpr):
    """The rows' maxima of ``s`` (ROWS x BLOCK_N, in a wgmma accumulator's layout). Not TREE:
    ``gl.max``, which a thread computes as one dependent chain over its BLOCK_N / 4 columns of
    a row. TREE: adjacent pairs, then halves of what is left, so the chain before the quad's
    two shuffles is log2(BLOCK_N / 4) deep (5 at BLOCK_N 128, against 31); the same count of
    maxima and the same value (Triton's maximum drops NaN unless every input is NaN, in any
    order). Columns as :func:`_thread_row_sums`; BLOCK_N a power of two, 16 or more."""
    if TREE:
        ROWS: gl.constexpr = s.type.shape[0]
        BLOCK_N: gl.constexpr = s.type.shape[1]
        gl.static_assert(BLOCK_N >= 16 and (BLOCK_N & (BLOCK_N - 1)) == 0)
        x = gl.max(s.reshape([ROWS, BLOCK_N // 8, 4, 2]), 3)
        for _ in gl.static_range(_log2(BLOCK_N // 8)):
            x = _max_of_halves(x)
        m = gl.convert_layout(gl.max(x.reshape([ROWS, 4]), 1), gl.SliceLayout(1, s.type.layout))
    else:
        m = gl.max(s, 1)
    return m


@gluon.jit
def _softmax_step(s, m_i, l_i, cols, rows, seqlen_k, causal_offset, qk_scale,
                  MASKED: gl.constexpr, CAUSAL: gl.constexpr, MAX_LAG: gl.constexpr,
                  TREE: gl.constexpr = False):
    """One block's online-softmax update: returns (p, alpha, m_new, l_new), p unnormalised,
    m_new as :func:`_running_max`, the row sums ``l_i`` and ``l_new`` as
    :func:`_thread_row_sums`' partials (block 0: ``l_i`` 0). ``m_i`` is finite from block 0 on:
    every row sees key 0 in this kernel's scope."""
    if MASKED:  # key tail past Lk and, for causal, keys right of each row's diagonal
        keep = gl.expand_dims(cols < seqlen_k, 0)
        if CAUSAL:
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1) + causal_offset)
        # Scale before masking: -inf * qk_scale would be NaN for qk_scale == 0.
        s = gl.where(keep, s * qk_scale, float("-inf"))
        m_new = _running_max(m_i, _row_max(s, TREE), MAX_LAG)
        p = gl.exp2(s - gl.expand_dims(m_new, 1))
    else:
        m_new = _running_max(m_i, _row_max(s, TREE) * qk_scale, MAX_LAG)
        # One FMA per score: scale and subtract the row max together.
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    partial = _thread_row_sums(p)
    alpha_2d = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, partial.type.layout)),
                              1)
    return p, alpha, m_new, l_i * alpha_2d + partial


@gluon.jit
def _thread_row_sums(p):
    """Each thread's share of the row sums of ``p`` (ROWS x BLOCK_N, in a wgmma accumulator's
    layout): ROWS x 4, the partial sums of a quad's four threads. A thread holds columns
    8k + 2t + {0, 1} of its rows (t its place in the quad), so this sums over k and the pair
    in registers; the shuffles across the quad wait for the epilogue (:func:`store_output`),
    as FA3 does, instead of costing two per row and block."""
    ROWS: gl.constexpr = p.type.shape[0]
    BLOCK_N: gl.constexpr = p.type.shape[1]
    return gl.sum(gl.sum(p.reshape([ROWS, BLOCK_N // 8, 4, 2]), 3), 1)


@gluon.jit
def _softmax_block(s, m_i, l_i, cols, rows, full, seqlen_k, causal_offset, qk_scale,
                   CAUSAL: gl.constexpr, MAX_LAG: gl.constexpr = 0.0, TREE: gl.constexpr = False):
    """:func:`_softmax_step` of one block, with the masks only where ``full`` (a runtime
    flag: every query row sees the whole block) is false."""
    if full:
        p, alpha, m_new, l_new = _softmax_step(s, m_i, l_i, cols, rows, seqlen_k,
                                               causal_offset, qk_scale, False, CAUSAL, MAX_LAG,
                                               TREE)
    else:
        p, alpha, m_new, l_new = _softmax_step(s, m_i, l_i, cols, rows, seqlen_k,
                                               causal_offset, qk_scale, True, CAUSAL, MAX_LAG,
                                               TREE)
    return p, alpha, m_new, l_new


@gluon.jit
def _key_blocks(row0, ROWS: gl.constexpr, seqlen_k, causal_offset, BLOCK_N: gl.constexpr,
                CAUSAL: gl.constexpr):
    """Key blocks of query rows [row0, row0 + ROWS): (n_full, n_blocks). Blocks [0, n_full)
    need no mask for any of the rows, [n_full, n_blocks) do, later ones are masked for all
    (under a causal mask, keys right of the last row's diagonal)."""
    n_blocks = gl.cdiv(seqlen_k, BLOCK_N)
    n_full = seqlen_k // BLOCK_N
    if CAUSAL:
        first_row_limit = row0 + causal_offset + 1  # keys the first row sees (>= 1)
        n_full = gl.minimum(n_full, first_row_limit // BLOCK_N)
        n_blocks = gl.minimum(n_blocks, gl.cdiv(first_row_limit + ROWS - 1, BLOCK_N))
    return n_full, n_blocks


@gluon.jit
def _load_kv(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, slot, block, off_b, off_hkv,
             pred, BLOCK_N: gl.constexpr):
    """TMA-load key/value block ``block`` into ``slot``; K and V each complete their own
    mbarrier, so Q·Kᵀ can start before V lands. Nothing is issued where ``pred`` is false."""
    mbarrier.expect(k_bar.index(slot), k_desc.block_type.nbytes, pred)
    tma.async_copy_global_to_shared(k_desc, [off_b, off_hkv, block * BLOCK_N, 0],
                                    k_bar.index(slot), k_smem.index(slot), pred)
    mbarrier.expect(v_bar.index(slot), v_desc.block_type.nbytes, pred)
    tma.async_copy_global_to_shared(v_desc, [off_b, off_hkv, block * BLOCK_N, 0],
                                    v_bar.index(slot), v_smem.index(slot), pred)


@gluon.jit
def attn_fwd_gluon_kernel(
    q_desc, k_desc, v_desc, o_desc, LSE,
    stride_lb, stride_lh,
    num_batch, num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k, causal_offset,
    qk_scale,
    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr,
    num_warps: gl.constexpr,
):
    """Grid and program order as :func:`flashrepro.kernels.fwd.attn_fwd_kernel`.

    q_desc/o_desc: 4-D TMA descriptors over (B, H, Lq, D), block [1, 1, BLOCK_M, D];
    k_desc/v_desc over (B, H_kv, Lk, D), block [1, 1, BLOCK_N, D]. LSE is (B, H, Lq) fp32.
    """
    dtype: gl.constexpr = q_desc.dtype
    start_m, off_b, off_h, off_hkv = program_tile(num_batch, num_heads, kv_group,
                                                  heads_per_group, seqlen_q, BLOCK_M)

    # -- layouts: wgmma accumulators with the warps over rows ([num_warps, 1]); P feeds P·V
    # from registers as its A operand, in the dot-operand layout of O's accumulator --
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)

    # -- shared memory: Q once, K and V in NUM_STAGES slots, one mbarrier per load --
    q_smem = gl.allocate_shared_memory(dtype, [1, 1, BLOCK_M, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, 1, BLOCK_N, HEAD_DIM],
                                       k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, 1, BLOCK_N, HEAD_DIM],
                                       v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bar = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_bar = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_bar.index(i), count=1)
        mbarrier.init(v_bar.index(i), count=1)

    # -- the key range: blocks [0, n_full) need no mask, [n_full, n_blocks) do --
    n_full, n_blocks = _key_blocks(start_m * BLOCK_M, BLOCK_M, seqlen_k, causal_offset,
                                   BLOCK_N, CAUSAL)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [off_b, off_h, start_m * BLOCK_M, 0], q_bar, q_smem)
    for i in gl.static_range(NUM_STAGES):
        _load_kv(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, i, i, off_b, off_hkv,
                 i < n_blocks, BLOCK_N)

    q = q_smem.reshape([BLOCK_M, HEAD_DIM])
    rows = start_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
    cols0 = gl.arange(0, BLOCK_N, layout=col_layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_layout)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

    # -- block 0: S_0 and its softmax, nothing to overlap with yet --
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_bar.index(0), 0)
    k0 = k_smem.index(0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
    s = warpgroup_mma(q, k0, s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
    p, alpha, m_i, l_i = _softmax_block(s, m_i, 0.0, cols0, rows, n_full > 0, seqlen_k,
                                        causal_offset, qk_scale, CAUSAL)
    p = gl.convert_layout(p.to(dtype), p_layout)

    # -- steady state: issue S_j and O += P_{j-1}·V_{j-1}, softmax S_j under the P·V --
    for j in range(1, n_blocks):
        slot = j % NUM_STAGES
        prev = (j - 1) % NUM_STAGES
        mbarrier.wait(k_bar.index(slot), (j // NUM_STAGES) & 1)
        kj = k_smem.index(slot).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
        s = warpgroup_mma(q, kj, s_zero, use_acc=False, is_async=True)
        mbarrier.wait(v_bar.index(prev), ((j - 1) // NUM_STAGES) & 1)
        v_prev = v_smem.index(prev).reshape([BLOCK_N, HEAD_DIM])
        acc = warpgroup_mma(p, v_prev, acc, is_async=True)
        s = warpgroup_mma_wait(1, deps=(s,))  # S_j done; P_{j-1}·V_{j-1} may still run
        p_new, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, j * BLOCK_N + cols0, rows,
                                                j < n_full, seqlen_k, causal_offset,
                                                qk_scale, CAUSAL)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        p = gl.convert_layout(p_new.to(dtype), p_layout)
        # Slot `prev` is free (its K and V were read by finished wgmmas): refill it.
        nxt = j - 1 + NUM_STAGES
        _load_kv(k_desc, v_desc, k_smem, v_smem, k_bar, v_bar, prev, nxt, off_b, off_hkv,
                 nxt < n_blocks, BLOCK_N)

    # -- the last block's P·V, then the epilogue: normalise once, store through TMA --
    last = n_blocks - 1
    mbarrier.wait(v_bar.index(last % NUM_STAGES), (last // NUM_STAGES) & 1)
    v_last = v_smem.index(last % NUM_STAGES).reshape([BLOCK_N, HEAD_DIM])
    acc = warpgroup_mma(p, v_last, acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.invalidate(q_bar)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(k_bar.index(i))
        mbarrier.invalidate(v_bar.index(i))

    o_smem = gl.allocate_shared_memory(dtype, [1, 1, BLOCK_M, HEAD_DIM], o_desc.layout)
    store_output(acc, m_i, l_i, start_m * BLOCK_M, rows, o_smem, o_desc, off_b, off_h, LSE,
                 stride_lb, stride_lh, seqlen_q, STORE_LSE)
    tma.store_wait(pendings=0)


@gluon.jit
def store_output(acc, m_i, l_part, row0, rows, o_smem, o_desc, off_b, off_h, LSE, stride_lb,
                 stride_lh, seqlen_q, STORE_LSE: gl.constexpr):
    """The epilogue of query rows ``rows`` (``row0`` the first): normalise O once, store it
    from ``o_smem`` (free: the caller's part) through TMA, and with STORE_LSE the rows'
    natural-log LSE. ``l_part``: the row sums as :func:`_thread_row_sums`' partials. The store
    is left in flight (``tma.store_wait`` is the caller's part too); used by both Gluon
    kernels."""
    ROWS: gl.constexpr = acc.type.shape[0]
    HEAD_DIM: gl.constexpr = acc.type.shape[1]
    l_i = gl.convert_layout(gl.sum(l_part, 1), m_i.type.layout)  # across the quad, once
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, acc.type.layout))
    # One reciprocal per row, then a multiply per element: `acc / l` compiles to div.full.f32
    # per element, whose range checks cost about four instructions each, here between a
    # tile's last GEMM and the next tile's first.
    o = (acc * gl.expand_dims(1.0 / l_o, 1)).to(o_smem.dtype)
    o_smem.reshape([ROWS, HEAD_DIM]).store(o)
    fence_async_shared()
    # The copy engine drops rows past Lq.
    tma.async_copy_shared_to_global(o_desc, [off_b, off_h, row0, 0], o_smem)
    if STORE_LSE:
        # Natural-log LSE: m_i and log2(l_i) are in base 2, ln(x) = log2(x)·ln(2).
        lse = (m_i + gl.log2(l_i)) * 0.6931471805599453
        lse_ptrs = (LSE + off_b.to(gl.int64) * stride_lb + off_h.to(gl.int64) * stride_lh
                    + rows)
        gl.store(lse_ptrs, lse, mask=rows < seqlen_q)


def tma_descriptor(t: torch.Tensor, rows: int) -> TensorDescriptor:
    """A Gluon TMA descriptor over ``t`` (B, H, L, D) fp16/bf16 with block [1, 1, rows, D]
    in the default NVMMA shared layout (the wgmma operand swizzle)."""
    dtype = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[t.dtype]
    block = [1, 1, rows, t.shape[3]]
    layout = gl.NVMMASharedLayout.get_default_for(block, dtype)
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)


def kernel_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                lse: torch.Tensor, *, causal: bool, qk_scale: float, causal_offset: int,
                heads_per_group: int, store_lse: bool, block_m: int, block_n: int,
                num_stages: int, num_warps: int) -> KernelCall:
    """The launch of :func:`attn_fwd_gluon_kernel` on these tensors, as data (nothing runs).

    Reads only shapes, strides, dtype and addresses, so meta tensors do
    (:func:`flashrepro.select.select` calls it).

    Args:
        q, o: (B, H, Lq, D) fp16/bf16; k, v: (B, H_kv, Lk, D), H a multiple of H_kv; all four
            TMA-addressable (checked by the caller), D 64 or 128. o is written.
        lse: (B, H, Lq) fp32 (or a view with those strides), written (natural log) when
            ``store_lse``.
        qk_scale: sm_scale·log2(e). causal_offset: key j is visible to row i iff
            j <= i + causal_offset (>= 0 here). heads_per_group: see the program order in
            :mod:`flashrepro.kernels.fwd`.
        block_m, block_n, num_stages, num_warps: the launch (``KernelConfig`` fields).
    """
    b, h, lq, d = q.shape
    lk = k.shape[2]
    grid = (b * h * triton.cdiv(lq, block_m),)
    return KernelCall(attn_fwd_gluon_kernel, grid, (
        tma_descriptor(q, block_m), tma_descriptor(k, block_n), tma_descriptor(v, block_n),
        tma_descriptor(o, block_m), lse,
        lse.stride(0), lse.stride(1),
        b, h, h // k.shape[1], heads_per_group, lq, lk, causal_offset, qk_scale,
    ), dict(HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, NUM_STAGES=num_stages, CAUSAL=causal,
            STORE_LSE=store_lse, num_warps=num_warps))
