"""FlashAttention forward for Hopper (sm_90) in Gluon, warp-specialized and persistent as in
FlashAttention-3.

Same algorithm, semantics and softmax as :mod:`flashrepro.kernels.fwd_gluon` (its functions are
reused), with FA3's other means (J. Shah et al., "FlashAttention-3", 2024, sections 3.1-3.2):

- Producer/consumer warp specialization. One producer warp issues every TMA load; two (or three)
  consumer warpgroups only compute. A consumer hands a K or V slot back by arriving on that slot's
  "empty" mbarrier as soon as the wgmma that read it has finished, so the producer refills it
  without a CTA-wide barrier (in :mod:`~flashrepro.kernels.fwd_gluon` the loads sit behind
  ``bar.sync`` across all warps, which keeps two warpgroups in lockstep).
- Register reallocation: the producer's warpgroup gives its registers up (``setmaxnreg`` 24)
  so each consumer can hold S, P and O of a 64 x BLOCK_N tile (FA3's splits: 240, or 160 of 3).
- Ping-pong: the consumers take turns issuing their GEMMs (round robin), so one's softmax runs
  while another's GEMMs use the tensor cores. The turn passes on a named barrier per
  consumer, as FA3's warp-scheduler barrier: a consumer waits with ``bar.sync`` and passes
  with ``bar.arrive``, each thread on its own. (An mbarrier turn costs a warpgroup
  ``bar.sync`` before each arrival, which Gluon inserts so that one thread can arrive for all
  128: up to 2 % slower, equal at the article causal problem;
  lab/2026-11-29-turn-next-q-epilogue/.)
- In the 192x128 tile (three consumers, 128-key blocks) the softmax takes each row's max as a
  tree (``ROW_MAX_TREE``, :func:`row_max_tree`).
- Conditional rescaling (FlashAttention-4's, T. Dao et al., 2025): in the loop a row's
  reference max lags its running max by up to MAX_LAG (2^8 in P), so after most blocks no row
  of a warp has moved and the warp skips multiplying O by alpha (a vote and one branch).
- Persistent grid: a program loops over tiles; slot and phase counters run on across tiles,
  and each consumer has two Q buffers, so the producer loads the next tile's Q, K and V while
  the consumers finish this one, and a tile's output leaves through its own shared-memory
  buffer while the next tile computes. Tiles go to programs in "snake" order (forwards in even
  rounds, backwards in odd ones): under a causal mask the tiles come heaviest first, so the
  program with a round's heaviest tile gets the next round's lightest. With DYNAMIC_SCHEDULE
  (``KernelConfig.dynamic_schedule``) the producer instead claims each next tile, in the same
  order, from a global atomic counter (FA3's DynamicPersistentTileScheduler) and hands its
  index to the consumers beside the Q tile. Without a causal mask (equal tiles), SPLIT_TAIL
  (``KernelConfig.split_tail``) shares the last two rounds' tiles out as equal runs of key
  blocks, so no program idles through the last round (:func:`_split_tail`); the two parts of
  a split tile merge through scratch (:func:`_finish_part`).

A tile is 128 query rows (two consumers; three give FA3's 192-row tile for D = 64, config
fa3-ws3); consumer warpgroup c owns rows [64·c, 64·c + 64) of it, with its own Q tile,
running max/sum and accumulator, and all consumers read the same K/V slots. Two consumers
walk the tile's key range (that of its last row; under a causal mask blocks right of a row's
diagonal are masked to zero for that row); of three, each computes only the blocks its own
rows see, then hands the later slots and turns on. Each consumer keeps the intra-warpgroup
overlap of :mod:`flashrepro.kernels.fwd_gluon`: the softmax of S_j runs while
P_{j-1}·V_{j-1} is on the tensor cores.

Scope as :mod:`flashrepro.kernels.fwd_gluon` (:func:`flashrepro.select.select` checks it). Measured
on the H200: lab/2026-11-29-warp-specialization/ to lab/2026-11-29-conditional-rescaling/. The
synchronization is checked on the CPU by running this file's producer and consumer against a model
of warps and barriers (tests/test_ws_protocol.py).
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from flashrepro.counters import MIN_COUNTERS
from flashrepro.kernels.call import SCRATCH, STREAM_COUNTER, KernelCall
from flashrepro.kernels.fwd import tile_coords
from flashrepro.kernels.fwd_gluon import (
    _key_blocks,
    _softmax_block,
    store_output,
    tma_descriptor,
)

CONSUMER_ROWS = gl.constexpr(64)  # query rows per consumer warpgroup: one wgmma M tile
Q_BUFFERS = gl.constexpr(2)  # Q tiles per consumer: the next tile's loads during this one
PRODUCER_REGS = gl.constexpr(24)  # setmaxnreg floor, as FA3's producer warpgroup
# Registers per thread by consumer count n: (each consumer's after setmaxnreg, every thread's
# at launch). (n + 1) warpgroups (the producer warp takes one's slot) share the 64 Ki register
# file at launch; setmaxnreg then moves the producer warpgroup's share to the consumers:
# 128·(2·240 + 24) = 64512 <= 12·32·168 (FA3's split with two consumers), and
# 128·(3·160 + 24) = 64512 <= 16·32·128 (FA3's three consumers of its D = 64 tile).
REGISTERS = {2: (240, 168), 3: (160, 128)}
# Named barriers TURN_BARRIER + c: consumer c may issue its GEMMs. Gluon's partitions use
# ids 0-2 (warp_specialize's setup, each partition's warpgroup barrier).
TURN_BARRIER = gl.constexpr(8)
# In the loop a row's reference max lags its running max by up to this (log2 units): P <= 2^8,
# and O is rescaled only in warps where a row's max moved (fwd_gluon._running_max).
MAX_LAG = gl.constexpr(8.0)


@gluon.constexpr_function
def row_max_tree(num_consumers, block_n):
    """Whether the consumers take each row's max as a tree
    (:func:`~flashrepro.kernels.fwd_gluon._row_max`): with three consumers and 128-key blocks
    (the 192x128 tile), where it measured 1.2-2.0 % faster on the H200; with two consumers it
    was neutral at D = 64 and 1-3 % slower at D = 128, at 192x64 1 % slower
    (lab/2026-12-03-row-max-tree/)."""
    return num_consumers == 3 and block_n == 128


@gluon.jit
def _per_thread_ids(barrier_id):
    """``barrier_id`` once per thread of a warpgroup: the operand of the inline PTX below,
    which Gluon runs once per tensor element (Gluon has no named-barrier op)."""
    per_thread: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.full([128], barrier_id, gl.int32, layout=per_thread)


@gluon.jit
def _wait_turn(CONSUMER: gl.constexpr):
    """Block until the previous consumer has passed the turn to ``CONSUMER``: ``bar.sync`` on
    its named barrier for 256 threads, its own 128 and the passing consumer's 128."""
    gl.inline_asm_elementwise("bar.sync $1, 256; mov.b32 $0, $1;", "=r,r",
                              [_per_thread_ids(TURN_BARRIER + CONSUMER)], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def _pass_turn(CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr):
    """Pass the turn to the next consumer (round robin): each thread arrives on its named
    barrier and goes on without waiting."""
    gl.inline_asm_elementwise("bar.arrive $1, 256; mov.b32 $0, $1;", "=r,r",
                              [_per_thread_ids(TURN_BARRIER + (CONSUMER + 1) % NUM_CONSUMERS)],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _rescale_moved_rows(acc, alpha, m_old, m_new):
    """``acc`` (64 x HEAD_DIM, a warpgroup's wgmma accumulator) times each row's alpha, in the
    warps where some row's reference max moved (``m_new != m_old``); elsewhere alpha is exactly
    1 and the warp skips the multiplies. Each thread holds two rows: it ORs their flags, the
    warp votes (``vote.sync.any``), and one warp-uniform branch (``bra.uni``) jumps over the
    thread's HEAD_DIM / 2 products (lab/2026-11-29-conditional-rescaling/)."""
    o_rows: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    warp_moved = gl.inline_asm_elementwise(
        "{ .reg .pred p, q; .reg .b32 f; or.b32 f, $2, $3; setp.ne.u32 p, f, 0; "
        "vote.sync.any.pred q, p, 0xffffffff; selp.u32 $0, 1, 0, q; mov.b32 $1, $0; }",
        "=r,=r,r,r", [(m_new != m_old).to(gl.int32)], dtype=gl.int32, is_pure=True, pack=2)
    alpha_2d = gl.expand_dims(gl.convert_layout(alpha, o_rows), 1)
    moved_2d = gl.expand_dims(gl.convert_layout(warp_moved, o_rows), 1)
    PER_THREAD: gl.constexpr = acc.type.shape[1] // 2  # 64·HEAD_DIM elements over 128 threads
    return gl.inline_asm_elementwise(
        _rescale_ptx(PER_THREAD), _rescale_constraints(PER_THREAD), [acc, alpha_2d, moved_2d],
        dtype=gl.float32, is_pure=True, pack=PER_THREAD)


@gluon.constexpr_function
def _rescale_ptx(n):
    """PTX for :func:`_rescale_moved_rows`: outputs $0..$(n-1), then n accumulator elements,
    their n alphas and n (warp-uniform) flags as inputs."""
    muls = " ".join(f"mul.f32 ${i}, ${n + i}, ${2 * n + i};" for i in range(n))
    moves = " ".join(f"mov.b32 ${i}, ${n + i};" for i in range(n))
    return ("{ .reg .pred p; setp.ne.u32 p, $" + str(3 * n) + ", 0; @!p bra.uni SKIP; " + muls
            + " bra.uni DONE; SKIP: " + moves + " DONE: }")


@gluon.constexpr_function
def _rescale_constraints(n):
    return ",".join(["=r"] * n + ["r"] * (3 * n))


@gluon.jit
def _tile_blocks(tile, num_batch, num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k,
                 causal_offset, TILE_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 CAUSAL: gl.constexpr):
    """Tile ``tile``'s (start_m, off_b, off_h, off_hkv) and its number of key blocks: up to
    its last row's diagonal under a causal mask."""
    start_m, off_b, off_h, off_hkv = tile_coords(tile, num_batch, num_heads, kv_group,
                                                 heads_per_group, seqlen_q, TILE_M)
    _, n_blocks = _key_blocks(start_m * TILE_M, TILE_M, seqlen_k, causal_offset, BLOCK_N,
                              CAUSAL)
    return start_m, off_b, off_h, off_hkv, n_blocks


@gluon.jit
def _num_local_tiles(num_tiles):
    """How many tiles this program takes under :func:`_schedule_tile`'s order."""
    nprog = gl.num_programs(0)
    rounds = num_tiles // nprog  # full rounds: every program takes one tile in each
    rem = num_tiles - rounds * nprog  # tiles of the last, partial round
    # In an odd round the order runs backwards, so the partial round's tiles fall to the
    # last `rem` programs instead of the first.
    pos = gl.program_id(0) + (rounds & 1) * (nprog - 1 - 2 * gl.program_id(0))
    return rounds + (pos < rem).to(gl.int32)


@gluon.jit
def _schedule_tile(local):
    """The tile of this program's round ``local``: round r takes tiles [r·G, r·G + G) of
    :func:`flashrepro.kernels.fwd.tile_coords`' order (G programs), forwards in even rounds
    and backwards in odd ones ("snake"). Tiles come heaviest first, so under a causal mask
    the program that had the heaviest tile of one round gets the lightest of the next."""
    nprog = gl.num_programs(0)
    return local * nprog + gl.program_id(0) + (local & 1) * (nprog - 1 - 2 * gl.program_id(0))


@gluon.jit
def _split_tail(num_tiles, n_blocks):
    """Split-tail schedule (non-causal, every tile ``n_blocks`` key blocks): (rounds, first,
    end). The program takes :func:`_schedule_tile`'s tiles of rounds [0, rounds), then key
    blocks [first, end) of the remaining tiles' blocks laid end to end, its equal share (as
    stream-K's data-parallel + stream-K hybrid, M. Osama et al., 2023). Without it the last
    round of B·H·cdiv(Lq, TILE_M) equal tiles on G programs leaves G - (tiles mod G) programs
    idle. The split covers the last partial round and the full one before it, so each share
    is at least ``n_blocks`` and a tile is split between at most two programs."""
    nprog = gl.num_programs(0)
    rounds = num_tiles // nprog
    if num_tiles % nprog != 0:
        rounds -= 1
    tail_blocks = (num_tiles - rounds * nprog).to(gl.int64) * n_blocks
    pid = gl.program_id(0)
    first = (pid * tail_blocks // nprog).to(gl.int32)
    end = ((pid + 1) * tail_blocks // nprog).to(gl.int32)
    return rounds, first, end


@gluon.jit
def _tail_segment(b, end, n_blocks, rounds):
    """The part of the split tail that starts at its block ``b`` (< ``end``, this program's
    share's end): (tile, its index in the tail, kb0, kb1), key blocks [kb0, kb1) of it."""
    t = b // n_blocks
    kb0 = b - t * n_blocks
    kb1 = gl.minimum(n_blocks, kb0 + end - b)
    return rounds * gl.num_programs(0) + t, t, kb0, kb1


@gluon.jit
def _claim_tile(tile_counter, num_tiles):
    """Dynamic schedule: this program's next tile, claimed from the launch's int32 counter with
    one atomic add (the first G tiles go to programs 0..G-1 unclaimed). Each program claims
    until it gets a tile past the last, once, so the claims take exactly the values
    0..num_tiles-1; the one that takes num_tiles - 1 is the launch's last and puts the counter
    back to 0 for the next launch (no host-side reset). Relaxed: the counter publishes no other
    memory, and the default (acq_rel) costs a GPU-wide fence and an L1 invalidation per claim
    (MEMBAR.ALL.GPU, CCTL.IVALL in the SASS); the next launch sees the reset at the kernel
    boundary."""
    claim = gl.atomic_add(tile_counter, 1, sem="relaxed")
    if claim == num_tiles - 1:
        gl.atomic_xchg(tile_counter, 0, sem="relaxed")
    return claim + gl.num_programs(0)


@gluon.jit
def _publish_tile(tile_smem, qb, tile):
    """Dynamic schedule (producer warp): write ``tile`` into Q buffer qb's index slot; the
    arrival on qb's "ready" barrier that follows makes it visible to the consumer."""
    one_warp: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    tile_smem.index(qb).store(gl.full([1], tile, gl.int32, layout=one_warp))


@gluon.jit
def _handed_tile(tile_smem, q_ready, qb, phase):
    """Dynamic schedule (consumer warpgroup): wait until Q buffer qb is ready, then read the
    tile the producer wrote into its index slot (past the last tile: no more work)."""
    mbarrier.wait(q_ready.index(qb), phase)
    one_warpgroup: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.max(tile_smem.index(qb).load(one_warpgroup), axis=0)


@gluon.jit
def _load_tile(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, bars, num_batch, num_heads,
               kv_group, heads_per_group, seqlen_q, seqlen_k, causal_offset, tile, local, it,
               tile_smem, CAUSAL: gl.constexpr, DYNAMIC_SCHEDULE: gl.constexpr, kb0=0,
               kb1=None):
    """The producer's work for one tile, this program's ``local``-th: each consumer's Q tile
    into that consumer's free Q buffer, then K_j and V_j into the next slot as soon as the
    consumers have handed it back, for key blocks j in [kb0, kb1) (None: the tile's last).
    ``it``: key blocks issued before it; returns the count after it."""
    q_ready, q_empty, k_ready, v_ready, k_empty, v_empty = bars
    NUM_STAGES: gl.constexpr = k_smem.type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    NUM_CONSUMERS: gl.constexpr = q_smem.type.shape[0] // Q_BUFFERS
    TILE_M: gl.constexpr = CONSUMER_ROWS * NUM_CONSUMERS
    start_m, off_b, off_h, off_hkv, n_blocks = _tile_blocks(
        tile, num_batch, num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k,
        causal_offset, TILE_M, BLOCK_N, CAUSAL)
    if kb1 is None:
        kb1 = n_blocks
    # Q buffer (c, local % 2): its previous use was this program's tile before last, so
    # the wait rarely blocks. An mbarrier starts with its phase-1 wait already complete,
    # so the first wait on each "empty" barrier passes at once.
    for c in gl.static_range(NUM_CONSUMERS):
        qb = c * Q_BUFFERS + local % Q_BUFFERS
        mbarrier.wait(q_empty.index(qb), ((local // Q_BUFFERS) & 1) ^ 1)
        if DYNAMIC_SCHEDULE:
            _publish_tile(tile_smem, qb, tile)
        mbarrier.expect(q_ready.index(qb), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            q_desc, [off_b, off_h, (start_m * NUM_CONSUMERS + c) * CONSUMER_ROWS, 0],
            q_ready.index(qb), q_smem.index(qb))
    for j in range(kb0, kb1):
        slot = it % NUM_STAGES
        empty_phase = ((it // NUM_STAGES) & 1) ^ 1
        mbarrier.wait(k_empty.index(slot), empty_phase)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [off_b, off_hkv, j * BLOCK_N, 0],
                                        k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_empty.index(slot), empty_phase)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [off_b, off_hkv, j * BLOCK_N, 0],
                                        v_ready.index(slot), v_smem.index(slot))
        it += 1
    return it


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, bars, num_batch, num_heads,
              kv_group, heads_per_group, seqlen_q, seqlen_k, causal_offset, num_tiles,
              CAUSAL: gl.constexpr, tile_counter=None, tile_smem=None):
    """One warp: each of this program's tiles (:func:`_load_tile`). Slots and phases run on
    across tiles, so the next tile's Q and first blocks load while the consumers finish this
    one. Static schedule: the tiles of :func:`_schedule_tile`. Dynamic: this program's tile of
    the first wave, then a tile claimed (:func:`_claim_tile`) once this one's loads are all
    issued, as FA3's DynamicPersistentTileScheduler; each Q buffer carries its tile's index to
    its consumer, and a last index past the tiles tells the consumers to stop (``tile_smem``
    and ``tile_counter`` given: a constexpr flag would reach a worker partition as a tensor).
    Split tail (``tile_counter`` alone given): the static rounds of :func:`_split_tail`, then
    this program's share of the tail's key blocks."""
    it = 0  # key blocks issued so far, over all tiles
    if tile_smem is not None:  # dynamic schedule
        q_ready, q_empty = bars[0], bars[1]
        NUM_CONSUMERS: gl.constexpr = q_smem.type.shape[0] // Q_BUFFERS
        tile = gl.program_id(0)
        local = 0
        while tile < num_tiles:
            it = _load_tile(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, bars, num_batch,
                            num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k,
                            causal_offset, tile, local, it, tile_smem, CAUSAL, True)
            tile = _claim_tile(tile_counter, num_tiles)
            local += 1
        for c in gl.static_range(NUM_CONSUMERS):  # the end: an index and no Q
            qb = c * Q_BUFFERS + local % Q_BUFFERS
            mbarrier.wait(q_empty.index(qb), ((local // Q_BUFFERS) & 1) ^ 1)
            _publish_tile(tile_smem, qb, tile)
            mbarrier.arrive(q_ready.index(qb), count=1)
    elif tile_counter is None:
        for local in range(_num_local_tiles(num_tiles)):
            it = _load_tile(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, bars, num_batch,
                            num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k,
                            causal_offset, _schedule_tile(local), local, it, None, CAUSAL,
                            False)
    else:  # split tail
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
        n_blocks = gl.cdiv(seqlen_k, BLOCK_N)
        rounds, b, end = _split_tail(num_tiles, n_blocks)
        local = 0
        while (local < rounds) | (b < end):
            if local < rounds:
                tile = _schedule_tile(local)
                kb0 = 0
                kb1 = n_blocks
            else:
                tile, _, kb0, kb1 = _tail_segment(b, end, n_blocks, rounds)
                b += kb1 - kb0
            it = _load_tile(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, bars, num_batch,
                            num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k,
                            causal_offset, tile, local, it, None, CAUSAL, False, kb0, kb1)
            local += 1


@gluon.jit
def _consumer_tile(o_desc, LSE, q_smem, k_smem, v_smem, o_tile, bars, stride_lb, stride_lh,
                   num_batch, num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k,
                   causal_offset, qk_scale, tile, local, final, it, cols0, s_zero,
                   CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr,
                   STORE_LSE: gl.constexpr, DYNAMIC_SCHEDULE: gl.constexpr, kb0=0, kb1=None,
                   split=None):
    """One consumer's work for one tile, this program's ``local``-th: its 64 query rows
    against the tile's key blocks [kb0, kb1) (None: its last), then their output (stored while
    the next tile runs; a part of a split tile goes to :func:`_finish_part` with ``split``).
    ``final``: this is the program's last tile and the last consumer (its last turn passes to
    nobody). ``it``: key blocks consumed before it; returns the count after it."""
    q_ready, q_empty, k_ready, v_ready, k_empty, v_empty = bars
    NUM_STAGES: gl.constexpr = k_smem.type.shape[0]
    BLOCK_N: gl.constexpr = k_smem.type.shape[3]
    HEAD_DIM: gl.constexpr = k_smem.type.shape[4]
    TILE_M: gl.constexpr = CONSUMER_ROWS * NUM_CONSUMERS
    ROW_MAX_TREE: gl.constexpr = row_max_tree(NUM_CONSUMERS, BLOCK_N)
    dtype: gl.constexpr = k_smem.dtype

    # -- layouts: wgmma accumulators of one warpgroup; P feeds P·V from registers as its A
    # operand, in the dot-operand layout of O's accumulator --
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

    start_m, off_b, off_h, _, n_blocks = _tile_blocks(
        tile, num_batch, num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k,
        causal_offset, TILE_M, BLOCK_N, CAUSAL)
    if kb1 is None:
        kb1 = n_blocks
    base = it - kb0  # block j's slot counter: base + j
    row0 = (start_m * NUM_CONSUMERS + CONSUMER) * CONSUMER_ROWS  # this warpgroup's rows
    # Blocks [0, n_full) need no mask for any of this warpgroup's rows, [n_own, n_blocks)
    # are masked for all of them (right of their diagonal): the tile's key range is its
    # last row's. Rows all past Lq (a ragged last tile) need only the first block.
    n_full, n_own = _key_blocks(row0, CONSUMER_ROWS, seqlen_k, causal_offset, BLOCK_N,
                                CAUSAL)
    n_own = gl.minimum(n_own, kb1)
    if row0 >= seqlen_q:
        n_own = kb0 + 1
    if NUM_CONSUMERS == 2:
        # Two consumers walk the whole range: skipping measured 2 % slower at the article
        # problem (tile-boundary code), and at BLOCK_N 128 a 128-row tile leaves a block to
        # skip only in a ragged last tile or at a causal offset that is no multiple of 128
        # (lab/2026-11-29-three-consumer-tile/).
        n_own = kb1
    rows = row0 + gl.arange(0, CONSUMER_ROWS, layout=row_layout)
    m_i = gl.full([CONSUMER_ROWS], float("-inf"), gl.float32, layout=row_layout)
    acc = gl.zeros([CONSUMER_ROWS, HEAD_DIM], gl.float32, layout=o_layout)

    # -- the first block: S and its softmax, nothing to overlap with yet --
    qb = CONSUMER * Q_BUFFERS + local % Q_BUFFERS
    q = q_smem.index(qb).reshape([CONSUMER_ROWS, HEAD_DIM])
    slot = it % NUM_STAGES
    if not DYNAMIC_SCHEDULE:  # dynamic: passed in _handed_tile
        mbarrier.wait(q_ready.index(qb), (local // Q_BUFFERS) & 1)
    mbarrier.wait(k_ready.index(slot), (it // NUM_STAGES) & 1)
    # Ping-pong: the consumers take turns issuing their GEMMs, so one's GEMMs run while
    # the other's softmax does; a tile's first and last GEMMs take turns too, so the
    # order holds across tiles.
    _wait_turn(CONSUMER)
    k0 = k_smem.index(slot).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
    s = warpgroup_mma(q, k0, s_zero, use_acc=False, is_async=True)
    _pass_turn(CONSUMER, NUM_CONSUMERS)
    s = warpgroup_mma_wait(0, deps=(s,))
    mbarrier.arrive(k_empty.index(slot), count=1)
    p, alpha, m_i, l_i = _softmax_block(s, m_i, 0.0, kb0 * BLOCK_N + cols0, rows,
                                        kb0 < n_full, seqlen_k, causal_offset, qk_scale,
                                        CAUSAL, 0.0, ROW_MAX_TREE)
    p = gl.convert_layout(p.to(dtype), p_layout)

    # -- steady state: issue S_j and O += P_{j-1}·V_{j-1}, softmax S_j under the P·V;
    # hand each slot back the moment the wgmma that read it has finished --
    for j in range(kb0 + 1, n_own):
        slot = (base + j) % NUM_STAGES
        prev = (base + j - 1) % NUM_STAGES
        mbarrier.wait(k_ready.index(slot), ((base + j) // NUM_STAGES) & 1)
        mbarrier.wait(v_ready.index(prev), ((base + j - 1) // NUM_STAGES) & 1)
        _wait_turn(CONSUMER)
        kj = k_smem.index(slot).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
        s = warpgroup_mma(q, kj, s_zero, use_acc=False, is_async=True)
        v_prev = v_smem.index(prev).reshape([BLOCK_N, HEAD_DIM])
        acc = warpgroup_mma(p, v_prev, acc, is_async=True)
        _pass_turn(CONSUMER, NUM_CONSUMERS)
        s = warpgroup_mma_wait(1, deps=(s,))  # S_j done; P_{j-1}·V_{j-1} may still run
        mbarrier.arrive(k_empty.index(slot), count=1)
        m_old = m_i
        p_new, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, j * BLOCK_N + cols0, rows,
                                                j < n_full, seqlen_k, causal_offset,
                                                qk_scale, CAUSAL, MAX_LAG, ROW_MAX_TREE)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(v_empty.index(prev), count=1)
        acc = _rescale_moved_rows(acc, alpha, m_old, m_i)
        p = gl.convert_layout(p_new.to(dtype), p_layout)
    # Every Q·Kᵀ of this tile has finished: Q buffer qb is free for the tile after next.
    mbarrier.arrive(q_empty.index(qb), count=1)

    # -- its last block's P·V, then the epilogue: normalise once, store through TMA --
    last = base + n_own - 1
    mbarrier.wait(v_ready.index(last % NUM_STAGES), (last // NUM_STAGES) & 1)
    _wait_turn(CONSUMER)
    v_last = v_smem.index(last % NUM_STAGES).reshape([BLOCK_N, HEAD_DIM])
    acc = warpgroup_mma(p, v_last, acc, is_async=True)
    if not (final & (n_own == kb1)):
        _pass_turn(CONSUMER, NUM_CONSUMERS)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(v_empty.index(last % NUM_STAGES), count=1)

    tma.store_wait(pendings=0)  # the previous tile's output has left o_tile
    if split is None:
        store_output(acc, m_i, l_i, row0, rows, o_tile, o_desc, off_b, off_h, LSE, stride_lb,
                     stride_lh, seqlen_q, STORE_LSE)
    else:
        _finish_part(acc, m_i, l_i, row0, rows, o_tile, o_desc, off_b, off_h, LSE, stride_lb,
                     stride_lh, seqlen_q, STORE_LSE, split, (kb0 == 0) & (kb1 == n_blocks))

    # -- blocks none of its rows sees: hand the slots back once loaded (an earlier
    # arrival could count towards the slot's previous use) and pass the turn, so the
    # others' slots and turns go on as if it had computed them --
    for j in range(n_own, kb1):
        slot = (base + j) % NUM_STAGES
        phase = ((base + j) // NUM_STAGES) & 1
        mbarrier.wait(k_ready.index(slot), phase)
        mbarrier.arrive(k_empty.index(slot), count=1)
        mbarrier.wait(v_ready.index(slot), phase)
        mbarrier.arrive(v_empty.index(slot), count=1)
        _wait_turn(CONSUMER)
        if not (final & (j == kb1 - 1)):
            _pass_turn(CONSUMER, NUM_CONSUMERS)
    return base + kb1


@gluon.jit
def _finish_part(acc, m_i, l_i, row0, rows, o_tile, o_desc, off_b, off_h, LSE, stride_lb,
                 stride_lh, seqlen_q, STORE_LSE: gl.constexpr, split, whole):
    """The epilogue of a tile in the split-tail schedule (:func:`_split_tail`): a ``whole``
    tile's is :func:`~flashrepro.kernels.fwd_gluon.store_output`'s. Of a split tile's two
    parts, the one that finishes second merges the other's into its own and stores the output,
    as FlashAttention's split-KV combine (rescale both by their row max, add, normalise once).

    ``split``: (partials, tickets, mine, other, ticket). ``partials``: float32 slots of
    64·(D + 2) (O unnormalised, the row max in log2 units, the row sum), this part's slot
    ``mine`` and the other part's ``other``; ``tickets + ticket``: the tile's int32 at 0. A part
    that finds the ticket at 0 parks its state in its slot and takes the ticket; the one that
    finds it taken merges and puts it back to 0 (so the launch leaves it at 0). Taking the
    ticket after a barrier, with acq_rel, publishes the slot, as the decode kernel's split
    counters do (kernels/decode.py)."""
    if whole:
        store_output(acc, m_i, l_i, row0, rows, o_tile, o_desc, off_b, off_h, LSE, stride_lb,
                     stride_lh, seqlen_q, STORE_LSE)
        return
    partials, tickets, mine, other, ticket = split
    ROWS: gl.constexpr = acc.type.shape[0]
    HEAD_DIM: gl.constexpr = acc.type.shape[1]
    PART: gl.constexpr = ROWS * (HEAD_DIM + 2)
    o_rows: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    o_cols: gl.constexpr = gl.SliceLayout(0, acc.type.layout)
    offs = (gl.expand_dims(gl.arange(0, ROWS, layout=o_rows), 1) * HEAD_DIM
            + gl.expand_dims(gl.arange(0, HEAD_DIM, layout=o_cols), 0))
    r = gl.arange(0, ROWS, layout=m_i.type.layout)
    l_row = gl.convert_layout(gl.sum(l_i, 1), m_i.type.layout)
    merge = gl.atomic_add(tickets + ticket, 0, sem="acquire", scope="gpu") != 0
    if not merge:
        part = partials + mine.to(gl.int64) * PART
        gl.store(part + offs, acc)
        gl.store(part + ROWS * HEAD_DIM + r, m_i)
        gl.store(part + ROWS * HEAD_DIM + ROWS + r, l_row)
        gl.thread_barrier()
        merge = gl.atomic_add(tickets + ticket, 1, sem="acq_rel", scope="gpu") != 0
    if merge:
        gl.atomic_xchg(tickets + ticket, 0, sem="relaxed", scope="gpu")
        part = partials + other.to(gl.int64) * PART
        acc_o = gl.load(part + offs, cache_modifier=".cg")
        m_o = gl.load(part + ROWS * HEAD_DIM + r, cache_modifier=".cg")
        l_o = gl.load(part + ROWS * HEAD_DIM + ROWS + r, cache_modifier=".cg")
        m = gl.maximum(m_i, m_o)
        a = gl.exp2(m_i - m)
        a_o = gl.exp2(m_o - m)
        acc = (acc * gl.expand_dims(gl.convert_layout(a, o_rows), 1)
               + acc_o * gl.expand_dims(gl.convert_layout(a_o, o_rows), 1))
        store_output(acc, m, gl.expand_dims(l_row * a + l_o * a_o, 1), row0, rows, o_tile,
                     o_desc, off_b, off_h, LSE, stride_lb, stride_lh, seqlen_q, STORE_LSE)


@gluon.jit
def _consumer(o_desc, LSE, q_smem, k_smem, v_smem, o_smem, bars, stride_lb, stride_lh,
              num_batch, num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k,
              causal_offset, qk_scale, num_tiles, CONSUMER: gl.constexpr,
              CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, tile_smem=None, tile_counter=None,
              partials=None):
    """One warpgroup: each of this program's tiles (:func:`_consumer_tile`), from
    :func:`_schedule_tile` (static schedule; with ``partials`` then its share of
    :func:`_split_tail`, parts finished through ``tile_counter`` and ``partials``) or, dynamic,
    as the producer hands them over in each Q buffer's index slot (``tile_smem`` given), until
    one past the last tile."""
    q_ready = bars[0]
    BLOCK_N: gl.constexpr = k_smem.type.shape[3]
    NUM_CONSUMERS: gl.constexpr = o_smem.type.shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)

    o_tile = o_smem.index(CONSUMER)
    cols0 = gl.arange(0, BLOCK_N, layout=col_layout)
    s_zero = gl.zeros([CONSUMER_ROWS, BLOCK_N], gl.float32, layout=s_layout)
    it = 0  # key blocks consumed so far, over all tiles
    if CONSUMER == NUM_CONSUMERS - 1:
        _pass_turn(CONSUMER, NUM_CONSUMERS)  # consumer 0 goes first
    if tile_smem is not None:  # dynamic schedule
        local = 0
        qb = CONSUMER * Q_BUFFERS
        tile = _handed_tile(tile_smem, q_ready, qb, 0)
        while tile < num_tiles:
            it = _consumer_tile(o_desc, LSE, q_smem, k_smem, v_smem, o_tile, bars, stride_lb,
                                stride_lh, num_batch, num_heads, kv_group, heads_per_group,
                                seqlen_q, seqlen_k, causal_offset, qk_scale, tile, local, False,
                                it, cols0, s_zero, CONSUMER, NUM_CONSUMERS, CAUSAL, STORE_LSE,
                                True)
            local += 1
            qb = CONSUMER * Q_BUFFERS + local % Q_BUFFERS
            tile = _handed_tile(tile_smem, q_ready, qb, (local // Q_BUFFERS) & 1)
        if CONSUMER == 0:
            _wait_turn(CONSUMER)  # the last consumer's last pass: none left pending
    else:
        # The program's last turn (its last consumer's last block) passes to nobody, so no
        # arrival is left pending on a named barrier. (Dynamic schedule: the last tile is
        # known only after it, so every turn passes and consumer 0 takes the last pass.)
        last_consumer = CONSUMER == NUM_CONSUMERS - 1
        if partials is None:
            num_local = _num_local_tiles(num_tiles)
            for local in range(num_local):
                final = last_consumer & (local + 1 >= num_local)
                it = _consumer_tile(o_desc, LSE, q_smem, k_smem, v_smem, o_tile, bars,
                                    stride_lb, stride_lh, num_batch, num_heads, kv_group,
                                    heads_per_group, seqlen_q, seqlen_k, causal_offset,
                                    qk_scale, _schedule_tile(local), local, final, it, cols0,
                                    s_zero, CONSUMER, NUM_CONSUMERS, CAUSAL, STORE_LSE, False)
        else:  # split tail: one loop over whole tiles and parts (one copy of the code)
            n_blocks = gl.cdiv(seqlen_k, BLOCK_N)
            rounds, b, end = _split_tail(num_tiles, n_blocks)
            pid = gl.program_id(0)
            local = 0
            while (local < rounds) | (b < end):
                if local < rounds:
                    tile = _schedule_tile(local)
                    t = 0
                    kb0 = 0
                    kb1 = n_blocks
                else:
                    tile, t, kb0, kb1 = _tail_segment(b, end, n_blocks, rounds)
                    b += kb1 - kb0
                # Slots by program: 2·pid + 1 for the part holding a tile's first block (the
                # last of this program's share), 2·pid for the other (its first). A tile's
                # other part is the next program's first or the previous program's last.
                head = 1 - gl.minimum(kb0, 1)  # 1 for the part holding block 0
                mine = 2 * pid + head
                other = head * (2 * pid + 2) + (1 - head) * (2 * pid - 1)
                split = (partials, tile_counter, mine * NUM_CONSUMERS + CONSUMER,
                         other * NUM_CONSUMERS + CONSUMER, t * NUM_CONSUMERS + CONSUMER)
                final = last_consumer & (local + 1 >= rounds) & (b >= end)
                it = _consumer_tile(o_desc, LSE, q_smem, k_smem, v_smem, o_tile, bars,
                                    stride_lb, stride_lh, num_batch, num_heads, kv_group,
                                    heads_per_group, seqlen_q, seqlen_k, causal_offset,
                                    qk_scale, tile, local, final, it, cols0, s_zero, CONSUMER,
                                    NUM_CONSUMERS, CAUSAL, STORE_LSE, False, kb0, kb1, split)
                local += 1
    tma.store_wait(pendings=0)


@gluon.jit
def attn_fwd_gluon_ws_kernel(
    q_desc, k_desc, v_desc, o_desc, LSE,
    stride_lb, stride_lh,
    num_batch, num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k, causal_offset,
    qk_scale,
    HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, DYNAMIC_SCHEDULE: gl.constexpr = False, tile_counter=None,
    SPLIT_TAIL: gl.constexpr = False, partials=None,
):
    """Persistent: G programs (at most one per tile) take the tiles of 64·NUM_CONSUMERS query
    rows in :func:`flashrepro.kernels.fwd.tile_coords`' order (heaviest first within each
    L2 head group), round by round in :func:`_schedule_tile`'s snake order, or with
    DYNAMIC_SCHEDULE each next tile in that order to the first program that asks
    (:func:`_claim_tile`); launched with num_warps=4 (the first consumer, the default
    partition). NUM_CONSUMERS 2 or 3 (with CONSUMER_REGS from :data:`REGISTERS`).

    q_desc/o_desc: 4-D TMA descriptors over (B, H, Lq, D), block [1, 1, 64, D];
    k_desc/v_desc over (B, H_kv, Lk, D), block [1, 1, BLOCK_N, D]. LSE is (B, H, Lq) fp32.
    tile_counter (DYNAMIC_SCHEDULE only): one int32 that is 0 at launch; the kernel leaves it
    at 0, so launches in one stream may share it, concurrent launches may not
    (:mod:`flashrepro.counters`). SPLIT_TAIL (no causal mask, static schedule): the last two
    rounds split as :func:`_split_tail` says; tile_counter then holds a ticket per tail tile
    and consumer (2·G·NUM_CONSUMERS int32 at 0, left at 0) and partials 2·G·NUM_CONSUMERS
    float32 slots of 64·(HEAD_DIM + 2) (:func:`_finish_part`).
    """
    dtype: gl.constexpr = q_desc.dtype
    TILE_M: gl.constexpr = CONSUMER_ROWS * NUM_CONSUMERS
    num_tiles = num_batch * num_heads * gl.cdiv(seqlen_q, TILE_M)

    # -- shared memory: two Q tiles and an output tile per consumer, K and V in NUM_STAGES
    # slots (224 KiB at D = 128, BLOCK_N = 128, 2 stages: sm_90 allows 227);
    # "ready" mbarriers complete on the TMA's bytes, "empty" ones on one arrival per consumer
    # (per Q tile: its consumer's) --
    q_smem = gl.allocate_shared_memory(
        dtype, [NUM_CONSUMERS * Q_BUFFERS, 1, 1, CONSUMER_ROWS, HEAD_DIM], q_desc.layout)
    o_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, 1, 1, CONSUMER_ROWS, HEAD_DIM],
                                       o_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, 1, BLOCK_N, HEAD_DIM],
                                       k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, 1, BLOCK_N, HEAD_DIM],
                                       v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS * Q_BUFFERS, 1],
                                        mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS * Q_BUFFERS, 1],
                                        mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for qb in gl.static_range(NUM_CONSUMERS * Q_BUFFERS):
        mbarrier.init(q_ready.index(qb), count=1)
        mbarrier.init(q_empty.index(qb), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)
        mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)
    bars = (q_ready, q_empty, k_ready, v_ready, k_empty, v_empty)
    if DYNAMIC_SCHEDULE:  # each Q buffer's tile index, from the producer to its consumer
        tile_smem = gl.allocate_shared_memory(
            gl.int32, [NUM_CONSUMERS * Q_BUFFERS, 1],
            gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]))
    else:
        tile_smem: gl.constexpr = None

    producer_args = (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, bars, num_batch,
                     num_heads, kv_group, heads_per_group, seqlen_q, seqlen_k, causal_offset,
                     num_tiles, CAUSAL)
    # (no * here: Triton's frontend)
    if DYNAMIC_SCHEDULE:
        producer_args = producer_args + (tile_counter, tile_smem)  # noqa: RUF005
    elif SPLIT_TAIL:
        producer_args = producer_args + (tile_counter,)  # noqa: RUF005
    # Consumer 0 is the default partition (the launch's 4 warps); the other consumers and the
    # producer warp are workers, each with its register budget. The consumers' arguments are
    # written out: Triton 3.6's frontend takes neither *args nor a tuple concatenated with a
    # constexpr here.
    if NUM_CONSUMERS == 2:
        gl.warp_specialize([
            (_consumer, (o_desc, LSE, q_smem, k_smem, v_smem, o_smem, bars, stride_lb,
                         stride_lh, num_batch, num_heads, kv_group, heads_per_group, seqlen_q,
                         seqlen_k, causal_offset, qk_scale, num_tiles, gl.constexpr(0), CAUSAL,
                         STORE_LSE, tile_smem, tile_counter, partials)),
            (_consumer, (o_desc, LSE, q_smem, k_smem, v_smem, o_smem, bars, stride_lb,
                         stride_lh, num_batch, num_heads, kv_group, heads_per_group, seqlen_q,
                         seqlen_k, causal_offset, qk_scale, num_tiles, gl.constexpr(1), CAUSAL,
                         STORE_LSE, tile_smem, tile_counter, partials)),
            (_producer, producer_args),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (o_desc, LSE, q_smem, k_smem, v_smem, o_smem, bars, stride_lb,
                         stride_lh, num_batch, num_heads, kv_group, heads_per_group, seqlen_q,
                         seqlen_k, causal_offset, qk_scale, num_tiles, gl.constexpr(0), CAUSAL,
                         STORE_LSE, tile_smem, tile_counter, partials)),
            (_consumer, (o_desc, LSE, q_smem, k_smem, v_smem, o_smem, bars, stride_lb,
                         stride_lh, num_batch, num_heads, kv_group, heads_per_group, seqlen_q,
                         seqlen_k, causal_offset, qk_scale, num_tiles, gl.constexpr(1), CAUSAL,
                         STORE_LSE, tile_smem, tile_counter, partials)),
            (_consumer, (o_desc, LSE, q_smem, k_smem, v_smem, o_smem, bars, stride_lb,
                         stride_lh, num_batch, num_heads, kv_group, heads_per_group, seqlen_q,
                         seqlen_k, causal_offset, qk_scale, num_tiles, gl.constexpr(2), CAUSAL,
                         STORE_LSE, tile_smem, tile_counter, partials)),
            (_producer, producer_args),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])


def kernel_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                lse: torch.Tensor, *, causal: bool, qk_scale: float, causal_offset: int,
                heads_per_group: int, store_lse: bool, block_n: int, num_stages: int,
                num_programs: int | None, num_consumers: int = 2,
                dynamic_schedule: bool = False, split_tail: bool = False) -> KernelCall:
    """The launch of :func:`attn_fwd_gluon_ws_kernel` on these tensors, as data (nothing
    runs): tiles of 64·num_consumers rows, 4 warps per consumer and one producer warp.

    Args:
        q, k, v, o, lse, causal, qk_scale, causal_offset, heads_per_group, store_lse: as
            :func:`flashrepro.kernels.fwd_gluon.kernel_call`.
        block_n, num_stages: the K/V tile and slot count (``KernelConfig`` fields).
        num_programs: the persistent grid, at most one program per tile (the caller passes
            the SM count: the kernel's registers allow one program per SM); None: one per tile.
        num_consumers: consumer warpgroups, 2 (128-row tiles, ``KernelConfig`` BLOCK_M 128
            with 8 warps) or 3 (FA3's 192-row tile for D = 64, 160 registers per consumer:
            BLOCK_M 192 with 12 warps, config ``fa3-ws3``).
        dynamic_schedule: the persistent programs claim tiles from a global counter instead of
            the static snake order (``KernelConfig.dynamic_schedule``). The counter is the
            keyword argument :data:`~flashrepro.kernels.call.STREAM_COUNTER`, an int32 at 0
            that the kernel leaves at 0; the returned call holds an empty placeholder (no
            memory), which the launcher replaces by its stream's counter
            (``KernelCall.with_counter``, :func:`flashrepro.counters.stream_counters`).
        split_tail: the persistent programs split the last two rounds' tiles into equal
            shares of key blocks (:func:`_split_tail`; ``KernelConfig.split_tail``). It takes
            a stream counter as ``dynamic_schedule`` does (one ticket per tile and consumer of
            the tail, at most :data:`~flashrepro.counters.MIN_COUNTERS`) and float32 scratch,
            the keyword argument :data:`~flashrepro.kernels.call.SCRATCH`, of
            ``KernelCall.scratch`` elements, which the launcher replaces by its stream's
            (:func:`flashrepro.counters.stream_scratch`).

    Raises:
        ValueError: num_consumers not 2 or 3, or 3 with D other than 64 (its registers);
            dynamic_schedule without num_programs (it needs the persistent grid); split_tail
            with causal, dynamic_schedule or without num_programs (its tiles must be equal,
            its grid persistent).
    """
    b, h, lq, d = q.shape
    if num_consumers not in REGISTERS or (num_consumers == 3 and d != 64):
        raise ValueError(f"num_consumers must be 2, or 3 with D = 64; got {num_consumers} "
                         f"with D = {d}")
    if dynamic_schedule and num_programs is None:
        raise ValueError("dynamic_schedule needs num_programs (a persistent grid), got None")
    if split_tail and (causal or dynamic_schedule or num_programs is None):
        raise ValueError("split_tail needs a non-causal, static persistent launch (num_programs "
                         f"given); got causal={causal}, dynamic_schedule={dynamic_schedule}, "
                         f"num_programs={num_programs}")
    consumer_regs, maxnreg = REGISTERS[num_consumers]
    lk = k.shape[2]
    tiles = b * h * triton.cdiv(lq, CONSUMER_ROWS.value * num_consumers)
    grid = (tiles if num_programs is None else min(tiles, num_programs),)
    kwargs = dict(HEAD_DIM=d, BLOCK_N=block_n, NUM_STAGES=num_stages, CAUSAL=causal,
                  STORE_LSE=store_lse, NUM_CONSUMERS=num_consumers, CONSUMER_REGS=consumer_regs,
                  num_warps=4, maxnreg=maxnreg)
    # The dynamic schedule's counter; the split tail's tickets, one per tail tile (< 2·G) and
    # consumer. Placeholders here: the launcher passes its stream's (and scratch).
    counters = 1 if dynamic_schedule else 2 * grid[0] * num_consumers if split_tail else 0
    scratch = 0
    if counters:
        kwargs[STREAM_COUNTER] = torch.empty(0, dtype=torch.int32, device=q.device)
    if dynamic_schedule:
        kwargs["DYNAMIC_SCHEDULE"] = True
    if split_tail:
        if counters > MIN_COUNTERS:
            raise ValueError(f"split_tail takes up to {MIN_COUNTERS // (2 * num_consumers)} "
                             f"programs, got {grid[0]}")
        kwargs["SPLIT_TAIL"] = True
        # Two slots per program and consumer (the part at each end of its share).
        scratch = 2 * grid[0] * num_consumers * CONSUMER_ROWS.value * (d + 2)
        kwargs[SCRATCH] = torch.empty(0, dtype=torch.float32, device=q.device)
    return KernelCall(attn_fwd_gluon_ws_kernel, grid, (
        tma_descriptor(q, CONSUMER_ROWS.value), tma_descriptor(k, block_n),
        tma_descriptor(v, block_n), tma_descriptor(o, CONSUMER_ROWS.value),
        lse, lse.stride(0), lse.stride(1),
        b, h, h // k.shape[1], heads_per_group, lq, lk, causal_offset, qk_scale,
    ), kwargs, scratch, counters)
