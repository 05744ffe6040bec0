"""Part of the softmax's exponentials by polynomial on the FMA units (session 11, experiment 19).

At D = 64 a consumer's two GEMMs of a 64 x 128 block take about as long on the tensor cores
(2·2·64·128·64 FLOP at 4096 a clock per SM: 512 clocks) as its 8192 MUFU.EX2 on the SFU (16 a
clock per SM: 512 clocks), so with two or three consumers ping-ponging the SFU may set the
pace. ``fwd_gluon_ws.launch(exp2_poly=k)`` computes k of every 8 exponentials with a cubic on
the FMA units instead (FlashAttention-4's trick). On an H200, from the repository root:

    PYTHONPATH=src:. python reproduce/gpu/exp2_probe.py parity|timing

parity: the ws kernel with k = 1, 2, 3 over ``ws_probe``'s cases (ragged, GQA, bottom-right,
bf16, a tile smaller than a consumer's rows), two consumers, and with three at D = 64.
timing: interleaved rounds with the project's timer, the peers (flashrepro's default launch,
torch's cuDNN and flash) and the ws kernel with k = 0 (as it is) to 3 at D = 64 causal (two
consumers, which the table picks up to L = 4096) and non-causal (three, fa3-ws3), and with
k = 0 to 2 at the article problem (D = 128) and B=4 L=4096 D = 128.
"""

from __future__ import annotations

import sys

import torch
from tabulate import tabulate

from flashrepro.bench.problem import Problem
from flashrepro.bench.timing import interleaved_rounds
from reproduce.gpu import gluon_probe
from reproduce.gpu.gluon_probe import RATIO_HEADERS, peer_calls, ratio_rows
from reproduce.gpu.ws_probe import WS_CASES, ws_call

POINTS = [  # batch, L, D, causal, polynomial shares k (of 8) timed
    (2, 1024, 128, False, (0, 1, 2)), (2, 1024, 128, True, (0, 1, 2)),
    (16, 1024, 64, True, (0, 1, 2, 3)), (16, 1024, 64, False, (0, 1, 2, 3)),
    (32, 512, 64, True, (0, 1, 2, 3)), (4, 4096, 64, True, (0, 1, 2, 3)),
    (4, 4096, 64, False, (0, 1, 2, 3)), (1, 16384, 64, True, (0, 2)),
    (4, 4096, 128, False, (0, 1, 2)),
]


def parity() -> None:
    rows = []
    for share in (1, 2, 3):
        for consumers, cfg, programs in ((2, (128, 2), 7), (3, (128, 3), 5)):
            # Three consumers exist at D = 64 only (their registers).
            cases = [c for c in WS_CASES if consumers == 2 or c[5] == 64]
            rows += gluon_probe.parity(
                [cfg], cases,
                lambda q, k, v, causal, cfg, o, lse, br, n=consumers, p=programs, s=share:
                    ws_call(q, k, v, causal, cfg, p, o, lse, br, num_consumers=n, exp2_poly=s),
                label=lambda cfg, n=consumers, p=programs, s=share:
                    f"{n} consumers {cfg[0]} s{cfg[1]} p{p} poly {s}/8")
    print(tabulate(rows, ["ws config, exp2 by polynomial", "case", "parity"],
                   tablefmt="github"))


def timing() -> None:
    for batch, length, d, causal, shares in POINTS:
        problem = Problem(batch=batch, heads=16, seqlen_q=length, seqlen_k=length, head_dim=d,
                          dtype="float16", causal=causal)
        q, k, v = problem.inputs()
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        fns = peer_calls(q, k, v, causal)
        # D = 64 non-causal: three consumers (the table's fa3-ws3); else two.
        consumers, cfg = (3, (128, 3)) if d == 64 and not causal else (2, (128, 2))
        for share in shares:
            fns[f"ws{consumers} poly {share}/8"] = ws_call(
                q, k, v, causal, cfg, sms, num_consumers=consumers, exp2_poly=share)
        rows = ratio_rows(problem, interleaved_rounds(fns, rounds=15, calls_per_round=10))
        print(tabulate(rows, RATIO_HEADERS, tablefmt="github"), flush=True)


if __name__ == "__main__":
    {"parity": parity, "timing": timing}[sys.argv[1]]()
