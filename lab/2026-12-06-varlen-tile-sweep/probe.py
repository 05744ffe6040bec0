"""The varlen kernel's tiles on the packed Qwen3 prefill's attention call.

16 sequences of lengths drawn from [128, 2048] (random.Random(0), as `flashrepro model
--generate`'s packed prefill), H=16, H_kv=8, D=128, bf16, causal. Each tile config launches
`varlen_fwd_kernel` as `launch_varlen.varlen_forward` does; its output is checked against
the shipped config's (every element), then all configs are timed in interleaved rounds
(triton.testing.do_bench medians, L2 not flushed: the call reads 40 MB once). References in
the same rounds: flashrepro.attention (the dense kernel) on each sequence in turn, and
FA4's flash_attn_varlen_func where it imports. Writes probe.json and prints a table.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

import flashrepro
from flashrepro.configs import block_dim
from flashrepro.kernels import LOG2_E
from flashrepro.kernels.varlen import varlen_fwd_kernel

H, H_KV, D, DTYPE = 16, 8, 128, torch.bfloat16
CONFIGS = [  # (BLOCK_M, BLOCK_N, num_warps, num_stages); the first is the shipped one
    (64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 128, 8, 3),
    (128, 32, 4, 3), (64, 128, 4, 3), (64, 64, 4, 4), (128, 64, 8, 4),
]
ROUNDS = 7

rng = random.Random(0)
lengths = [rng.randint(128, 2048) for _ in range(16)]
total = sum(lengths)
cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                  device="cuda")
q = torch.randn(total, H, D, device="cuda", dtype=DTYPE)
k, v = (torch.randn(total, H_KV, D, device="cuda", dtype=DTYPE) for _ in range(2))
longest = max(lengths)
flops = sum(4 * H * D * n * (n + 1) / 2 for n in lengths)  # causal: half the scores


def varlen(cfg: tuple[int, int, int, int]):
    bm, bn, warps, stages = cfg
    o = torch.empty_like(q)
    lse = torch.empty(1, dtype=torch.float32, device="cuda")

    def run():
        varlen_fwd_kernel[(len(lengths) * H, triton.cdiv(longest, bm))](
            q, k, v, o, lse, cu, cu, cu, *q.stride(), *k.stride(), *o.stride(), lse.stride(0),
            H, H // H_KV, total, total, LOG2_E / math.sqrt(D),
            HEAD_DIM=D, BLOCK_D=block_dim(D), BLOCK_M=bm, BLOCK_N=bn, CAUSAL=True,
            STORE_LSE=False, HAS_SEQUSED_K=False, num_warps=warps, num_stages=stages)
        return o
    return run


def dense_per_sequence():
    views = [(q[a:b].transpose(0, 1)[None],
              k[a:b].transpose(0, 1)[None], v[a:b].transpose(0, 1)[None])
             for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)]

    def run():
        for qq, kk, vv in views:
            flashrepro.attention(qq, kk, vv, causal=True, enable_gqa=True)
    return run


runs = {f"varlen {c[0]}x{c[1]} w{c[2]} s{c[3]}": varlen(c) for c in CONFIGS}
runs["dense, one call per sequence"] = dense_per_sequence()
try:
    from flash_attn.cute import flash_attn_varlen_func
    runs["fa4 varlen"] = lambda: flash_attn_varlen_func(
        q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
        max_seqlen_k=longest, causal=True)
except Exception as exc:  # a missing peer is reported, not fatal
    print(f"fa4 left out: {type(exc).__name__}: {exc}", file=sys.stderr)

reference = runs[next(iter(runs))]().float().clone()
errors = {}
for name, fn in runs.items():
    if name.startswith("varlen"):
        o = fn()
        o.fill_(float("nan"))
        errors[name] = (fn().float() - reference).abs().max().item()
times: dict[str, list[float]] = {name: [] for name in runs}
for r in range(ROUNDS):
    order = list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]
    for name in order:
        times[name].append(do_bench(runs[name], warmup=25, rep=100))
base = statistics.median(times[next(iter(runs))])
rows = []
for name, ts in times.items():
    ms = statistics.median(ts)
    rows.append({"run": name, "ms": ms, "tflops": flops / ms / 1e9, "over_shipped": ms / base,
                 "round_range": [min(ts), max(ts)], "max_err_vs_shipped": errors.get(name)})
    print(f"{name:32s} {ms * 1e3:8.1f} us  {flops / ms / 1e9:6.1f} TFLOP/s  "
          f"{ms / base:5.3f}  err {errors.get(name)}")
meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "lengths": lengths, "rounds": ROUNDS}
Path(sys.argv[1] if len(sys.argv) > 1 else "probe.json").write_text(
    json.dumps({"meta": meta, "rows": rows}, indent=1))
