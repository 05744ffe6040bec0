"""The ws kernel with each row's max as a tree of depth log2(BLOCK_N / 4) (``TREE``,
kernels/fwd_gluon.py ``_row_max``) against one dependent chain per row (``gl.max``, the kernel
as it was). (lab/2026-12-03-row-max-tree)

At each point (H=16, B·L=16384 as the sweep, plus the article problem) the default launch is
built once with select(), then run with TREE False (``chain``) and True (``tree``): each row
is checked against the fp32 reference (tests/reference.py's rule; fp16, and bf16 at two
points), then timed in 12 interleaved rounds of 5 calls (L2 flushed, busy-wait, CUDA events).
Ratios per round against ``chain``.

    PYTHONPATH=src:. python lab/2026-12-03-row-max-tree/probe.py
"""

from __future__ import annotations

import statistics

import torch
import triton

from flashrepro.configs import default_config, launch_arch
from flashrepro.counters import stream_counters
from flashrepro.kernels.call import KernelCall
from flashrepro.launch import _gpu_facts
from flashrepro.select import select
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem
from tests.reference import assert_parity

POINTS = [  # (D, causal, L, B, dtypes)
    (64, False, 1024, 16, ("float16",)), (64, False, 4096, 4, ("float16", "bfloat16")),
    (64, False, 8192, 2, ("float16",)), (64, False, 16384, 1, ("float16",)),
    (64, True, 512, 32, ("float16",)), (64, True, 1024, 16, ("float16",)),
    (64, True, 8192, 2, ("float16",)), (64, True, 16384, 1, ("float16",)),
    (128, False, 1024, 16, ("float16",)), (128, False, 16384, 1, ("float16", "bfloat16")),
    (128, True, 16384, 1, ("float16",)),
    (128, True, 1024, 2, ("float16",)),  # the article problem
]


def launch(p: Problem, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tree: bool):
    """The default launch of select() for these inputs, with TREE = tree."""
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    chosen = select(q, k, v, o, lse, causal=p.causal, scale=None, causal_alignment="top_left",
                    return_lse=False, config=None, **_gpu_facts(q.device))
    call = chosen.bind(chosen.operands(q, k, v, o, lse))
    assert call.kernel.__name__ == "attn_fwd_gluon_ws_kernel", call.kernel
    call = KernelCall(call.kernel, call.grid, call.args, {**call.kwargs, "TREE": tree})
    call = call.with_counter(stream_counters(q.device, 1))

    def run() -> torch.Tensor:
        call.run()
        return o
    return run, call.kwargs.get("DYNAMIC_SCHEDULE", False)


def measure(d: int, causal: bool, length: int, batch: int, dtype: str) -> str:
    p = Problem(batch, 16, length, length, d, dtype, causal)
    q, k, v = p.inputs("cuda", seed=length + d)
    fns = {}
    for name, tree in (("chain", False), ("tree", True)):
        fn, dynamic = launch(p, q, k, v, tree)
        assert_parity(fn(), None, q, k, v, causal=causal)
        fns[name] = fn
    rounds = interleaved_rounds(fns, 12, 5)
    ratio = [a / b for a, b in zip(rounds["tree"], rounds["chain"], strict=True)]
    config = default_config(d, causal, length, launch_arch())
    return (f"{dtype} D={d} {'causal' if causal else 'full'} L={length} B={batch} "
            f"{config.label()}{' (dynamic)' if dynamic else ''}: chain "
            f"{statistics.median(rounds['chain']):.1f} µs; tree {statistics.median(ratio):.3f} "
            f"[{min(ratio):.3f}-{max(ratio):.3f}]")


if __name__ == "__main__":
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}",
          flush=True)
    for d, causal, length, batch, dtypes in POINTS:
        for dtype in dtypes:
            print(measure(d, causal, length, batch, dtype), flush=True)
