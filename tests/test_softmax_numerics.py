"""The Gluon kernels' softmax functions, run on the CPU in float32 (numpy) from their source.

``fwd_gluon._running_max`` (FlashAttention-4's conditional rescaling, MAX_LAG 8 in the ws
kernel's loop) and ``fwd_gluon._thread_row_sums`` (experiment 22) only do elementwise float32
arithmetic, selects, reshapes and sums, so numpy gives their results bit for bit where the GPU
rounds the same way (IEEE float32 add/subtract and compare; in unmasked blocks ptxas fuses the
scaling of the block's max with ``_running_max``'s subtraction into one FFMA, which rounds once
where this rounds twice, as the FFMA that computes P does). The GPU suite checks parity on
realistic inputs; these check the bounds the kernels rely on over the whole float32 range.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from flashrepro.kernels.fwd_gluon_ws import MAX_LAG as WS_MAX_LAG
from tests.ws_protocol import KERNELS, _source_namespace

MAX_LAG = WS_MAX_LAG.value  # the ws kernel's


def _gluon_functions() -> dict:
    """fwd_gluon.py's functions with ``gl`` backed by numpy. ``max`` is ``np.fmax``'s
    reduction: the maximum that drops NaN unless every input is NaN, as Triton's (``maxnumf``,
    FMNMX)."""
    ns = _source_namespace(KERNELS / "fwd_gluon.py")
    ns["gl"] = types.SimpleNamespace(
        where=np.where, maximum=np.maximum, constexpr=object, static_range=range,
        static_assert=lambda cond: None if cond else pytest.fail("static_assert"),
        sum=lambda x, axis: _Tensor(np.asarray(x).sum(axis=axis, dtype=np.float32)),
        max=lambda x, axis: _Tensor(np.fmax.reduce(np.asarray(x), axis=axis)),
        convert_layout=lambda x, _layout: x, SliceLayout=lambda _dim, _parent: None)
    return ns


class _Tensor(np.ndarray):
    """A numpy array with the ``.type.shape`` (and a ``.type.layout``) a Gluon tensor has."""

    def __new__(cls, a: np.ndarray) -> _Tensor:
        return np.asarray(a).view(cls)

    @property
    def type(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(shape=list(self.shape), layout=None)


def _max_pairs() -> tuple[np.ndarray, np.ndarray]:
    """(m_i, m_block) float32 pairs: reference maxima over every binade a score can reach (2^-20
    to 2^40, both signs, each binade's first, a middle, and last values), each against block
    maxima a few float32 steps and 0-40 log2 units above and below it."""
    mags = np.ldexp(1.0, np.arange(-20, 41)).astype(np.float32)
    base = np.concatenate([mags, mags * np.float32(1.5), np.nextafter(mags, np.float32(0))])
    base = np.concatenate([base, -base, np.float32([0.0])])
    m_i, m_b = [], []
    for m in base:
        steps = [m]
        for _ in range(40):
            steps.append(np.nextafter(steps[-1], np.float32(np.inf)))
        offsets = (m + np.float32([-40, -8, -1, 0, 1, 7.5, 8, 8.5, 9, 15, 16, 17, 24, 32, 40]))
        blocks = np.concatenate([np.float32(steps), offsets.astype(np.float32)])
        m_i.append(np.full(blocks.shape, m, np.float32))
        m_b.append(blocks)
    return np.concatenate(m_i), np.concatenate(m_b)


def test_running_max_bounds_p_at_every_magnitude() -> None:
    """With MAX_LAG 8 the new reference max is the old or the block's, never lower than the
    old, and the block's max exceeds it by at most 8 (+ float32's rounding of 8): P <= 2^8,
    which float16 holds. ``m_block > m_i + 8`` broke this from |m_i| >= 2^27, where the sum
    rounds by up to 8 (P up to 2^16: inf in float16)."""
    running_max = _gluon_functions()["_running_max"]
    m_i, m_b = _max_pairs()
    m_new = running_max(m_i, m_b, MAX_LAG)
    assert m_new.dtype == np.float32 and m_new.shape == m_i.shape
    assert np.all((m_new == m_i) | (m_new == m_b))
    assert np.all(m_new >= m_i)
    lag = m_b.astype(np.float64) - m_new.astype(np.float64)  # exact: log2 of P's largest
    bound = MAX_LAG + float(np.spacing(np.float32(MAX_LAG))) / 2
    worst = np.argmax(lag)
    assert lag[worst] <= bound, (f"m_i {m_i[worst]!r}, block max {m_b[worst]!r}: P up to "
                                 f"2^{lag[worst]}")
    assert np.all(np.float16(np.exp2(np.minimum(lag, 16.0))) < np.inf)
    # Moves only where the block's max is more than MAX_LAG above: elsewhere alpha is exactly 1
    # and the ws kernel's warps skip O *= alpha.
    moved = m_new != m_i
    assert np.all(m_b[moved].astype(np.float64) - m_i[moved].astype(np.float64) > MAX_LAG)
    assert np.all(np.exp2(m_i[~moved] - m_new[~moved]) == 1.0)
    assert moved.any() and (~moved).any()


def test_running_max_without_lag_is_the_max() -> None:
    running_max = _gluon_functions()["_running_max"]
    m_i, m_b = _max_pairs()
    np.testing.assert_array_equal(running_max(m_i, m_b, 0.0), np.maximum(m_i, m_b))


def test_running_max_keeps_minus_inf_blocks_out() -> None:
    """A block masked for a whole row (max -inf) leaves its reference max where it was."""
    running_max = _gluon_functions()["_running_max"]
    m_i = np.float32([-3.0, 0.0, 1e9])
    np.testing.assert_array_equal(running_max(m_i, np.full(3, -np.inf, np.float32), MAX_LAG),
                                  m_i)


@pytest.mark.parametrize("block_n", [16, 32, 64, 128])
def test_thread_row_sums_are_each_quad_threads_columns(block_n: int) -> None:
    """ROWS x 4 partials: column t holds columns 8k + 2t + {0, 1} of each row (the columns
    thread t of a quad holds in a wgmma accumulator), and the four add up to the row sum."""
    thread_row_sums = _gluon_functions()["_thread_row_sums"]
    rng = np.random.default_rng(block_n)
    p = rng.uniform(0.0, 256.0, size=(64, block_n)).astype(np.float32)
    part = np.asarray(thread_row_sums(_Tensor(p)))
    assert part.shape == (64, 4)
    cols = np.arange(block_n)
    for t in range(4):
        mine = ((cols % 8) // 2) == t
        np.testing.assert_allclose(part[:, t], p[:, mine].sum(1, dtype=np.float64), rtol=1e-6)
    np.testing.assert_allclose(part.sum(1, dtype=np.float64), p.sum(1, dtype=np.float64),
                               rtol=1e-6)


@pytest.mark.parametrize("block_n", [16, 32, 64, 128, 256])
def test_row_max_tree_equals_the_chain(block_n: int) -> None:
    """``_row_max`` as a tree (pairs, then halves) gives every row's maximum over all its
    columns, the value of the one-chain ``gl.max``: on random scores and on rows with -inf
    (masked keys), a NaN, only NaN, and both signs of zero."""
    row_max = _gluon_functions()["_row_max"]
    rng = np.random.default_rng(block_n)
    s = rng.standard_normal((64, block_n)).astype(np.float32) * np.float32(30.0)
    s[1, :] = -np.inf  # a row that sees no key of the block
    s[2, : block_n // 2] = -np.inf
    s[3, rng.integers(block_n)] = np.nan
    s[4, :] = np.nan
    s[5, :] = np.where(np.arange(block_n) % 2 == 0, np.float32(0.0), np.float32(-0.0))
    s[6, :] = -np.inf
    s[6, block_n - 1] = 7.0  # the maximum in the last column
    tree = np.asarray(row_max(_Tensor(s), True))
    chain = np.asarray(row_max(_Tensor(s), False))
    expected = np.fmax.reduce(s, axis=1)
    assert tree.shape == (64,)
    np.testing.assert_array_equal(tree, expected)  # NaN only where the row is all NaN
    np.testing.assert_array_equal(chain, expected)
    assert np.isnan(tree[4]) and not np.isnan(tree[3]) and tree[1] == -np.inf and tree[6] == 7.0
