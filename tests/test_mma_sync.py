"""The mma.sync path on the GPU at hand: parity of every config its default launch can pick.

On sm_80/86/89 the whole GPU suite runs Triton's mma.sync code; on sm_90 it runs wgmma, and
the mma.sync code runs only with ``DISABLE_MMA_V3=1``, which Triton reads when it compiles, so
each case is a child process with it set (as ``reproduce``'s mma.sync rows are). The child
checks the default launch (P in registers for 64 < D <= 128, ``configs.default_config``), the
article launch and the named p-in-registers launch against the float64 reference, then that
every kernel it compiled is mma.sync code (no wgmma in the PTX).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flashrepro.configs import MMA_V3_ARCHS, mma_sync_arch

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, torch
from flashrepro.configs import P_IN_REGISTERS, default_config, launch_arch, mma_sync_arch
from flashrepro.kernels.fwd import attn_fwd_kernel
from tests.reference import check_parity, compiled_kernels, random_qkv

d, dtype, device = int(sys.argv[1]), getattr(torch, sys.argv[2]), torch.device("cuda")
arch = launch_arch(device)
assert mma_sync_arch(arch), f"DISABLE_MMA_V3=1 should give the mma.sync path, arch {arch}"
assert (default_config(d, False, 1024, arch) == P_IN_REGISTERS) == (d > 64)
for causal in (False, True):
    for lq, lk in ((113, 203), (1024, 1024), (1, 1024), (1025, 1000)):
        for config in (None, "article", "p-in-registers"):
            q, k, v = random_qkv(2, 3, lq, lk, d, dtype, device)
            check_parity(q, k, v, causal=causal, config=config)
ptx = [kernel.asm["ptx"] for kernel in compiled_kernels(attn_fwd_kernel)]
assert len(ptx) >= 4, f"expected the kernels of two configs x two masks, got {len(ptx)}"
assert all("mma.sync" in p and "wgmma" not in p for p in ptx), "a kernel is not mma.sync code"
print(f"{len(ptx)} mma.sync kernels pass")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim", [64, 96, 128])
def test_mma_sync_parity(head_dim: int, dtype: str) -> None:
    major, minor = torch.cuda.get_device_capability()
    arch = 10 * major + minor
    if not (mma_sync_arch(arch) or arch in MMA_V3_ARCHS):
        pytest.skip(f"sm_{arch}: Triton builds no mma.sync code here, DISABLE_MMA_V3 or not")
    env = {**os.environ, "DISABLE_MMA_V3": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run([sys.executable, "-c", CHILD, str(head_dim), dtype], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, f"child failed:\n{run.stdout}\n{run.stderr[-4000:]}"
    assert "mma.sync kernels pass" in run.stdout
