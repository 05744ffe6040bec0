"""Consumers skip the key blocks none of their rows sees (lab/2026-11-29-three-consumer-tile/).

The ws kernel walks each tile's key range, that of its last row, with every consumer. With
FA3's 192-row tile (fa3-ws3, D = 64) under a causal mask the first consumers thus compute 1-2
blocks per tile that are masked for all their rows, and in a ragged last tile (L = 512 or 1024
with 192 rows) one or two consumers compute rows past Lq (11 % of the work at L = 1024). Now a
consumer computes blocks [0, n_own) of its own rows (block 0 only for rows past Lq), stores its
output, then hands the remaining slots back as they load and passes its turns. Timed side by
side with the kernel before, written by the caller (git is not on the device):

    git show a2c6688:src/flashrepro/kernels/fwd_gluon_ws.py > lab/2026-11-29-three-consumer-tile/ws_before_skip.py
    PYTHONPATH=src:. python lab/2026-11-29-three-consumer-tile/skip_probe.py

Run for lab/2026-11-29-three-consumer-tile/skip/ with the skip for
two consumers too ("ws2 now"); e3dc9a1 keeps it for three only, so today "ws2 now" and "ws2
before" are the same kernel.
"""

import torch
from tabulate import tabulate

from flashrepro.bench.problem import Problem
from flashrepro.bench.timing import interleaved_rounds
from lab.probes.gluon_probe import RATIO_HEADERS, peer_calls, ratio_rows
from lab.probes.variant_probe import load_module
from lab.probes.ws_probe import ws_call

POINTS = [  # batch, L, D, causal
    (2, 1024, 128, False), (2, 1024, 128, True), (16, 1024, 128, True),
    (32, 512, 64, False), (32, 512, 64, True), (16, 1024, 64, False), (16, 1024, 64, True),
    (4, 4096, 64, True),
]

before = load_module("lab/2026-11-29-three-consumer-tile/ws_before_skip.py")
for batch, length, d, causal in POINTS:
    problem = Problem(batch=batch, heads=16, seqlen_q=length, seqlen_k=length, head_dim=d,
                      dtype="float16", causal=causal)
    q, k, v = problem.inputs()
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    fns = peer_calls(q, k, v, causal)
    fns["ws2 now"] = ws_call(q, k, v, causal, (128, 2), sms)
    fns["ws2 before"] = ws_call(q, k, v, causal, (128, 2), sms, module=before)
    if d == 64:
        fns["ws3 now"] = ws_call(q, k, v, causal, (128, 3), sms, num_consumers=3)
        fns["ws3 before"] = ws_call(q, k, v, causal, (128, 3), sms, module=before,
                                    num_consumers=3)
    rows = ratio_rows(problem, interleaved_rounds(fns, rounds=20, calls_per_round=10))
    print(tabulate(rows, RATIO_HEADERS, tablefmt="github"), flush=True)
