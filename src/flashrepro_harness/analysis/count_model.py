"""The analytic instruction-count model: tensor-core MMAs and shared-memory matrix loads.

Static counts (instructions in the code, not executed) of a FlashAttention-2 forward kernel from
its tiles. One *loop body* ("stage" in the SASS article) is one step over BLOCK_N keys: S = Q·Kᵀ,
then O += P·V; the code holds ``loop_bodies`` copies (2 for causal Triton; torch:
:func:`fa2_loop_bodies`). Source: the SASS article (docs/article.md, "The SASS article"),
generalised from "warps split the rows" to any warp grid.

**mma.sync** (sm_80/86/89; sm_90 with ``DISABLE_MMA_V3=1``), :func:`mma_sync_gemm`.
``HMMA.16816.F32`` multiplies a 16x16 A fragment by a 16x8 B fragment; ``LDSM.16.M88.4``
(``.trans``: ``LDSM.16.MT88.4``) moves 256 16-bit elements into a warp's registers. For
C (m x n) += A (m x k) · B (k x n) over a ``warps_m x warps_n`` warp grid, per warp:

* HMMA  = (m/warps_m)·(n/warps_n)·k / (16·8·16)
* loads of A = (m/warps_m)·k / 256, loads of B = k·(n/warps_n) / 256

A load is ``.trans`` when the operand's non-reduction dim is contiguous: in attention only V.
The article's formulas are warps_m = n_warps, warps_n = 1 (torch) and warps_m = 1 (Triton).

P's route: P·V needs whole rows of P per warp, which S's accumulator gives only when
warps_n = 1 (P stays in registers: FA2's ``convert_layout_acc_Aregs``). With warps_n > 1 P goes
through shared memory and back with LDSM (:func:`p_through_smem`): the article's 16 extra LDSM
per stage, from Triton's ``warpsPerCTA = [1, 4]``. Q's route: reloaded with LDSM in every body
(torch, Triton's pointer loads) or loaded once before the loops (Triton with TMA: ``q_in_loop``
False).

**wgmma** (sm_90), :func:`wgmma_gemm`. ``HGMMA.64xNx16`` is issued by a warpgroup for a 64 x N
block of C (N <= 256), operands read from shared memory by descriptor: no LDSM. Warpgroups split
rows first (Triton's MMAv3 rule): ``wg = num_warps/4``, ``wg_m = min(wg, m/64)``,
``wg_n = wg/wg_m``, count = (m/wg_m/64) · ceil((n/wg_n)/256) · k/16. P feeds P·V from registers
(Triton's ``matchMmaV3AndDotOperandLayout``). Article config: 8 + 4 per stage, 24 in all
(docs/article.md, "Measured here").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MODELLED_CLASSES = ("HMMA", "HGMMA", "LDSM", "LDSM.MT")
"""The classes the model predicts (:data:`flashrepro_harness.analysis.disasm.CLASSES` names)."""

TRITON_LOOP_BODIES = 2
"""Loop bodies of both Triton kernels, causal (article.py's STAGE 1 and 2, fwd.py's two
``_attn_stage`` calls)."""

LDSM_X4_ELEMENTS = 4 * 8 * 8
"""16-bit elements one ``ldmatrix.x4`` moves: four 8x8 matrices."""


def _exact(numerator: int, denominator: int, what: str) -> int:
    if numerator % denominator:
        raise ValueError(f"the model needs {what} to be a multiple of {denominator}, "
                         f"got {numerator}")
    return numerator // denominator


@dataclass(frozen=True)
class Operand:
    """Where a matrix-product operand comes from: shared memory by ldmatrix (``from_smem``;
    else registers), ``.trans`` (LDSM.MT) when ``trans``."""

    from_smem: bool = True
    trans: bool = False


@dataclass(frozen=True)
class Prediction:
    """A whole-kernel prediction of :data:`MODELLED_CLASSES`: ``total`` and the part
    ``in_loops`` (without what runs once, e.g. a hoisted Q)."""

    total: dict[str, int]
    in_loops: dict[str, int]


def mma_sync_gemm(m: int, n: int, k: int, warps_m: int, warps_n: int,
                  a: Operand = Operand(), b: Operand = Operand()) -> dict[str, int]:
    """Static ``{"HMMA", "LDSM", "LDSM.MT"}`` counts of C (m x n) += A (m x k) · B (k x n) on
    mma.sync (module docstring); dims in fp16/bf16 elements, ``warps_m x warps_n`` the warp grid
    over C (Triton's ``warpsPerCTA``).

    Raises:
        ValueError: a warp's block is not whole m16n8k16 steps (rows a multiple of 16, columns
            of 8, k of 16) or an operand block is not whole ldmatrix.x4 loads (256 elements).
    """
    mw = _exact(m, warps_m, "m / warps_m")
    nw = _exact(n, warps_n, "n / warps_n")
    _exact(mw, 16, "a warp's rows (m / warps_m)")
    _exact(nw, 8, "a warp's columns (n / warps_n)")
    _exact(k, 16, "k")
    counts = {"HMMA": mw * nw * k // (16 * 8 * 16), "LDSM": 0, "LDSM.MT": 0}
    for name, operand, elements in (("A", a, mw * k), ("B", b, k * nw)):
        if operand.from_smem:
            loads = _exact(elements, LDSM_X4_ELEMENTS, f"a warp's {name} block (elements)")
            counts["LDSM.MT" if operand.trans else "LDSM"] += loads
    return counts


def p_through_smem(warps_n: int) -> bool:
    """Whether P reaches P·V through shared memory: S's warps split its columns."""
    return warps_n > 1


def mma_sync_stage(block_m: int, block_n: int, head_dim: int, warps_m: int, warps_n: int,
                   p_in_smem: bool, q_in_loop: bool = True) -> dict[str, int]:
    """Counts of one loop body on the mma.sync path: S = Q·Kᵀ, then O += P·V.

    Q loads with LDSM when ``q_in_loop``, K with LDSM, P with LDSM when ``p_in_smem``, V with
    LDSM.MT. Article config, LDSM / LDSM.MT / HMMA per stage: torch (4 x 1) 40 / 32 / 128, the
    article's Triton kernel (1 x 4) 56 / 8 / 128.

    Raises:
        ValueError: see :func:`mma_sync_gemm`.
    """
    s = mma_sync_gemm(block_m, block_n, head_dim, warps_m, warps_n,
                      a=Operand(from_smem=q_in_loop))
    pv = mma_sync_gemm(block_m, head_dim, block_n, warps_m, warps_n,
                       a=Operand(from_smem=p_in_smem), b=Operand(trans=True))
    return {key: s[key] + pv[key] for key in s}


def mma_sync_model(block_m: int, block_n: int, head_dim: int, warps_m: int, warps_n: int,
                   p_in_smem: bool, loop_bodies: int, q_in_loop: bool = True) -> Prediction:
    """Whole-kernel static counts on the mma.sync path: ``loop_bodies`` x one stage, plus Q's
    loads once before the loops when it is not reloaded in them (``q_in_loop`` False).

    Article config: torch 80 LDSM, 64 LDSM.MT, 256 HMMA; the Triton kernel 112, 16, 256 (the
    SASS article; its text stops before the LDSM.MT count, 16 is Triton 3.6's).

    Raises:
        ValueError: see :func:`mma_sync_gemm`.
    """
    stage = mma_sync_stage(block_m, block_n, head_dim, warps_m, warps_n, p_in_smem, q_in_loop)
    in_loops = {"HMMA": loop_bodies * stage["HMMA"], "HGMMA": 0,
                "LDSM": loop_bodies * stage["LDSM"], "LDSM.MT": loop_bodies * stage["LDSM.MT"]}
    q_once = 0 if q_in_loop else (block_m // warps_m) * head_dim // LDSM_X4_ELEMENTS
    return Prediction({**in_loops, "LDSM": in_loops["LDSM"] + q_once}, in_loops)


def wgmma_gemm(m: int, n: int, k: int, num_warps: int) -> int:
    """Static HGMMA count of C (m x n) += A (m x k) · B (k x n) on sm_90 (module docstring).

    Raises:
        ValueError: ``num_warps`` is not a multiple of 4, m is not a multiple of 64 per
            warpgroup, or k is not a multiple of 16.
    """
    warpgroups = _exact(num_warps, 4, "num_warps")
    wg_m = max(1, min(warpgroups, m // 64))
    wg_n = warpgroups // wg_m
    rows = _exact(m, 64 * wg_m, "m")
    return rows * math.ceil(n / wg_n / 256) * _exact(k, 16, "k")


def wgmma_model(block_m: int, block_n: int, head_dim: int, num_warps: int,
                loop_bodies: int) -> Prediction:
    """Whole-kernel static counts on the wgmma path: ``loop_bodies`` x (S + P·V) HGMMAs, all
    in the loops, and no HMMA or LDSM. Article config: 2 x (8 + 4) = 24 HGMMA.

    Raises:
        ValueError: see :func:`wgmma_gemm`.
    """
    stage = (wgmma_gemm(block_m, block_n, head_dim, num_warps)
             + wgmma_gemm(block_m, head_dim, block_n, num_warps))
    counts = {"HMMA": 0, "HGMMA": loop_bodies * stage, "LDSM": 0, "LDSM.MT": 0}
    return Prediction(counts, dict(counts))


def gluon_overlap_model(block_m: int, block_n: int, head_dim: int, num_warps: int) -> Prediction:
    """Static counts of kernels/fwd_gluon.py: a pipelined loop issuing S_j and P_{j-1}·V_{j-1},
    S_0 before it and the last P·V after: 2 x (S + P·V) HGMMAs, one in the loop; no HMMA or
    LDSM. Article config: 24, 12 in the loop.

    Raises:
        ValueError: see :func:`wgmma_gemm`.
    """
    stage = (wgmma_gemm(block_m, block_n, head_dim, num_warps)
             + wgmma_gemm(block_m, head_dim, block_n, num_warps))
    total = {"HMMA": 0, "HGMMA": 2 * stage, "LDSM": 0, "LDSM.MT": 0}
    return Prediction(total, {**total, "HGMMA": stage})


def gluon_ws_model(block_n: int, head_dim: int, consumers: int = 2) -> Prediction:
    """Static counts of kernels/fwd_gluon_ws.py: ``consumers`` copies (2, or 3 for 192 rows) of
    :func:`gluon_overlap_model` at 64 rows and 4 warps, all inside the persistent tile loop.
    FA3's 128 x 128 tiles at D = 128: 64 HGMMA.

    Raises:
        ValueError: see :func:`wgmma_gemm`.
    """
    one = gluon_overlap_model(64, block_n, head_dim, 4).total
    total = {k: consumers * v for k, v in one.items()}
    return Prediction(total, dict(total))


FA2_WARPS = (4, 1)
"""torch's FA2 warp grid, 4 warps over the rows of S and O: ``kernel_traits.h`` builds
``TiledMMA<..., Layout<Shape<Int<kNWarps>,_1,_1>>>``."""


def fa2_loop_bodies(block_m: int, block_n: int) -> int:
    """Copies of the loop body in torch's FA2 forward kernel, causal with even M/N:
    ``ceil(kBlockM / kBlockN)`` unrolled masked steps plus one unmasked loop
    (``flash_fwd_kernel.h``, ``compute_attn_1rowblock``).
    """
    return math.ceil(block_m / block_n) + 1
