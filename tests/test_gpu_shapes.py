"""The shape lists of FlashAttention's own test suite as a parametrized GPU suite.

Sequence-length pairs and head dims are those of ``test_flash_attn_output`` /
``test_flash_attn_varlen_output`` in Dao-AILab/flash-attention, ``tests/test_flash_attn.py``
(odd lengths, Lq != Lk both ways, head dims 32..256 including 40, 59, 80, 96, 111, 160, 192,
224); its MHA/GQA head counts (6 query heads, 6 or 3 key/value heads); float16 and
bfloat16; no mask, top-left and bottom-right causal masks. Each case must pass the parity rule
of :func:`tests.reference.check_parity` (error against a float32 reference at most 2x torch
SDPA's error on the same inputs, plus 1e-3 for float16 and 8e-3 for bfloat16; NaN-poisoned
output, every element checked, LSE checked).

Most of the suite's time is Triton compiling: each head dim, dtype, mask and each pattern of
"length or stride divisible by 16" is its own kernel binary. So by default every (lengths,
head dim) pair runs once, with one of the 12 (mask, heads, dtype) combinations, chosen so that
each lengths pair meets all 12 and each head dim 10 of them (120 cases, ~2 min on an H200
with a cold Triton cache). ``FLASHREPRO_FULL_SHAPES=1`` runs the full product (1440 cases).
"""

from __future__ import annotations

import itertools
import os
import zlib

import pytest
import torch

from tests.reference import check_parity, random_qkv

SEQLENS = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256),
           (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048)]
HEAD_DIMS = [32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256]
MASKS = {"full": (False, False), "top-left": (True, False), "bottom-right": (True, True)}
HEADS = {"mha": 6, "gqa": 3}  # key/value heads for 6 query heads
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BATCH, NHEADS = 2, 6

COMBOS = list(itertools.product(MASKS, HEADS, DTYPES))  # 12


def _cases() -> list[tuple]:
    if os.environ.get("FLASHREPRO_FULL_SHAPES", "0") == "1":
        return list(itertools.product(SEQLENS, HEAD_DIMS, MASKS, HEADS, DTYPES))
    # (i + 5 j) mod 12 with 5 coprime to 12: lengths pair i meets every combination once
    return [((lq, lk), d, *COMBOS[(i + 5 * j) % len(COMBOS)])
            for i, (lq, lk) in enumerate(SEQLENS) for j, d in enumerate(HEAD_DIMS)]


CASES = _cases()


def _case_id(case: tuple) -> str:
    (lq, lk), d, mask, heads, dtype = case
    return f"{lq}x{lk}-d{d}-{mask}-{heads}-{dtype}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_flash_attention_shapes(case: tuple, device: torch.device) -> None:
    (lq, lk), d, mask, heads, dtype = case
    causal, bottom_right = MASKS[mask]
    gen = torch.Generator(device=device).manual_seed(zlib.crc32(_case_id(case).encode()))
    q, k, v = random_qkv(BATCH, NHEADS, lq, lk, d, DTYPES[dtype], device, h_kv=HEADS[heads],
                         generator=gen)
    check_parity(q, k, v, causal=causal, bottom_right=bottom_right, enable_gqa=True)
