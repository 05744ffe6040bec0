"""GPU check of the conditional rescaling's comparison at large scores.

Run from the repository root on an H200 (writes $OUT/lazy_rescale_overflow.txt, exit 1 when a
case fails):

    PYTHONPATH=src:. OUT=/tmp/out python lab/2026-11-30-conditional-rescaling-overflow/lazy_rescale_overflow.py

The ws kernels' loop kept a row's reference max m_i unless a block's max exceeded ``m_i + 8``.
From |m_i| >= 2^27 float32's spacing is 16, and the sum ``m_i + 8`` is a tie that rounds to
even: for m_i = 2^27 + 16 it gives 2^27 + 32, so a block whose max is 2^27 + 32 (16 above m_i)
did not move the reference and P reached 2^16, inf in float16 (bf16 holds it; the fa3-overlap
kernel, MAX_LAG 0, is unaffected). Since 6335126 the test is ``m_block - m_i > 8``.

Inputs (scale = ln 2, so the kernels' qk_scale is exactly 1.0 and scores in log2 units are the
exact float32 dot products): every query row q = (4096, 1, 0, ...); keys k_j = (32768, 16, 0, ...)
in block 0 (scores 2^27 + 16), (32768, 0, ...) after it (2^27), except key 200 = (32768, 32, ...)
(2^27 + 32); v random. The answer is ~0.998 v_200 + 2^-16 sum_{j<128} v_j, finite.

Expected at 0826cbb (before the fix): float16 fa3-ws and fa3-ws3 (and the default launch where
it picks one of them) non-finite; everything else ok. At 6335126 and after: every case ok.

Second part, the rescale's skip (``_rescale_moved_rows``): with N(0, 1) inputs a row's max
almost never moves by more than 8 after block 0, so the suite's random cases rarely take the
multiply. Here a seventh of the rows each get one key of their own, at a random position past
block 0 (causal: at or left of the row's diagonal), aligned with the row (k = 1.5 q_row): that
row's max moves by 17-25 log2 units in that block while its warp's other rows do not (about 125
such moves per case, in numpy on the CPU). Parity
(tests.reference.check_parity) for fa3-ws, fa3-ws3 (D = 64) and the default launch, both
dtypes, D 64 and 128, causal and not. Expected: every case ok, before and after the fix.
"""
import math
import os
import sys
from pathlib import Path

import torch
from tabulate import tabulate

import flashrepro
from tests.reference import check_parity

LQ, LK, KEY = 300, 384, 200


def inputs(d: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.zeros(1, 2, LQ, d)
    q[..., 0], q[..., 1] = 4096.0, 1.0
    k = torch.zeros(1, 2, LK, d)
    k[..., 0] = 32768.0
    k[..., :128, 1] = 16.0
    k[..., KEY, 1] = 32.0
    v = torch.randn(1, 2, LK, d, generator=torch.Generator().manual_seed(d))
    return tuple(t.to(dtype).cuda() for t in (q, k, v))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention in float64 on the CPU (scores are exact there)."""
    q, k, v = (t.cpu().double() for t in (q, k, v))
    return torch.softmax(q @ k.transpose(-1, -2) * math.log(2), dim=-1) @ v


def late_max_inputs(d: int, dtype: torch.dtype, causal: bool, length: int = 1000):
    """q, k, v ~ N(0, 1) where every seventh row r has a key of its own, k = 1.5 q_r, at a distinct
    random position in [128, length) (causal: <= r), so its max moves late."""
    gen = torch.Generator().manual_seed(d + causal)
    q, k, v = (torch.randn(2, 4, length, d, generator=gen) for _ in range(3))
    free = torch.randperm(length - 128, generator=gen) + 128
    taken = set()
    for r in range(129, length, 7):
        pos = next(int(p) for p in free if int(p) not in taken and (not causal or int(p) <= r))
        taken.add(pos)
        k[:, :, pos] = 1.5 * q[:, :, r]
    return tuple(t.to(dtype).cuda() for t in (q, k, v))


def late_max_rows() -> tuple[list, int]:
    rows, failed = [], 0
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            for causal in (False, True):
                q, k, v = late_max_inputs(d, dtype, causal)
                for config in [None, "fa3-ws"] + (["fa3-ws3"] if d == 64 else []):
                    try:
                        check_parity(q, k, v, causal=causal, config=config)
                        verdict = "ok"
                    except AssertionError as e:
                        verdict, failed = f"FAIL: {e}", failed + 1
                    rows.append([str(dtype).removeprefix("torch."), d, causal,
                                 config or "default", verdict])
    return rows, failed


def main() -> int:
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], 0
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            q, k, v = inputs(d, dtype)
            ref = reference(q, k, v)
            configs = [None, "fa3-ws", "fa3-overlap"] + (["fa3-ws3"] if d == 64 else [])
            for config in configs:
                o = flashrepro.attention(q, k, v, scale=math.log(2), config=config)
                finite = bool(torch.isfinite(o).all())
                err = (o.cpu().double() - ref).abs().max().item() if finite else math.inf
                ok = finite and err < 2e-2
                failed += not ok
                rows.append([str(dtype).removeprefix("torch."), d, config or "default",
                             finite, f"{err:.3g}", "ok" if ok else "FAIL"])
    text = tabulate(rows, headers=["dtype", "D", "config", "finite", "max |o - ref|", ""])
    late, late_failed = late_max_rows()
    text += "\n\nrows whose max moves late (parity):\n" + tabulate(
        late, headers=["dtype", "D", "causal", "config", ""])
    (out / "lazy_rescale_overflow.txt").write_text(text + "\n")
    print(text)
    return 1 if failed + late_failed else 0


if __name__ == "__main__":
    sys.exit(main())
