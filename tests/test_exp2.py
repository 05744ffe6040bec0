"""The softmax's exponentials split between the SFU and a polynomial (``fwd_gluon._exp2``).

On the CPU the generated PTX itself is executed, instruction by instruction, with numpy's
float32 arithmetic (and the rounding modes the PTX names), so the constants, the floor trick
and the exponent arithmetic are what is checked, not a re-derivation. On the GPU a small Gluon
kernel runs ``_exp2`` and its results are compared with 2^x in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashrepro.kernels import fwd_gluon

# Relative error bound of the cubic on [0, 1) (8.6e-5 as fitted) plus the float32 arithmetic
# around it; fp16 P rounds to a half ulp of 4.9e-4.
POLY_REL_ERR = 1.0e-4
# The SFU's ex2.approx: 2 ulp-ish (PTX ISA: max relative error 2^-22.5 over the range).
SFU_REL_ERR = 1.0e-6


def _f32(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint32).view(np.float32)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def _round_down(exact: np.ndarray) -> np.ndarray:
    """float64 ``exact`` to float32, rounding towards -inf (PTX ``.rm``)."""
    near = exact.astype(np.float32)
    return np.where(near.astype(np.float64) > exact, np.nextafter(near, np.float32(-np.inf)),
                    near)


def _operand(token: str, regs: dict[str, np.ndarray]) -> np.ndarray:
    if token.startswith("0f"):  # PTX float literal: the 32 bits in hex
        return np.full_like(next(iter(regs.values())), int(token[2:], 16))
    if token.isdigit():
        return np.full_like(next(iter(regs.values())), int(token))
    return regs[token]


def run_ptx(ptx: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Execute :func:`fwd_gluon._exp2_ptx`'s PTX on float32 arrays: ``inputs[i]`` is ``$(8+i)``,
    the result ``i`` is ``$i``. Registers hold uint32 bit patterns; each instruction's type
    decides how they are read."""
    pack = len(inputs)
    outputs: dict[str, np.ndarray] = {}
    for line in ptx.splitlines():
        regs = {f"${pack + i}": _bits(x) for i, x in enumerate(inputs)}
        for stmt in (st.strip(" {}") for st in line.split(";")):
            if not stmt or stmt.startswith(".reg"):
                continue
            op, args = stmt.split(None, 1)
            dst, *src = (a.strip() for a in args.split(","))
            vals = [_operand(a, regs) for a in src]
            f = [_f32(v).astype(np.float64) for v in vals]
            if op == "ex2.approx.ftz.f32":
                res = _bits(np.exp2(f[0]).astype(np.float32))
            elif op == "max.ftz.f32":
                res = _bits(np.maximum(f[0], f[1]).astype(np.float32))
            elif op == "add.rm.ftz.f32":
                res = _bits(_round_down(f[0] + f[1]))
            elif op == "sub.ftz.f32":
                res = _bits((f[0] - f[1]).astype(np.float32))
            elif op == "fma.rn.ftz.f32":  # float64 holds the product exactly: one rounding
                res = _bits((f[0] * f[1] + f[2]).astype(np.float32))
            elif op == "shl.b32":
                res = (vals[0].astype(np.uint64) << vals[1].astype(np.uint64)).astype(np.uint32)
            elif op == "add.s32":
                res = (vals[0].astype(np.uint64) + vals[1]).astype(np.uint32)
            else:
                raise AssertionError(f"instruction the emulator does not know: {stmt}")
            regs[dst] = res
        produced = [r for r in regs if r.startswith("$") and int(r[1:]) < pack]
        assert len(produced) == 1, f"each line computes one result: {line}"
        outputs[produced[0]] = _f32(regs[produced[0]])
    return [outputs[f"${i}"] for i in range(pack)]


def _inputs(n: int, seed: int) -> np.ndarray:
    """Softmax arguments x = s·scale - m <= 0: dense near 0, sparse to -140, exact integers
    (the floor's edges) and -inf (masked scores)."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([-rng.exponential(3.0, n), rng.uniform(-140.0, 0.0, n),
                        -np.arange(0, 131, dtype=np.float64), [-np.inf, -0.0]])
    return x.astype(np.float32)


@pytest.mark.parametrize("poly_of_8", range(9))
def test_exp2_ptx_accuracy(poly_of_8: int) -> None:
    pack = fwd_gluon.EXP2_PACK.value
    ptx = fwd_gluon._exp2_ptx.fn(poly_of_8)  # the plain function under constexpr_function
    assert ptx.count("ex2.approx") == pack - poly_of_8
    inputs = [_inputs(4000, seed) for seed in range(pack)]
    outputs = run_ptx(ptx, inputs)
    for i, (x, y) in enumerate(zip(inputs, outputs, strict=True)):
        want = np.exp2(x.astype(np.float64))
        normal = want >= 2.0 ** -126
        bound = POLY_REL_ERR if i >= pack - poly_of_8 else SFU_REL_ERR
        rel = np.abs(y[normal] / want[normal] - 1)
        assert rel.max() <= bound, (i, x[normal][rel.argmax()], rel.max())
        # Below float32's normal range: 0 or a value P's fp16/bf16 rounding makes 0.
        assert np.all((y[~normal] >= 0) & (y[~normal] < 2.0 ** -120)), i
        assert y[x == 0].tolist() == [1.0] * int((x == 0).sum()), "2^0 must be exactly 1"


@pytest.mark.gpu
@pytest.mark.parametrize("poly_of_8", [0, 3, 8])
def test_gpu_exp2(poly_of_8: int, device: torch.device) -> None:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    @gluon.jit
    def exp2_kernel(X, Y, POLY_OF_8: gl.constexpr):
        layout: gl.constexpr = gl.BlockedLayout([8], [32], [4], [0])
        offs = gl.program_id(0) * 1024 + gl.arange(0, 1024, layout=layout)
        gl.store(Y + offs, fwd_gluon._exp2(gl.load(X + offs), POLY_OF_8))

    x = torch.from_numpy(_inputs(64 * 1024, 7)[: 64 * 1024].copy()).to(device)
    x = x[torch.randperm(x.numel(), device=device)]  # every pack position sees every range
    y = torch.full_like(x, float("nan"))
    exp2_kernel[(x.numel() // 1024,)](x, y, POLY_OF_8=poly_of_8, num_warps=4)
    want = torch.exp2(x.double())
    normal = want >= 2.0 ** -126
    rel = (y.double()[normal] / want[normal] - 1).abs()
    assert rel.max().item() <= (POLY_REL_ERR if poly_of_8 else SFU_REL_ERR)
    assert bool(((y[~normal] >= 0) & (y[~normal] < 2.0 ** -120)).all())
    assert bool((y[x == 0] == 1).all())
