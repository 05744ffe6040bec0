"""Registers, stack (spills) and shared memory of the varlen kernel at each tile of
probe.py, compiled offline (no GPU) for one target: D = 128, bf16, causal.
(lab/2026-12-06-varlen-tile-sweep)

    PYTHONPATH=src:. python lab/2026-12-06-varlen-tile-sweep/resources.py sm_90
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from triton.runtime.driver import driver

from flashrepro.kernels.varlen import varlen_fwd_kernel
from flashrepro_harness.analysis.disasm import disassemble_cubin
from flashrepro_harness.analysis.offline_compile import TARGETS, _OfflineDriver

CONFIGS = [(64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 128, 8, 3),
           (128, 32, 4, 3), (64, 128, 4, 3), (64, 64, 4, 4), (128, 64, 8, 4)]

driver.set_active(_OfflineDriver(TARGETS[sys.argv[1]]))
TOTAL, H, H_KV, D = 19798, 16, 8, 128
q = torch.empty(TOTAL, H, D, dtype=torch.bfloat16, device="meta")
k = torch.empty(TOTAL, H_KV, D, dtype=torch.bfloat16, device="meta")
cu = torch.empty(17, dtype=torch.int32, device="meta")
lse = torch.empty(1, dtype=torch.float32, device="meta")
for bm, bn, warps, stages in CONFIGS:
    c = varlen_fwd_kernel.warmup(
        q, k, k, q, lse, cu, cu, cu, *q.stride(), *k.stride(), *q.stride(), 1,
        H, H // H_KV, TOTAL, TOTAL, 0.1, HEAD_DIM=D, BLOCK_D=D, BLOCK_M=bm, BLOCK_N=bn,
        CAUSAL=True, STORE_LSE=False, HAS_SEQUSED_K=False, num_warps=warps,
        num_stages=stages, grid=(16 * H, 32))
    with tempfile.TemporaryDirectory() as tmp:
        _, res = disassemble_cubin(c.asm["cubin"], Path(tmp))
    print(f"{sys.argv[1]} {bm}x{bn} w{warps} s{stages}: {res.registers} registers, "
          f"{res.stack_bytes} B stack, {c.metadata.shared} B shared", flush=True)
