"""The ws kernel's static persistent launch with the split tail (``SPLIT_TAIL``: the last two
rounds' tiles shared out as equal runs of key blocks, kernels/fwd_gluon_ws.py
``_split_tail``) against the same launch without it (``whole``). (lab/2026-12-03-split-tail)

At each non-causal point the default launch is built once with select(); ``split`` adds the
split tail, its stream counter and a float32 scratch. Both outputs start as NaN and are checked
against the fp32 reference (tests/reference.py), the split one on three launches in a row (its
tickets must come back to 0), and with the LSE stored at the ragged points. Then 12
interleaved rounds of 5 calls (L2 flushed, busy-wait, CUDA events); ratios per round.

    PYTHONPATH=src:. python lab/2026-12-03-split-tail/probe.py
"""

from __future__ import annotations

import statistics

import torch
import triton

from flashrepro.counters import stream_counters
from flashrepro.kernels.call import KernelCall
from flashrepro.launch import _gpu_facts
from flashrepro.select import select
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem
from tests.reference import assert_parity

POINTS = [  # (D, L, B, dtype); H = 16
    (128, 1024, 16, "float16"), (128, 2048, 8, "float16"), (128, 4096, 4, "float16"),
    (128, 8192, 2, "float16"), (128, 16384, 1, "float16"), (128, 16384, 1, "bfloat16"),
    (64, 2048, 8, "float16"), (64, 4096, 4, "float16"), (64, 8192, 2, "float16"),
    (64, 16384, 1, "float16"), (64, 16384, 1, "bfloat16"),
]
RAGGED = [(128, 16000, 1, "float16"), (64, 16300, 1, "bfloat16"), (128, 3000, 3, "bfloat16")]


def launches(p: Problem, q, k, v, return_lse: bool):
    """(whole, split) runners of the default launch for q, k, v, and their (o, lse)."""
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), dtype=torch.float32, device=q.device)
    chosen = select(q, k, v, o, lse, causal=False, scale=None, causal_alignment="top_left",
                    return_lse=return_lse, config=None, **_gpu_facts(q.device))
    call = chosen.bind(chosen.operands(q, k, v, o, lse))
    assert call.kernel.__name__ == "attn_fwd_gluon_ws_kernel", call.kernel
    assert "DYNAMIC_SCHEDULE" not in call.kwargs
    num_consumers = call.kwargs["NUM_CONSUMERS"]
    scratch = torch.empty(2 * call.grid[0] * num_consumers * 64 * (p.head_dim + 2),
                          dtype=torch.float32, device=q.device)
    counters = stream_counters(q.device, 1)
    split = KernelCall(call.kernel, call.grid, call.args,
                       {**call.kwargs, "SPLIT_TAIL": True, "tile_counter": counters,
                        "partials": scratch})

    def run(c: KernelCall):
        def fn():
            c.run()
            return o
        return fn
    return run(call), run(split), o, lse, counters, call


def check(p: Problem, seed: int, return_lse: bool) -> None:
    q, k, v = p.inputs("cuda", seed=seed)
    whole, split, o, lse, counters, call = launches(p, q, k, v, return_lse)
    tiles = p.batch * p.heads * triton.cdiv(p.seqlen_q, 64 * call.kwargs["NUM_CONSUMERS"])
    for name, fn in (("whole", whole), ("split", split), ("split", split), ("split", split)):
        o.fill_(float("nan"))
        lse.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        assert_parity(o, lse if return_lse else None, q, k, v, causal=False)
        assert int(counters.abs().sum()) == 0, f"{name}: tickets left nonzero"
    print(f"parity ok: {p.dtype} D={p.head_dim} L={p.seqlen_q} B={p.batch} lse={return_lse} "
          f"tiles={tiles} grid={call.grid[0]} remainder={tiles % call.grid[0]}", flush=True)


def measure(d: int, length: int, batch: int, dtype: str) -> str:
    p = Problem(batch, 16, length, length, d, dtype, False)
    check(p, length + d, False)
    q, k, v = p.inputs("cuda", seed=length + d + 1)
    whole, split, *_ = launches(p, q, k, v, False)
    rounds = interleaved_rounds({"whole": whole, "split": split}, 12, 5)
    ratio = [a / b for a, b in zip(rounds["split"], rounds["whole"], strict=True)]
    flops = 4 * batch * 16 * length * length * d
    return (f"{dtype} D={d} full L={length} B={batch}: whole "
            f"{statistics.median(rounds['whole']):.1f} µs "
            f"({flops / statistics.median(rounds['whole']) / 1e6:.0f} TFLOP/s); split / whole "
            f"{statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}] "
            f"({flops / statistics.median(rounds['split']) / 1e6:.0f} TFLOP/s)")


if __name__ == "__main__":
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}",
          flush=True)
    for d, length, batch, dtype in RAGGED:
        check(Problem(batch, 16, length, length, d, dtype, False), length, True)
    for d, length, batch, dtype in POINTS:
        print(measure(d, length, batch, dtype), flush=True)
