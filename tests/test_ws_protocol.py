"""The warp-specialized kernel's synchronization, on the CPU: its own source run through the
model of :mod:`tests.ws_protocol` (warps as threads, mbarrier phases, named-barrier turns,
asynchronous TMA loads and wgmma reads), and its index logic.

The GPU tests check the kernel's output; a race or a deadlock there shows up only under the
interleavings a GPU happens to run. Here random interleavings of random small launches (two
and three consumers, 1-5 tiles per program, ragged Lq/Lk, causal top-left and bottom-right,
GQA, 2-4 stages) must finish with every check of :mod:`tests.ws_protocol` holding, and edits
that break the protocol (each a plausible slip in the three-consumer skip of e3dc9a1 or the
producer) must be caught: the checks can fail. A mutant's text must match the kernel exactly
once, so a rewrite of those lines asks for the mutant to be rewritten with it.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest

from tests.ws_protocol import I, Params, Sim, SimError, random_params

RUNS = 18


@pytest.mark.parametrize("seed", range(RUNS))
def test_random_launches_keep_the_protocol(seed: int) -> None:
    rng = random.Random(seed)
    p = random_params(rng, consumers=3 if seed % 3 else 2)
    Sim(p, seed).run()


# Launches that exercise the skip: causal 192-row tiles whose first consumers see fewer key
# blocks than the tile (bottom-right too), a ragged tile with consumers past Lq, a program
# whose last tile's last consumer skips (its final turn is in the skip loop), several tiles
# per program so slots and turns run on across tiles.
SKIP_LAUNCHES = [
    Params(1, 2, 1, 400, 400, True, 0, 64, 2, 3, 1, 1),
    Params(2, 1, 1, 330, 460, True, 130, 128, 3, 3, 2, 2),
    Params(1, 3, 3, 200, 200, False, 0, 64, 4, 3, 2, 3),
    Params(1, 2, 2, 450, 300, True, 0, 128, 2, 3, 2, 1),
    Params(1, 2, 2, 100, 300, False, 0, 64, 3, 3, 1, 2),
    Params(2, 1, 1, 120, 500, True, 380, 128, 2, 3, 2, 1),
    Params(1, 1, 1, 960, 64, False, 0, 64, 4, 3, 1, 1),  # 5 one-block tiles: Q runs ahead
]

MUTANTS = {
    "skip: arrive on k_empty before waiting for k_ready": (
        ("        mbarrier.wait(k_ready.index(slot), phase)\n"
         "        mbarrier.arrive(k_empty.index(slot), count=1)\n",
         "        mbarrier.arrive(k_empty.index(slot), count=1)\n"
         "        mbarrier.wait(k_ready.index(slot), phase)\n"),),
    "skip: no waits on ready": (
        ("        mbarrier.wait(k_ready.index(slot), phase)\n", ""),
        ("        mbarrier.wait(v_ready.index(slot), phase)\n", "")),
    "skip: the last turn passes too": (
        ("        if not (final & (j == kb1 - 1)):\n"
         "            _pass_turn(CONSUMER, NUM_CONSUMERS)\n",
         "        _pass_turn(CONSUMER, NUM_CONSUMERS)\n"),),
    "skip: no turns": (
        ("        _wait_turn(CONSUMER)\n"
         "        if not (final & (j == kb1 - 1)):\n"
         "            _pass_turn(CONSUMER, NUM_CONSUMERS)\n", ""),),
    "last P·V: withholds the pass on the last tile even when blocks follow": (
        ("    if not (final & (n_own == kb1)):\n", "    if not final:\n"),),
    "last P·V: always passes": (
        ("    if not (final & (n_own == kb1)):\n", "    if True:\n"),),
    "n_own one block short": (
        ("    if row0 >= seqlen_q:\n        n_own = kb0 + 1\n",
         "    if row0 >= seqlen_q:\n        n_own = kb0 + 1\n"
         "    n_own = gl.maximum(n_own - 1, 1)\n"),),
    "v_empty before the last P·V has finished": (
        ("    acc = warpgroup_mma_wait(0, deps=(acc,))\n"
         "    mbarrier.arrive(v_empty.index(last % NUM_STAGES), count=1)\n",
         "    mbarrier.arrive(v_empty.index(last % NUM_STAGES), count=1)\n"
         "    acc = warpgroup_mma_wait(0, deps=(acc,))\n"),),
    "producer: waits on empty one phase early": (
        ("        empty_phase = ((it // NUM_STAGES) & 1) ^ 1\n",
         "        empty_phase = (it // NUM_STAGES) & 1\n"),),
    "producer: refills a Q buffer without waiting": (
        ("\n        mbarrier.wait(q_empty.index(qb), ((local // Q_BUFFERS) & 1) ^ 1)\n", "\n"),),
}
DYNAMIC_MUTANTS = {
    "consumer reads its tile before the ready wait": (
        ("    mbarrier.wait(q_ready.index(qb), phase)\n"
         "    one_warpgroup: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])\n"
         "    return gl.max(tile_smem.index(qb).load(one_warpgroup), axis=0)\n",
         "    one_warpgroup: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])\n"
         "    tile = gl.max(tile_smem.index(qb).load(one_warpgroup), axis=0)\n"
         "    mbarrier.wait(q_ready.index(qb), phase)\n"
         "    return tile\n"),),
    "producer publishes the tile after its Q load": (
        ("        if DYNAMIC_SCHEDULE:\n            _publish_tile(tile_smem, qb, tile)\n", ""),
        ("            q_ready.index(qb), q_smem.index(qb))\n",
         "            q_ready.index(qb), q_smem.index(qb))\n"
         "        if DYNAMIC_SCHEDULE:\n            _publish_tile(tile_smem, qb, tile)\n")),
    "the counter is not reset": (
        ("        gl.atomic_xchg(tile_counter, 0, sem=\"relaxed\")\n", "        pass\n"),),
    "the first wave's tiles are claimed too": (
        ("        tile = gl.program_id(0)\n",
         "        tile = _claim_tile(tile_counter, num_tiles)\n"),),
    "the end is handed over without waiting for the Q buffer": (
        ("            mbarrier.wait(q_empty.index(qb), ((local // Q_BUFFERS) & 1) ^ 1)\n"
         "            _publish_tile", "            _publish_tile"),),
    "consumer 0 leaves the last pass pending": (
        ("            _wait_turn(CONSUMER)  # the last consumer's last pass: none left pending",
         "            pass"),),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_a_broken_protocol_is_caught(mutant: str) -> None:
    for seed, p in itertools.product(range(8), SKIP_LAUNCHES):
        try:
            Sim(p, seed, MUTANTS[mutant], strict=False).run()
        except SimError:
            return
    pytest.fail(f"mutant {mutant!r} ran clean on {len(SKIP_LAUNCHES) * 8} launches")


@pytest.mark.parametrize("p", SKIP_LAUNCHES, ids=str)
def test_skip_launches_keep_the_protocol(p: Params) -> None:
    for seed in range(3):
        Sim(p, seed).run()


@pytest.mark.parametrize("seed", range(RUNS))
def test_random_launches_keep_the_protocol_with_the_dynamic_schedule(seed: int) -> None:
    """Tiles claimed from the counter (KernelConfig.dynamic_schedule): each row block stored
    once, every check of the static schedule, the counter back at 0."""
    rng = random.Random(1000 + seed)
    Sim(random_params(rng, consumers=3 if seed % 3 else 2, dynamic=True), seed).run()


@pytest.mark.parametrize("p", SKIP_LAUNCHES, ids=str)
def test_skip_launches_keep_the_protocol_with_the_dynamic_schedule(p: Params) -> None:
    for seed in range(3):
        Sim(dataclasses.replace(p, dynamic=True), seed).run()


@pytest.mark.parametrize("mutant", DYNAMIC_MUTANTS)
def test_a_broken_dynamic_schedule_is_caught(mutant: str) -> None:
    for seed, p in itertools.product(range(8), SKIP_LAUNCHES):
        try:
            Sim(dataclasses.replace(p, dynamic=True), seed, DYNAMIC_MUTANTS[mutant],
                strict=False).run()
        except SimError:
            return
    pytest.fail(f"mutant {mutant!r} ran clean on {len(SKIP_LAUNCHES) * 8} launches")


def test_two_consumers_could_skip_too() -> None:
    """Two consumers walk the whole key range for speed only (e3dc9a1): the skip itself keeps
    the protocol with two, so the constant is no correctness guard."""
    edit = (("        n_own = kb1\n", "        n_own = n_own\n"),)
    rng = random.Random(1)
    for seed in range(6):
        Sim(random_params(rng, consumers=2), seed, edit).run()


def _n_own(fn: dict, row0: int, p: Params, n_blocks: int) -> int:
    """n_own as _consumer computes it."""
    _, n_own = fn["_key_blocks"](row0, 64, p.seqlen_k, p.causal_offset, p.block_n, p.causal)
    if row0 >= p.seqlen_q:
        n_own = 1
    return int(n_blocks if p.consumers == 2 else n_own)


@pytest.mark.parametrize("block_n", [64, 128])
def test_skipped_blocks_are_masked_for_all_rows(block_n: int) -> None:
    """For every 192-row tile of Lq, Lk up to ~3 tiles, causal top-left and bottom-right:
    1 <= n_own <= the tile's blocks and no row below Lq sees a key of a skipped block; on
    every 5th launch also (float64) each consumer's softmax over its keys [0, n_own·BLOCK_N),
    masked as the kernel masks, equals the softmax over all keys."""
    fn = Sim(Params(1, 1, 1, 1, 1, False, 0, block_n, 2, 3, 1), 0).fn
    rng = np.random.default_rng(block_n)
    launches = skipped = 0
    for lq, lk, causal in itertools.product(range(1, 600, 17), range(1, 700, 19), (False, True)):
        for off in ([0, lk - lq] if causal and lk > lq else [0]):
            p = Params(1, 1, 1, lq, lk, causal, off, block_n, 2, 3, 1)
            launches += 1
            numerics = launches % 5 == 0
            if numerics:
                q, k, v = (rng.standard_normal((n, 8)) for n in (lq, lk, lk))
                s = q @ k.T
                if causal:
                    s = np.where(np.arange(lk)[None] <= np.arange(lq)[:, None] + off, s,
                                 -np.inf)
                w = np.exp(s - s.max(1, keepdims=True))
                ref = (w / w.sum(1, keepdims=True)) @ v
            for start_m in range(-(-lq // 192)):
                _, n_blocks = fn["_key_blocks"](I(start_m * 192), 192, lk, off, block_n, causal)
                for c in range(3):
                    row0 = (start_m * 3 + c) * 64
                    n_own = _n_own(fn, row0, p, int(n_blocks))
                    assert 1 <= n_own <= int(n_blocks)
                    skipped += n_own < int(n_blocks)
                    if row0 >= lq:
                        continue
                    last_row = min(row0 + 64, lq) - 1  # sees the most keys
                    seen = min(lk - 1, last_row + off) if causal else lk - 1
                    assert seen < n_own * block_n  # no seen key in a skipped block
                    if numerics:
                        rows = np.arange(row0, last_row + 1)
                        cols = np.arange(min(n_own * block_n, lk))
                        ss = q[rows] @ k[cols].T
                        if causal:
                            ss = np.where(cols[None] <= rows[:, None] + off, ss, -np.inf)
                        ww = np.exp(ss - ss.max(1, keepdims=True))
                        out = (ww / ww.sum(1, keepdims=True)) @ v[cols]
                        np.testing.assert_allclose(out, ref[rows], rtol=0, atol=1e-12)
    assert skipped > 1000  # the skip is exercised, not vacuous


def test_the_snake_schedule_gives_each_tile_once() -> None:
    """_num_local_tiles and _schedule_tile: every tile to exactly one (program, round), for
    any number of programs up to the tile count."""
    fn = Sim(Params(1, 1, 1, 1, 1, False, 0, 64, 2, 3, 1), 0).fn
    gl = fn["_schedule_tile"].__globals__["gl"]
    for tiles in range(1, 64):
        for programs in range(1, tiles + 1):
            gl.num_programs = lambda _axis, g=programs: I(g)
            got = []
            for pid in range(programs):
                gl.program_id = lambda _axis, q=pid: I(q)
                got += [int(fn["_schedule_tile"](local))
                        for local in range(int(fn["_num_local_tiles"](tiles)))]
            assert sorted(got) == list(range(tiles)), (tiles, programs)


SPLIT_MUTANTS = {
    "split: a part runs one block into the next": (
        ("    kb1 = gl.minimum(n_blocks, kb0 + end - b)\n",
         "    kb1 = gl.minimum(n_blocks, kb0 + end - b + 1)\n"),),
    "split: the head part names the wrong other slot": (
        ("                other = head * (2 * pid + 2) + (1 - head) * (2 * pid - 1)\n",
         "                other = head * (2 * pid + 3) + (1 - head) * (2 * pid - 1)\n"),),
    "split: tickets by the launch's tile, not the tail's": (
        ("other * NUM_CONSUMERS + CONSUMER, t * NUM_CONSUMERS + CONSUMER)",
         "other * NUM_CONSUMERS + CONSUMER, tile * NUM_CONSUMERS + CONSUMER)"),),
    "split: slots three apart": (
        ("                mine = 2 * pid + head\n"
         "                other = head * (2 * pid + 2) + (1 - head) * (2 * pid - 1)\n",
         "                mine = 3 * pid + head\n"
         "                other = head * (3 * pid + 3) + (1 - head) * (3 * pid - 2)\n"),),
    "split: the tail starts a round late": (
        ("    if num_tiles % nprog != 0:\n        rounds -= 1\n", ""),),
}


@pytest.mark.parametrize("seed", range(RUNS))
def test_random_launches_keep_the_protocol_with_the_split_tail(seed: int) -> None:
    """The split tail (KernelConfig.split_tail): whole tiles, then parts of the last two
    rounds' tiles; each row block stored once with each key block summed once, the two parts of
    a split tile naming each other's slots and one ticket, and every check of the static
    schedule (turns, slots, phases) across parts."""
    rng = random.Random(2000 + seed)
    Sim(random_params(rng, consumers=3 if seed % 3 else 2, split=True), seed).run()


def test_the_split_tail_runs_split_tiles() -> None:
    """The random launches above split tiles in at least a third of the runs (each has a
    remainder to split and at least two key blocks per tile), so they test the parts."""
    split = 0
    for seed in range(RUNS):
        sim = Sim(random_params(random.Random(2000 + seed), 3 if seed % 3 else 2, split=True),
                  seed)
        sim.run()
        split += bool(sim.parts)
    assert 3 * split >= RUNS, f"{split} of {RUNS} runs split a tile"


@pytest.mark.parametrize("mutant", SPLIT_MUTANTS)
def test_a_broken_split_tail_is_caught(mutant: str) -> None:
    rng = random.Random(7)
    for seed in range(24):
        p = random_params(rng, consumers=3 if seed % 3 else 2, split=True)
        try:
            Sim(p, seed, SPLIT_MUTANTS[mutant], strict=False).run()
        except SimError:
            return
    pytest.fail(f"mutant {mutant!r} ran clean on 24 launches")
