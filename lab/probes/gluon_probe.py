"""First GPU run of the Gluon kernel with FA3's softmax/wgmma overlap (lab/2026-11-29-gluon-softmax-overlap/).

Run from the repository root on an H200:

    PYTHONPATH=src:. python lab/probes/gluon_probe.py

1. Parity of :mod:`flashrepro.kernels.fwd_gluon` against the tests' float32 reference and rule
   (``tests.reference.assert_parity``: 2x torch SDPA's error + floor, LSE, NaN-poisoned
   output) over ragged, GQA, bottom-right and bf16 cases, for every launch config timed below.
2. Times, in interleaved rounds with the project's timer, at the article problem causal and
   not, and at B=4, L=4096 non-causal: the Gluon configs against flashrepro's default (the
   Triton kernel), torch's cuDNN and flash backends (ratios to both: :func:`ratio_rows`).
"""

from __future__ import annotations

import math
import statistics
import traceback

import torch
from tabulate import tabulate

from flashrepro.bench import kernels as K
from flashrepro.bench.problem import Problem, load_article
from flashrepro.bench.timing import interleaved_rounds
from flashrepro.kernels import fwd_gluon
from flashrepro.launch import _heads_per_group
from tests.reference import assert_parity, poisoned_like, random_qkv

LOG2_E = 1.4426950408889634
CONFIGS = [(64, 64, 2, 4), (64, 64, 3, 4), (64, 128, 2, 4), (128, 64, 2, 8), (128, 128, 2, 8)]
CASES = [  # b, h, h_kv, lq, lk, d, causal, bottom_right, dtype
    (2, 3, 3, 1024, 1024, 128, False, False, torch.float16),
    (2, 3, 3, 1024, 1024, 128, True, False, torch.float16),
    (2, 3, 3, 113, 203, 128, False, False, torch.float16),
    (2, 3, 3, 113, 203, 128, True, False, torch.float16),
    (1, 4, 2, 1000, 1025, 64, True, False, torch.float16),
    (2, 2, 2, 203, 113, 64, False, False, torch.float16),
    (1, 2, 2, 1, 1024, 128, True, True, torch.float16),
    (1, 2, 2, 100, 300, 128, True, True, torch.float16),
    (2, 3, 3, 1024, 1024, 128, True, False, torch.bfloat16),
    (1, 4, 2, 1000, 1025, 64, False, False, torch.bfloat16),
]


def launch_args(q, k, out, lse, bottom_right):
    """(o, lse, heads_per_group, causal_offset, qk_scale) of a direct kernel launch, as
    :func:`flashrepro.attention` would pass them; ``o``/``lse`` fresh where None."""
    b, h, lq, d = q.shape
    lk = k.shape[2]
    o = torch.empty_like(q) if out is None else out
    lse = torch.empty(b, h, lq, device=q.device) if lse is None else lse
    return (o, lse, _heads_per_group(b * h, lk, d, q), lk - lq if bottom_right else 0,
            LOG2_E / math.sqrt(d))


def gluon_call(q, k, v, causal, cfg, out=None, lse=None, bottom_right=False):
    bm, bn, stages, warps = cfg
    o, lse, hpg, offset, qk_scale = launch_args(q, k, out, lse, bottom_right)

    def call():
        fwd_gluon.launch(q, k, v, o, lse, causal=causal, qk_scale=qk_scale,
                         causal_offset=offset, heads_per_group=hpg, store_lse=True,
                         block_m=bm, block_n=bn, num_stages=stages, num_warps=warps)
        return o
    return call


def parity(configs=CONFIGS, cases=CASES, call=gluon_call, label=str) -> list[list]:
    """Each config against each case: ``call(q, k, v, causal, cfg, o, lse, bottom_right)``
    gives the launch; rows (``label(cfg)``, case, "ok" or the failure), each printed as it
    comes. A probe: a failure is reported and the loop goes on."""
    rows = []
    for cfg in configs:
        for b, h, hkv, lq, lk, d, causal, br, dtype in cases:
            name = f"{b}x{h}/{hkv} {lq}x{lk} d{d} {'causal' if causal else 'full'}"
            name += " br" * br + f" {str(dtype)[6:]}"
            q, k, v = random_qkv(b, h, lq, lk, d, dtype, torch.device("cuda"), h_kv=hkv)
            o, lse = poisoned_like(q), torch.full((b, h, lq), float("nan"), device="cuda")
            try:
                call(q, k, v, causal, cfg, o, lse, br)()
                torch.cuda.synchronize()
                assert_parity(o, lse, q, k, v, causal=causal, bottom_right=br)
                rows.append([label(cfg), name, "ok"])
            except Exception as exc:  # report and go on: a probe
                rows.append([label(cfg), name, f"FAIL {type(exc).__name__}: {str(exc)[:90]}"])
                traceback.print_exc(limit=2)
            print(rows[-1], flush=True)
    return rows


def peer_calls(q, k, v, causal: bool) -> dict:
    """flashrepro's default launch and torch's cuDNN and flash backends on (q, k, v): the peers
    every probe times beside its variants (:func:`ratio_rows` needs the last two)."""
    return {name: K.make_call(name, (q, k, v), causal)
            for name in ("flashrepro", "torch-cudnn", "torch-flash")}


def ratio_rows(problem: Problem, per_round: dict[str, list[float]]) -> list[list]:
    """One row per kernel of interleaved rounds (which include torch-flash and torch-cudnn):
    median µs, TFLOP/s, and the medians of its per-round ratios to torch flash and cuDNN."""
    flash, cudnn = per_round["torch-flash"], per_round["torch-cudnn"]
    rows = []
    for name, us in per_round.items():
        vs_flash = statistics.median(a / b for a, b in zip(us, flash, strict=True))
        vs_cudnn = statistics.median(a / b for a, b in zip(us, cudnn, strict=True))
        rows.append([problem.key(), name, f"{statistics.median(us):.1f}",
                     f"{problem.flops() / statistics.median(us) / 1e6:.0f}", f"{vs_flash:.3f}",
                     f"{vs_cudnn:.3f}"])
    return rows


RATIO_HEADERS = ["problem", "kernel", "µs", "TFLOP/s", "vs torch flash", "vs cuDNN"]


def timing(problem: Problem) -> list[list]:
    q, k, v = problem.inputs()
    fns = peer_calls(q, k, v, problem.causal)
    for cfg in CONFIGS:
        fns[f"gluon {cfg}"] = gluon_call(q, k, v, problem.causal, cfg)
    return ratio_rows(problem, interleaved_rounds(fns, rounds=30, calls_per_round=10))


def main() -> None:
    rows = parity()
    print(tabulate(rows, ["config (BM, BN, stages, warps)", "case", "parity"],
                   tablefmt="github"))
    article, _ = load_article()
    problems = [article, Problem(**{**article.as_dict(), "causal": False}),
                Problem(batch=4, heads=16, seqlen_q=4096, seqlen_k=4096, head_dim=128,
                        dtype="float16", causal=False)]
    out = []
    for problem in problems:
        out += timing(problem)
    print(tabulate(out, RATIO_HEADERS, tablefmt="github"))


if __name__ == "__main__":
    main()
