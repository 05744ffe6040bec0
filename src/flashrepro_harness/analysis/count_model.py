"""The analytic instruction-count model: tensor-core MMAs and shared-memory matrix loads.

Static counts, i.e. instructions in the compiled code (not executed counts), of a
FlashAttention-2 forward kernel, from its tile shapes. One *loop body* ("stage" in the article)
is one step over BLOCK_N keys: S = Q·Kᵀ (BLOCK_M x BLOCK_N, reduction over HEAD_DIM), then
O += P·V (BLOCK_M x HEAD_DIM, reduction over BLOCK_N). The kernel's code holds ``loop_bodies``
copies of it (the causal off-band loop and the masked diagonal loop: 2 in the article; see
:func:`fa2_loop_bodies` for torch's kernel). Source: seed ``000_5de0d8ad12f287ab.txt`` (digest
in ``docs/article.md``), generalised from "warps split the rows" to any warp grid.

**mma.sync path** (sm_80/86/89, and sm_90 with ``DISABLE_MMA_V3=1``) — :func:`mma_sync_gemm`.
``mma.sync.m16n8k16`` (SASS ``HMMA.16816.F32``) multiplies a 16x16 A fragment by a 16x8 B
fragment; ``ldmatrix.x4`` (``LDSM.16.M88.4``; ``.trans``: ``LDSM.16.MT88.4``) moves four 8x8
16-bit matrices, 256 elements, from shared memory into a warp's registers. For
C (m x n) += A (m x k) · B (k x n) with the warps in a ``warps_m x warps_n`` grid, each warp
owns an (m/warps_m) x (n/warps_n) block of C and needs the whole k extent of its rows of A and
its columns of B, so per warp (= the static count: every warp runs the same code):

* HMMA  = (m/warps_m)·(n/warps_n)·k / (16·8·16)
* loads of A = (m/warps_m)·k / 256, loads of B = k·(n/warps_n) / 256

A load is ``.trans`` (LDSM.MT) when the operand sits in shared memory with the *non*-reduction
dim contiguous: in attention only V (rows of V are contiguous in D, P·V's n dim). Q, K and P
are stored with their reduction dim (D, D and BLOCK_N) contiguous: plain LDSM. The article's
formulas are the cases warps_m = n_warps, warps_n = 1 (torch: "split the rows": Q loads
M·K/(16·16·n), K loads N·K/(16·16)) and warps_m = 1 (its K = 16 example for Triton).

P's route: the P·V product needs, in each warp, whole rows of P (its A operand) over all
BLOCK_N keys. S's accumulator gives a warp whole rows only when warps_n = 1; then P stays in
registers (FlashAttention-2's ``convert_layout_acc_Aregs``; Triton's register-only mma ->
dot-operand conversion). With warps_n > 1 the rows are spread over warps and P makes a round
trip through shared memory — stored, then loaded with LDSM as an ordinary A operand
(:func:`p_through_smem`). These are the 16 extra LDSM per stage the article finds in Triton's
code: its kernel compiles to a ``warpsPerCTA = [1, 4]`` layout.

Q's route: Q does not change across the loop. torch (``Is_Q_in_regs = false``) and Triton's
pointer-load kernels reload its A fragments from shared memory in every loop body; Triton keeps
them in registers, loaded once before the loops, when Q arrives through TMA (``q_in_loop``).

**wgmma path** (sm_90) — :func:`wgmma_gemm`. ``wgmma.mma_async.m64nNk16`` (SASS
``HGMMA.64xNx16``) is issued by a warpgroup (4 warps) for a 64-row x N-column block of C,
N <= 256, reading B (and A, unless A is in registers) straight from shared memory through
descriptors: no LDSM. Warpgroups split the rows first (Triton's MMAv3 warps-per-tile rule), so
with ``wg = num_warps/4``, ``wg_m = min(wg, m/64)``, ``wg_n = wg/wg_m``, the static count per
product is (m/wg_m/64) · ceil((n/wg_n)/256) · k/16. Article config: S: 1·1·128/16 = 8, P·V:
1·1·64/16 = 4, so 12 per stage and 24 in all (``docs/article.md``, "Static SASS"). P feeds
P·V from registers (the wgmma accumulator layout is the A-operand layout: Triton's
``matchMmaV3AndDotOperandLayout``), so the loop bodies hold no LDSM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MODELLED_CLASSES = ("HMMA", "HGMMA", "LDSM", "LDSM.MT")
"""The classes the model predicts (names of :data:`flashrepro_harness.analysis.disasm.CLASSES`)."""

TRITON_LOOP_BODIES = 2
"""Loop bodies in both Triton kernels for a causal launch: kernels/article.py's STAGE 1 and 2
loops, kernels/fwd.py's two ``_attn_stage`` calls."""

LDSM_X4_ELEMENTS = 4 * 8 * 8
"""16-bit elements one ``ldmatrix.x4`` moves: four 8x8 matrices."""


def _exact(numerator: int, denominator: int, what: str) -> int:
    if numerator % denominator:
        raise ValueError(f"the model needs {what} to be a multiple of {denominator}, "
                         f"got {numerator}")
    return numerator // denominator


@dataclass(frozen=True)
class Operand:
    """Where a matrix-product operand comes from.

    Attributes:
        from_smem: loaded from shared memory with ldmatrix (False: already in registers).
        trans: the load is ``ldmatrix.trans`` (LDSM.MT): the operand's non-reduction dim is
            contiguous in shared memory.
    """

    from_smem: bool = True
    trans: bool = False


@dataclass(frozen=True)
class Prediction:
    """A whole-kernel prediction of :data:`MODELLED_CLASSES`.

    Attributes:
        total: counts in the whole function.
        in_loops: the part inside the loop bodies (``total`` minus what runs once before the
            loops, e.g. a hoisted Q).
    """

    total: dict[str, int]
    in_loops: dict[str, int]


def mma_sync_gemm(m: int, n: int, k: int, warps_m: int, warps_n: int,
                  a: Operand = Operand(), b: Operand = Operand()) -> dict[str, int]:
    """Static HMMA / LDSM / LDSM.MT counts of C (m x n) += A (m x k) · B (k x n) on mma.sync.

    Formulas in the module docstring (seed ``000_5de0d8ad12f287ab.txt``, generalised to a
    ``warps_m x warps_n`` warp grid).

    Args:
        m, n, k: the product's dims, in elements (fp16/bf16).
        warps_m, warps_n: the warp grid over C (Triton's ``warpsPerCTA`` of the mma layout).
        a, b: the operands' sources.

    Returns:
        ``{"HMMA": .., "LDSM": .., "LDSM.MT": ..}``.

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
    """Whether P reaches the P·V product through shared memory: when S's warps split its
    columns (``warps_n > 1``), see the module docstring."""
    return warps_n > 1


def mma_sync_stage(block_m: int, block_n: int, head_dim: int, warps_m: int, warps_n: int,
                   p_in_smem: bool, q_in_loop: bool = True) -> dict[str, int]:
    """Counts of one loop body on the mma.sync path: S = Q·Kᵀ, then O += P·V.

    Q (A of S) loads with LDSM when ``q_in_loop``, K (B of S, D contiguous) with LDSM; P (A of
    P·V) with LDSM only when ``p_in_smem``; V (B of P·V, D = the n dim contiguous) with
    LDSM.MT. Both products use the same warp grid.

    Article config, torch (warps 4 x 1, P in registers): S: 8 + 32 LDSM, 64 HMMA; P·V: 32
    LDSM.MT, 64 HMMA -> 40 / 32 / 128 per stage. Triton's article kernel (warps 1 x 4, P through
    shared memory): S: 32 + 8 LDSM, 64 HMMA; P·V: 16 LDSM + 8 LDSM.MT, 64 HMMA -> 56 / 8 / 128.

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

    Article config: torch 80 LDSM, 64 LDSM.MT, 256 HMMA; the article's Triton kernel 112 LDSM,
    16 LDSM.MT, 256 HMMA (seed ``000_5de0d8ad12f287ab.txt``; the LDSM.MT figure is cut off in
    the article, 16 is what Triton 3.6 compiles).

    Raises:
        ValueError: see :func:`mma_sync_gemm`.
    """
    stage = mma_sync_stage(block_m, block_n, head_dim, warps_m, warps_n, p_in_smem, q_in_loop)
    in_loops = {"HMMA": loop_bodies * stage["HMMA"], "HGMMA": 0,
                "LDSM": loop_bodies * stage["LDSM"], "LDSM.MT": loop_bodies * stage["LDSM.MT"]}
    q_once = 0 if q_in_loop else (block_m // warps_m) * head_dim // LDSM_X4_ELEMENTS
    return Prediction({**in_loops, "LDSM": in_loops["LDSM"] + q_once}, in_loops)


def wgmma_gemm(m: int, n: int, k: int, num_warps: int) -> int:
    """Static HGMMA count of C (m x n) += A (m x k) · B (k x n) on sm_90 wgmma (m64nNk16).

    Formula and source in the module docstring.

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
    """Static counts of the Gluon kernel (kernels/fwd_gluon.py): one software-pipelined loop
    whose body issues S_j and P_{j-1}·V_{j-1}, plus S_0 before it and the last P·V after it,
    so 2 x (S + P·V) HGMMAs in all and one (S + P·V) in the loop; no HMMA, no LDSM (P stays in
    registers, Q, K, V arrive by TMA). Article config: 24 in all, 12 in the loop.

    Raises:
        ValueError: see :func:`wgmma_gemm`.
    """
    stage = (wgmma_gemm(block_m, block_n, head_dim, num_warps)
             + wgmma_gemm(block_m, head_dim, block_n, num_warps))
    total = {"HMMA": 0, "HGMMA": 2 * stage, "LDSM": 0, "LDSM.MT": 0}
    return Prediction(total, {**total, "HGMMA": stage})


def gluon_ws_model(block_n: int, head_dim: int, consumers: int = 2) -> Prediction:
    """Static counts of the warp-specialized Gluon kernel (kernels/fwd_gluon_ws.py): each of
    its ``consumers`` warpgroups (2, or 3 in the 192-row tile) is its own code,
    :func:`gluon_overlap_model` of a 64-row tile with 4 warps; the producer warp issues no
    matrix instructions. The kernel is persistent, so all of them sit in a loop (over tiles).
    FA3's tiles (128 x 128, D = 128): 2 x 32 = 64 HGMMA, all in loops.

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
    """Copies of the loop body in torch's FA2 forward kernel, causal with even M/N.

    ``flash_fwd_kernel.h`` (``compute_attn_1rowblock``): the first
    ``n_masking_steps = ceil(kBlockM / kBlockN)`` key blocks run in a fully unrolled masked
    loop, the rest in one unmasked loop: ceil(kBlockM/kBlockN) + 1 bodies (2 for 64 x 64, 3 for
    128 x 64).
    """
    return math.ceil(block_m / block_n) + 1
