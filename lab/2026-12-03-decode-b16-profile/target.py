"""Two calls each of flashrepro.attention_kvcache, SDPA cuDNN and SDPA flash at a decode shape
(L_q = 1, GQA 16/8, D = 128, bf16, every cache full), for Nsight Compute to profile
(lab/2026-12-03-decode-b16-profile/ncu.sh).

    PYTHONPATH=src python lab/2026-12-03-decode-b16-profile/target.py B L_K
"""

import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import flashrepro

b, l_k = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator("cuda").manual_seed(0)
q = torch.randn(b, 16, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
k, v = (torch.randn(b, 8, l_k, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        for _ in range(2))
used = torch.full((b,), l_k, dtype=torch.int32, device="cuda")
for _ in range(2):
    flashrepro.attention_kvcache(q, k, v, used, causal=True, enable_gqa=True)
for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
    with sdpa_kernel([backend]):
        for _ in range(2):
            sdpa(q, k, v, enable_gqa=True)
torch.cuda.synchronize()
