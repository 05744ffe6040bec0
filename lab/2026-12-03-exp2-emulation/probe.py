"""The ws kernel with some of the softmax's exponentials on the FMA pipes instead of the MUFU
(``EXP2_POLY`` of every 8, kernels/fwd_gluon.py ``_exp2``), against all on the MUFU.
(lab/2026-12-03-exp2-emulation)

At each point (H=16, B·L=16384 as the sweep, plus the article problem) the table's launch for
the default config is built once with select(), then run with EXP2_POLY in POLYS: each row is
checked against the fp32 reference (tests/reference.py's rule, fp16 and bf16), then timed in
10 interleaved rounds of 5 calls (L2 flushed, busy-wait, CUDA events). Ratios per round
against ``poly0`` (all on the MUFU, the kernel as it was).

    PYTHONPATH=src:. python lab/2026-12-03-exp2-emulation/probe.py
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

POINTS = [  # (D, causal, L, B)
    (64, False, 1024, 16), (64, False, 4096, 4), (64, False, 8192, 2), (64, False, 16384, 1),
    (64, True, 512, 32), (64, True, 1024, 16), (64, True, 8192, 2), (64, True, 16384, 1),
    (128, False, 8192, 2), (128, False, 16384, 1), (128, True, 16384, 1),
    (128, True, 1024, 2),  # the article problem
]
POLYS = (0, 1, 2)


def launch(p: Problem, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, poly: int):
    """The default launch of select() for these inputs, with EXP2_POLY = poly."""
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    config = default_config(p.head_dim, p.causal, p.seqlen_q, launch_arch())
    chosen = select(q, k, v, o, lse, causal=p.causal, scale=None, causal_alignment="top_left",
                    return_lse=False, config=None, **_gpu_facts(q.device))
    call = chosen.bind(chosen.operands(q, k, v, o, lse))
    assert call.kernel.__name__ == "attn_fwd_gluon_ws_kernel", call.kernel
    call = KernelCall(call.kernel, call.grid, call.args, {**call.kwargs, "EXP2_POLY": poly})
    call = call.with_counter(stream_counters(q.device, 1))

    def run() -> torch.Tensor:
        call.run()
        return o
    return run, config, call.kwargs.get("DYNAMIC_SCHEDULE", False)


def measure(d: int, causal: bool, length: int, batch: int, dtype: str) -> str:
    p = Problem(batch, 16, length, length, d, dtype, causal)
    q, k, v = p.inputs("cuda", seed=length + d)
    fns = {}
    for poly in POLYS:
        fn, config, dynamic = launch(p, q, k, v, poly)
        assert_parity(fn(), None, q, k, v, causal=causal)
        fns[f"poly{poly}"] = fn
    rounds = interleaved_rounds(fns, 10, 5)
    base = rounds["poly0"]
    out = [f"{dtype} D={d} {'causal' if causal else 'full'} L={length} B={batch} "
           f"{config.label()}{' (dynamic)' if dynamic else ''}: poly0 "
           f"{statistics.median(base):.1f} µs"]
    for name in list(fns)[1:]:
        ratio = [a / b for a, b in zip(rounds[name], base, strict=True)]
        out.append(f"{name} {statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}]")
    return "; ".join(out)


if __name__ == "__main__":
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}",
          flush=True)
    for d, causal, length, batch in POINTS:
        for dtype in ("float16", "bfloat16"):
            if dtype == "bfloat16" and not (d == 128 and not causal and length == 16384):
                continue  # bf16: the peak point only (parity of every point is in fp16)
            print(measure(d, causal, length, batch, dtype), flush=True)
