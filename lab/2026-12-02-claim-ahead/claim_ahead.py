"""The dynamic schedule's claim, one tile ahead and relaxed, against the claim of c62ae4a and
the table's entry, in one process. (lab/2026-12-02-claim-ahead)

Rows at each causal point (fp16, H=16, B·L=16384):
- ``table``: ``flashrepro.attention`` with the tuned table's entry;
- ``dynamic``: that entry's ws tiles with ``dynamic_schedule`` (this commit's kernel: the next
  tile claimed after the current one's Q loads, a relaxed atomic);
- ``dynamic-c62ae4a``: the same launch of ``fwd_gluon_ws_c62ae4a.py`` beside this file (the
  kernel as it was: the claim after the tile's last key block, acq_rel).
At D=64 L=512 (a non-ws entry) the ws rows use ``128x128 w8 s2 tma overlap ws``. Each row is
checked once against the fp32 reference, then 8 interleaved rounds of 5 calls (L2 flushed,
busy-wait, CUDA events); ratios are per round against ``table``.

    PYTHONPATH=src:. python lab/2026-12-02-claim-ahead/claim_ahead.py
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
from pathlib import Path

import torch

import flashrepro
from flashrepro.configs import KernelConfig, default_config, launch_arch
from flashrepro.counters import stream_counters
from flashrepro.kernels.call import KernelCall
from flashrepro.launch import _gpu_facts
from flashrepro.select import select
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem
from tests.reference import assert_parity

POINTS = ((64, 512), (64, 1024), (64, 2048), (64, 4096), (64, 8192),
          (128, 512), (128, 1024), (128, 2048), (128, 4096), (128, 8192))
WS_AT_D64_L512 = KernelConfig.parse("128x128 w8 s2 tma overlap ws")

_spec = importlib.util.spec_from_file_location(
    "fwd_gluon_ws_c62ae4a", Path(__file__).with_name("fwd_gluon_ws_c62ae4a.py"))
OLD = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(OLD)


def old_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, config: KernelConfig):
    """c62ae4a's ws kernel at the launch select() makes for ``config`` (its own output)."""
    b, h, lq, _ = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((b, h, lq), dtype=torch.float32, device=q.device)
    chosen = select(q, k, v, o, lse, causal=True, scale=None, causal_alignment="top_left",
                    return_lse=True, config=config, **_gpu_facts(q.device))
    call = chosen.bind(chosen.operands(q, k, v, o, lse))
    assert call.kernel.__name__ == OLD.attn_fwd_gluon_ws_kernel.__name__, call.kernel
    old = KernelCall(OLD.attn_fwd_gluon_ws_kernel, call.grid, call.args, call.kwargs)

    def run() -> torch.Tensor:
        old.with_counter(stream_counters(q.device, 1)).run()
        return o
    return run


def measure(d: int, length: int) -> str:
    p = Problem(16384 // length, 16, length, length, d, "float16", True)
    q, k, v = p.inputs("cuda", seed=length)
    entry = default_config(d, True, length, launch_arch())
    ws = entry if entry.warp_specialize else WS_AT_D64_L512
    dynamic = dataclasses.replace(ws, dynamic_schedule=True)
    fns = {"table": lambda: flashrepro.attention(q, k, v, causal=True),
           "dynamic": lambda: flashrepro.attention(q, k, v, causal=True, config=dynamic),
           "dynamic-c62ae4a": old_launch(q, k, v, dynamic)}
    for fn in fns.values():
        assert_parity(fn(), None, q, k, v, causal=True)
    rounds = interleaved_rounds(fns, 8, 5)
    out = [f"D={d} causal L={length} table {entry.label()}: "
           f"{statistics.median(rounds['table']):.1f} µs"]
    for name in ("dynamic", "dynamic-c62ae4a"):
        ratio = [a / b for a, b in zip(rounds[name], rounds["table"], strict=True)]
        out.append(f"{name} {statistics.median(rounds[name]):.1f} µs "
                   f"{statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}]")
    return "; ".join(out)


if __name__ == "__main__":
    for d, length in POINTS:
        print(measure(d, length), flush=True)
