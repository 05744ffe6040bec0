"""Rescale O only when a row's running max has grown by more than 2^8 (session 11, experiment 21).

In the ws kernel's loop each consumer multiplies its whole accumulator by alpha = 2^(m_old -
m_new) after every key block (64 FMUL per thread at D = 128), between waiting for P·V and its
next turn. FlashAttention-4 (T. Dao et al., 2025) keeps a row's running max unless the block's
max exceeds it by more than 8 (log2 units): P then stays <= 2^8 (fine in fp16/bf16, and l and
O are fp32), and alpha is exactly 1 for most blocks. Here a warp votes (``vote.sync.any``)
whether any of its rows moved; if none did, one uniform branch skips the multiplies. The
variant is generated from :mod:`flashrepro.kernels.fwd_gluon_ws` (``variant_probe.
edited_source``); only the loop's blocks change (block 0 sets the max as before).

    PYTHONPATH=src:. python reproduce/gpu/lazy_rescale_probe.py parity|timing|offline

parity: the variant over ``ws_probe``'s cases (ragged, GQA, bottom-right, bf16), 7 programs.
timing: the variant against the kernel now, side by side with the peers (variant_probe's
first four problems: the article problem non-causal and causal, B=16 L=1024 both).
offline: compile the variant for sm_90 without a GPU (no GPU run) and print its SASS counts.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from reproduce.gpu.variant_probe import load_edited

THRESHOLD = 8.0  # log2 units: P <= 2^8 between rescales

HELPERS = '''
RESCALE_THRESHOLD = gl.constexpr(__THRESHOLD__)


@gluon.jit
def _softmax_lazy_step(s, m_i, l_i, cols, rows, seqlen_k, causal_offset, qk_scale,
                       MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    """:func:`fwd_gluon._softmax_step` keeping a row's max unless the block's exceeds it by more
    than RESCALE_THRESHOLD; also returns, per row, whether it moved (int32)."""
    if MASKED:
        keep = gl.expand_dims(cols < seqlen_k, 0)
        if CAUSAL:
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1) + causal_offset)
        s = gl.where(keep, s * qk_scale, float("-inf"))
        m_blk = gl.max(s, 1)
        m_new = gl.where(m_blk > m_i + RESCALE_THRESHOLD, m_blk, m_i)
        p = gl.exp2(s - gl.expand_dims(m_new, 1))
    else:
        m_blk = gl.max(s, 1) * qk_scale
        m_new = gl.where(m_blk > m_i + RESCALE_THRESHOLD, m_blk, m_i)
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1), (m_new != m_i).to(gl.int32)


@gluon.jit
def _softmax_lazy(s, m_i, l_i, cols, rows, full, seqlen_k, causal_offset, qk_scale,
                  CAUSAL: gl.constexpr):
    if full:
        p, alpha, m_new, l_new, moved = _softmax_lazy_step(
            s, m_i, l_i, cols, rows, seqlen_k, causal_offset, qk_scale, False, CAUSAL)
    else:
        p, alpha, m_new, l_new, moved = _softmax_lazy_step(
            s, m_i, l_i, cols, rows, seqlen_k, causal_offset, qk_scale, True, CAUSAL)
    return p, alpha, m_new, l_new, moved


@gluon.constexpr_function
def _rescale_ptx(pack):
    """acc * alpha for ``pack`` elements of a thread (outputs $0.., acc, alpha, flag inputs
    after them), skipped by one warp-uniform branch when the flag is 0."""
    acc, alpha, flag = pack, 2 * pack, 3 * pack
    moves = " ".join(f"mov.b32 ${i}, ${acc + i};" for i in range(pack))
    muls = " ".join(f"mul.f32 ${i}, ${acc + i}, ${alpha + i};" for i in range(pack))
    return ("{ .reg .pred p; setp.ne.u32 p, $" + str(flag) + ", 0; @!p bra.uni SKIP; " + muls
            + " bra.uni DONE; SKIP: " + moves + " DONE: }")


@gluon.constexpr_function
def _rescale_constraints(pack):
    return ",".join(["=r"] * pack + ["r"] * (3 * pack))


@gluon.jit
def _rescale_lazy(acc, alpha, moved):
    """acc * alpha per row, skipped in a warp none of whose rows moved."""
    o_rows: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    # Per warp: any of its rows moved? Each thread holds two rows; OR them, vote over the warp.
    warp_moved = gl.inline_asm_elementwise(
        "{ .reg .pred p, q; .reg .b32 f; or.b32 f, $2, $3; setp.ne.u32 p, f, 0; "
        "vote.sync.any.pred q, p, 0xffffffff; selp.u32 $0, 1, 0, q; mov.b32 $1, $0; }",
        "=r,=r,r,r", [moved], dtype=gl.int32, is_pure=True, pack=2)
    a2 = gl.expand_dims(gl.convert_layout(alpha, o_rows), 1)
    f2 = gl.expand_dims(gl.convert_layout(warp_moved, o_rows), 1)
    PACK: gl.constexpr = acc.type.shape[1] // 2
    return gl.inline_asm_elementwise(
        _rescale_ptx(PACK), _rescale_constraints(PACK), [acc, a2, f2],
        dtype=gl.float32, is_pure=True, pack=PACK)


@gluon.jit
def _consumer('''.replace("__THRESHOLD__", repr(THRESHOLD))

EDITS = [
    ("\n@gluon.jit\ndef _consumer(", HELPERS),
    ("""            p_new, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, j * BLOCK_N + cols0, rows,
                                                    j < n_full, seqlen_k, causal_offset,
                                                    qk_scale, CAUSAL)""",
     """            p_new, alpha, m_i, l_i, moved = _softmax_lazy(s, m_i, l_i, j * BLOCK_N + cols0,
                                                          rows, j < n_full, seqlen_k,
                                                          causal_offset, qk_scale, CAUSAL)"""),
    ("            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)),"
     "\n                                       1)",
     """            acc = _rescale_lazy(acc, alpha, moved)"""),
]

VARIANT = Path(tempfile.gettempdir()) / "ws_lazy_rescale.py"  # Triton needs the source file


def variant():
    return load_edited(EDITS, VARIANT)


def main() -> None:
    mode = sys.argv[1]
    module = variant()
    if mode == "offline":
        return
    from reproduce.gpu import variant_probe, ws_probe
    if mode == "parity":
        ws_probe.parity(module)
    else:
        sys.argv = [sys.argv[0], "--rounds", "20", "--problems", "4", f"lazy={VARIANT}"]
        variant_probe.main()


if __name__ == "__main__":
    main()
