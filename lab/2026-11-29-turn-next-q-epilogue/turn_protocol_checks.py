"""GPU checks of the named-barrier turn, the snake schedule and the moved table entry (not part
of the suite; run on the H200):

    timeout 900 env PYTHONPATH=src:. python -m pytest -q -v -p no:cacheprovider \\
        lab/2026-11-29-turn-next-q-epilogue/turn_protocol_checks.py

A hang (the named-barrier turn) shows as the last test named by ``-v`` before the timeout.

1. The ping-pong turn on named barriers (bar.sync / bar.arrive 8 and 9; consumer 1 arrives
   once before its loop and skips its last pass of a program). Grids of 1, 2 and 3 programs
   (one program takes 48, 24 or 16 tiles in a row: hundreds of turns on each barrier) and of
   47 programs for 48 tiles (one program takes 2 tiles, the others 1: programs with different
   tile counts side by side), every allowed (BLOCK_N, stages) class, D 64/128, full,
   top-left and bottom-right causal masks; and tiles of a single key block (Lk <= BLOCK_N:
   three turns per tile). Expected: all pass, none hangs.
2. 300 launches of the default (ws) kernel back to back at the article problem, 132 programs:
   every output bitwise equal to the first (the kernel is deterministic: one program per tile,
   a fixed order), the first at parity. Expected: pass (no state left on a barrier between
   launches or programs shows up as a hang or a wrong tile).
3. The tuned-table entry moved at 293a467 (sm90-d64-causal-l4096 -> fa3-ws): which kernel
   the default launch runs around it, and parity there. Expected: the ws kernel for D=64 causal
   with Lq in 2048..8191 (top-left, bottom-right with Lq <= Lk, GQA); the Triton fallback for
   D=48 (padded to the d64 key), bottom-right with Lq > Lk, a q that TMA cannot address (head
   dim stride 2), and Lq = 8192 (the next bucket, a Triton entry); all at parity.
"""
from __future__ import annotations

import pytest
import torch

import flashrepro
from flashrepro import KernelConfig
from flashrepro.kernels import fwd_gluon_ws
from tests.reference import assert_parity, check_parity, poisoned_like, random_qkv, relayout

DEV = torch.device("cuda")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")

WS = [KernelConfig(128, bn, 8, s, tma=True, overlap=True, warp_specialize=True)
      for bn, s in [(128, 2), (64, 2), (64, 4)]]
MASKS = {"full": (False, False), "top-left": (True, False), "bottom-right": (True, True)}


@pytest.mark.parametrize("programs", [1, 2, 3, 47])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("config", WS, ids=KernelConfig.label)
def test_turn_over_many_tiles_per_program(config, d, mask, programs, monkeypatch):
    monkeypatch.setattr(flashrepro.api, "_num_sms", lambda q: programs)
    causal, bottom_right = MASKS[mask]
    q, k, v = random_qkv(2, 3, 1000, 1100, d, torch.float16, DEV)  # 2·3·8 = 48 tiles
    check_parity(q, k, v, causal=causal, bottom_right=bottom_right, config=config)


@pytest.mark.parametrize("programs", [1, 3])
@pytest.mark.parametrize("lq,lk", [(100, 100), (300, 64), (1000, 128)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_turn_with_one_key_block_per_tile(causal, lq, lk, programs, monkeypatch):
    monkeypatch.setattr(flashrepro.api, "_num_sms", lambda q: programs)
    q, k, v = random_qkv(2, 3, lq, lk, 128, torch.bfloat16, DEV)
    check_parity(q, k, v, causal=causal, config="fa3-ws")


def test_back_to_back_launches_agree():
    q, k, v = random_qkv(2, 16, 1024, 1024, 128, torch.float16, DEV)
    first, lse = check_parity(q, k, v, causal=True, config="fa3-ws")
    out = poisoned_like(q)
    for i in range(300):
        out.fill_(float("nan"))
        flashrepro.attention(q, k, v, causal=True, config="fa3-ws", out=out)
        assert torch.equal(out, first), f"launch {i + 1} differs from the first"
    assert_parity(first, lse, q, k, v, causal=True)


ROUTES = [  # b, h, h_kv, lq, lk, d, bottom_right, q head-dim stride, expect the ws kernel
    (1, 2, 2, 4096, 4096, 64, False, 1, True),
    (1, 2, 2, 4133, 4133, 64, False, 1, True),
    (1, 2, 2, 8191, 8191, 64, False, 1, True),
    (1, 2, 2, 4095, 4095, 64, False, 1, True),   # bucket 2048, a ws entry as before
    (1, 4, 2, 4096, 4096, 64, False, 1, True),   # GQA
    (1, 2, 2, 4096, 5000, 64, True, 1, True),    # bottom-right, Lq <= Lk
    (1, 2, 2, 4096, 4000, 64, True, 1, False),   # bottom-right, Lq > Lk: rows without keys
    (1, 2, 2, 4096, 4096, 48, False, 1, False),  # D=48: the d64 key, not a Gluon head dim
    (1, 2, 2, 4096, 4096, 64, False, 2, False),  # q not TMA-addressable
    (1, 2, 2, 8192, 8192, 64, False, 1, False),  # bucket 8192: a Triton entry
]


@pytest.mark.parametrize("case", ROUTES, ids=lambda c: "-".join(map(str, c)))
def test_default_launch_around_the_moved_entry(case, monkeypatch):
    b, h, h_kv, lq, lk, d, bottom_right, d_step, expect_ws = case
    calls = []
    real = fwd_gluon_ws.launch
    monkeypatch.setattr(fwd_gluon_ws, "launch",
                        lambda *a, **kw: (calls.append(kw), real(*a, **kw))[1])
    q, k, v = random_qkv(b, h, lq, lk, d, torch.float16, DEV, h_kv=h_kv)
    if d_step != 1:
        q = relayout(q, d_step=d_step)
    check_parity(q, k, v, causal=True, bottom_right=bottom_right, enable_gqa=h != h_kv,
                 config=None)
    assert bool(calls) == expect_ws, f"ws kernel ran {len(calls)} times, expected {expect_ws}"
