"""Registers, stack and shared memory of the library's decode kernel, compiled offline (no GPU)
for one target, at 16/32/64 packed rows, D = 128 (bf16) and 64 (fp16), and the tiles the rule
chooses between. (lab/2026-12-03-decode-tma-tiles)

    PYTHONPATH=src:. python lab/2026-12-03-decode-tma-tiles/resources.py sm_90
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from triton.runtime.driver import driver

from flashrepro.kernels.decode import decode_fwd_kernel
from flashrepro_harness.analysis.disasm import disassemble_cubin
from flashrepro_harness.analysis.offline_compile import TARGETS, _OfflineDriver

driver.set_active(_OfflineDriver(TARGETS[sys.argv[1]]))
B, L_K = 16, 8192
for block_m in (16, 32, 64):
    for d, dtype in ((128, torch.bfloat16), (64, torch.float16)):
        q = torch.empty(B, 16, 1, d, dtype=dtype, device="meta")
        k = torch.empty(B, 8, L_K, d, dtype=dtype, device="meta")
        used = torch.empty(B, dtype=torch.int32, device="meta")
        parts = torch.empty(10, dtype=torch.float32, device="meta")
        for block_n, stages, splits in ((128, 3, 1), (128, 2, 1), (64, 3, 1), (64, 3, 2)):
            c = decode_fwd_kernel.warmup(
                q, k, k, q, q, used, parts, used, *q.stride(), *k.stride(), *q.stride(),
                0, 0, 0, 8, 2, 1, L_K, splits, 0.1, HEAD_DIM=d, BLOCK_D=d, BLOCK_M=block_m,
                BLOCK_N=block_n, CAUSAL=True, SPLIT=splits > 1, STORE_LSE=False, MERGE_S=16,
                MERGE_R=max(1, 4096 // (16 * d)), num_warps=4, num_stages=stages,
                grid=(128, 1, splits))
            with tempfile.TemporaryDirectory() as tmp:
                _, res = disassemble_cubin(c.asm["cubin"], Path(tmp))
            print(f"{sys.argv[1]} rows {block_m:2d} D {d:3d} {block_n}x4x{stages}/{splits}: "
                  f"{res.registers} registers, {res.stack_bytes} B stack, "
                  f"{c.metadata.shared} B shared", flush=True)
