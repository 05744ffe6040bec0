"""GPU checks of attention(scale=0) and of the persistent ws kernel with many tiles per program
(not part of the suite; run on the H200):

    PYTHONPATH=src:. python -m pytest -q -n 8 -p no:cacheprovider lab/2026-11-29-persistent-tile-boundary/scale0_checks.py

1. scale = 0 (documented: the plain mean of the visible values) through the Gluon kernels:
   their softmax masked S with -inf *before* multiplying by qk_scale, and -inf * 0 = NaN
   (found in review at 67c4021; the shared softmax now scales first in masked blocks, as the
   Triton kernel does). Expected: all cases pass.
2. The persistent ws kernel with several tiles per program for every allowed (block_n,
   stages), both head dims and dtypes, GQA, top-left and bottom-right causal masks, ragged
   Lq/Lk, and grids of 132 (the H200's SMs: 448 tiles = 3 rounds + a partial odd round) and
   7 programs (64 tiles each: Q-buffer and K/V-slot phases wrap many times). ws_probe.py
   parity covered (128, 2), (64, 3), (64, 4) fp16 with 5-7 programs; this adds (64, 2), bf16
   and the full mask x GQA product. Expected: all pass.
"""
import pytest
import torch

import flashrepro
from flashrepro import KernelConfig
from tests.reference import check_parity, random_qkv

DEV = torch.device("cuda")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@pytest.mark.parametrize("config", [None, "fa3-ws", "fa3-overlap", KernelConfig(64, 64, 4, 3)],
                         ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_scale_zero(d, causal, config):
    q, k, v = random_qkv(2, 3, 300, 300, d, torch.float16, DEV)
    check_parity(q, k, v, causal=causal, scale=0.0, config=config)


WS = [KernelConfig(128, bn, 8, s, tma=True, overlap=True, warp_specialize=True)
      for bn, s in [(64, 2), (64, 3), (64, 4), (128, 2)]]
MASKS = {"full": (False, False), "top-left": (True, False), "bottom-right": (True, True)}


@pytest.mark.parametrize("programs", [132, 7])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("config", WS, ids=KernelConfig.label)
def test_ws_many_tiles_per_program(config, d, dtype, mask, programs, monkeypatch):
    monkeypatch.setattr(flashrepro.api, "_num_sms", lambda q: programs)
    causal, bottom_right = MASKS[mask]
    b, h, h_kv, lq, lk = 4, 16, 4, 777, 901  # 4·16·7 = 448 tiles
    q, k, v = random_qkv(b, h, lq, lk, d, dtype, DEV, h_kv=h_kv)
    check_parity(q, k, v, causal=causal, bottom_right=bottom_right, enable_gqa=True,
                 config=config)
