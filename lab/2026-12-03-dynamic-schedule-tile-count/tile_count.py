"""Snake order against the dynamic schedule as the tiles per program grow, and the dynamic
claim's atomics relaxed against acq_rel. (lab/2026-12-03-dynamic-schedule-tile-count)

At each causal point (fp16, H=16, D in {64, 128}, L in {512, 1024, 2048, 4096}) and each
B·L in {2048, 4096, 8192, 16384} (about 2, 4, 8 and 15.5 tiles of 128 rows per program on
132 SMs), rows:
- ``snake``: the table's ws entry with the static (snake) order; where the entry is not a
  ws kernel (D=64 L=512), ``128x128 w8 s2 tma overlap ws``;
- ``dynamic``: the same tiles with ``dynamic_schedule`` (this commit's kernel: relaxed
  atomics);
- ``dynamic-acq_rel``: the same launch of ``fwd_gluon_ws_c62ae4a.py`` from
  lab/2026-12-02-claim-ahead (the kernel as it was before this commit: the same claim,
  acq_rel atomics), at B·L = 16384 only.
Each row is checked once against the fp32 reference, then 8 interleaved rounds of 5 calls (L2
flushed, busy-wait, CUDA events). Ratios per round against ``snake``.

    PYTHONPATH=src:. python lab/2026-12-03-dynamic-schedule-tile-count/tile_count.py
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
from pathlib import Path

import torch
import triton

import flashrepro
from flashrepro.configs import KernelConfig, default_config, launch_arch
from flashrepro.counters import stream_counters
from flashrepro.kernels.call import KernelCall
from flashrepro.launch import _gpu_facts
from flashrepro.select import select
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem
from tests.reference import assert_parity

HEAD_DIMS = (64, 128)
LENGTHS = (512, 1024, 2048, 4096)
TOKENS = (2048, 4096, 8192, 16384)  # B·L
HEADS = 16
WS_AT_D64_L512 = KernelConfig.parse("128x128 w8 s2 tma overlap ws")

_spec = importlib.util.spec_from_file_location(
    "fwd_gluon_ws_c62ae4a",
    Path(__file__).parent.parent / "2026-12-02-claim-ahead" / "fwd_gluon_ws_c62ae4a.py")
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


def measure(d: int, length: int, tokens: int, num_sms: int) -> str:
    batch = tokens // length
    p = Problem(batch, HEADS, length, length, d, "float16", True)
    q, k, v = p.inputs("cuda", seed=length + tokens)
    entry = default_config(d, True, length, launch_arch())
    snake = dataclasses.replace(entry if entry.warp_specialize else WS_AT_D64_L512,
                                dynamic_schedule=False)
    dynamic = dataclasses.replace(snake, dynamic_schedule=True)
    tiles = batch * HEADS * triton.cdiv(length, snake.block_m)
    fns = {"snake": lambda: flashrepro.attention(q, k, v, causal=True, config=snake),
           "dynamic": lambda: flashrepro.attention(q, k, v, causal=True, config=dynamic)}
    if tokens == TOKENS[-1]:
        fns["dynamic-acq_rel"] = old_launch(q, k, v, dynamic)
    for fn in fns.values():
        assert_parity(fn(), None, q, k, v, causal=True)
    rounds = interleaved_rounds(fns, 8, 5)
    out = [f"D={d} L={length} B={batch} tiles/program={tiles / num_sms:.1f} "
           f"{snake.label()}: snake {statistics.median(rounds['snake']):.1f} µs"]
    for name in list(fns)[1:]:
        ratio = [a / b for a, b in zip(rounds[name], rounds["snake"], strict=True)]
        out.append(f"{name} {statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}]")
    return "; ".join(out)


if __name__ == "__main__":
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}")
    for d in HEAD_DIMS:
        for length in LENGTHS:
            for tokens in TOKENS:
                print(measure(d, length, tokens, sms), flush=True)
