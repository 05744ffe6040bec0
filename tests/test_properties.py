"""Property-based tests (hypothesis): random small problems against the reference.

Each example draws a problem — batch, query heads as a multiple of key/value heads, lengths
0..80, a head dim from a list that includes non-powers of two, causal mask and alignment,
scale, a launch config with small tiles (TMA or pointer loads) — and a memory layout for
each of q, k, v and out (a random dim order, a head-dim stride of 1 or 2, key/value heads
broadcast with stride 0), and asserts the parity rule of
:func:`tests.reference.check_parity` against the float64 reference (float32 on a GPU). In
the interpreter only float16 is drawn (its bf16 ``tl.dot`` is wrong upstream, triton issue
11584); a GPU also draws bfloat16.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashrepro import KernelConfig
from tests.conftest import HAS_GPU
from tests.reference import check_parity, poisoned_like, random_qkv, relayout

DEVICE = torch.device("cuda" if HAS_GPU else "cpu")
DTYPES = [torch.float16, torch.bfloat16] if HAS_GPU else [torch.float16]
HEAD_DIMS = [1, 8, 16, 24, 40, 64, 80, 112]
CONFIGS = [KernelConfig(16, 16, 4, 1), KernelConfig(32, 16, 4, 1), KernelConfig(16, 32, 4, 1),
           KernelConfig(32, 16, 4, 1, tma=True)]  # TMA where the layout allows, else pointers
MAX_LEN = 80


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[int, ...], int]:
    """A memory layout for a 4-d tensor: dim order (outermost first) and head-dim stride."""
    return tuple(draw(st.permutations(range(4)))), draw(st.sampled_from([1, 2]))


@st.composite
def problems(draw: st.DrawFn) -> dict:
    h_kv = draw(st.integers(1, 2))
    return {
        "b": draw(st.integers(0, 2)),
        "h_kv": h_kv,
        "h": h_kv * draw(st.sampled_from([1, 2, 3])),
        "lq": draw(st.integers(0, MAX_LEN)),
        "lk": draw(st.integers(0, MAX_LEN)),
        "d": draw(st.sampled_from(HEAD_DIMS)),
        "dtype": draw(st.sampled_from(DTYPES)),
        "causal": draw(st.booleans()),
        "bottom_right": draw(st.booleans()),
        "scale": draw(st.one_of(st.none(), st.floats(0.0, 4.0))),
        "config": draw(st.sampled_from(CONFIGS)),
        "layouts": [draw(layouts()) for _ in range(4)],  # q, k, v, out
        "kv_broadcast": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


@settings(max_examples=60, deadline=None)
@given(problems())
def test_matches_reference(p: dict) -> None:
    gen = torch.Generator().manual_seed(p["seed"])
    q, k, v = random_qkv(p["b"], p["h"], p["lq"], p["lk"], p["d"], p["dtype"], DEVICE,
                         h_kv=p["h_kv"], generator=gen)
    q, k, v = (relayout(t, *lay) for t, lay in zip((q, k, v), p["layouts"], strict=False))
    if p["kv_broadcast"]:  # one key/value head seen through all of them (stride 0)
        k, v = k[:, :1].expand_as(k), v[:, :1].expand_as(v)
    out = relayout(poisoned_like(q), *p["layouts"][3])
    check_parity(q, k, v, causal=p["causal"], bottom_right=p["bottom_right"],
                 scale=p["scale"], enable_gqa=True, config=p["config"], out=out)
