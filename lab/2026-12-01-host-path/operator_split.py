"""Where the eager operator call's extra host time goes: the plan path, the plan path with the
LSE stored, the operators' Python kernel called directly, and each operator through torch's
dispatcher, timed in interleaved rounds in one process (GPU).

    PYTHONPATH=src python lab/2026-12-01-host-path/operator_split.py [--out DIR]

Each step adds one thing to the one before it, so the differences of adjacent rows split the
operator's cost: storing the LSE (an allocation and the STORE_LSE kernel), the op's Python
wrapper, torch's dispatcher. Also prints, per launch plan, whether it launches directly
(``flashrepro.direct``) and how many TMA descriptors it has encoded, and a cProfile of 300
calls of the slowest row against the plan path (cProfile's own cost inflates both alike) and,
last (CUPTI stays attached after a profiler session), the CUDA runtime and driver calls and the
kernels that torch.profiler sees in 20 calls of each.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
from pathlib import Path

import torch
from tabulate import tabulate

import flashrepro
from flashrepro import env, launch, ops
from flashrepro.bench.timing import host_and_eager_rounds


def _profile(fn, calls: int) -> str:
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # the GPU stays busy: no call waits for the queue
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    return text.getvalue()


def _api_calls(fn, calls: int) -> str:
    """torch.profiler's CPU-side CUDA calls and GPU kernels of ``calls`` calls of ``fn``."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="count", row_limit=16, max_name_column_width=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 16, 1024, 128, device="cuda", dtype=torch.float16)
               for _ in range(3))
    op_args = (q, k, v, True, None, False, "top_left", None)
    fns = {
        "flashrepro.attention (plan path)": lambda: flashrepro.attention(q, k, v, causal=True),
        "flashrepro.attention, return_lse": lambda: flashrepro.attention(
            q, k, v, causal=True, return_lse=True),
        "ops._forward (the op's Python kernel)": lambda: ops._forward(*op_args),
        "ops.attention_lse (.default)": lambda: ops.attention_lse(*op_args),
        "ops.attention (.default)": lambda: ops.attention(*op_args),
        "torch.ops.flashrepro.attention (packet)": lambda: torch.ops.flashrepro.attention(
            *op_args),
        "ops.attention_bshd (.default)": lambda: ops.attention_bshd(*op_args),
    }
    for fn in fns.values():
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    timed = host_and_eager_rounds(fns, calls=50, repeats=10)
    rows = [[name, f"{h:.1f}", f"{e:.1f}"] for name, (h, e) in timed.items()]
    plans = [[str(key[20]), str(key[-1] if len(key) > 23 else None), plan.direct is not None,
              getattr(plan.direct, "encodes", None)] for key, plan in launch._PLANS.items()]
    slowest = max(timed, key=lambda name: timed[name][0])
    meta = env.capture()
    text = (f"B=2 H=16 L=1024 D=128 fp16 causal; {meta['gpu']['name'] if meta['gpu'] else ''}, "
            f"torch {meta['torch']}, triton {meta['triton']}, {meta['date']}, commit "
            f"{meta.get('git_commit')}\n\n"
            + tabulate(rows, headers=["call", "host µs/call", "eager µs/call"]) + "\n\n"
            + tabulate(plans, headers=["plan: return_lse", "out 16-byte aligned", "direct",
                                       "descriptors encoded"]) + "\n\n"
            + f"cProfile, 300 calls: {slowest}\n" + _profile(fns[slowest], 300)
            + "cProfile, 300 calls: plan path\n"
            + _profile(fns["flashrepro.attention (plan path)"], 300))
    for name in (slowest, "flashrepro.attention (plan path)"):
        text += f"\ntorch.profiler, 20 calls: {name}\n" + _api_calls(fns[name], 20)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "operator_split.md").write_text(text)
        (args.out / "operator_split.json").write_text(json.dumps(
            {"env": meta, "rows": {k: {"host_us": h, "eager_us": e}
                                   for k, (h, e) in timed.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
