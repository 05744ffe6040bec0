"""FA3's 192-row tile for
D = 64, three consumer warpgroups of 64 rows (160 registers each) in the warp-specialized
kernel, against its two-consumer 128-row tile (what ``fa3-ws`` launches).

Why (lab/2026-11-29-persistent-tile-boundary/, lab/2026-11-29-turn-next-q-epilogue/): at D = 64 the sweep trails cuDNN by 4-16 %. A consumer's GEMMs
shrink with D but its softmax does not, so with two consumers the softmax of one is longer
than the other's GEMMs and the tensor cores wait; a third consumer gives each softmax two
others' GEMMs to hide behind. Compiled offline: no spills non-causal, a few scalar spills (40
bytes of stack) causal; the two-consumer kernel's SASS is unchanged by the generalisation.

    PYTHONPATH=src:. python lab/2026-11-29-three-consumer-tile/consumers_probe.py parity|timing

parity: the three-consumer launch (BLOCK_N 128 at 2 and 3 stages, 64 at 4) against the tests'
float32 reference over gluon_probe's D = 64 cases plus causal tiles of 1-3 key blocks, with 1,
3 and 7 programs (many tiles per program) and one program per tile. timing: interleaved rounds
at D = 64 (B·L = 16k: L 512, 1024, 4096, causal and not; L 16384 causal): flashrepro's default,
torch's cuDNN and flash backends, the two-consumer kernel (128x128, 2 stages) and the
three-consumer one (BLOCK_N 128 at 2 and 3 stages), persistent over the SMs, LSE stored.
"""

from __future__ import annotations

import sys

import torch
from tabulate import tabulate

from flashrepro.bench.problem import Problem
from flashrepro.bench.timing import interleaved_rounds
from lab.probes import gluon_probe
from lab.probes.gluon_probe import CASES, RATIO_HEADERS, peer_calls, ratio_rows
from lab.probes.ws_probe import ws_call

D64_CASES = [c for c in CASES if c[5] == 64] + [  # b, h, h_kv, lq, lk, d, causal, br, dtype
    (1, 2, 2, 50, 50, 64, True, False, torch.float16),  # one block, under one consumer's rows
    (2, 3, 3, 385, 385, 64, True, False, torch.float16),  # 3 tiles, the last of 1 row
    (1, 2, 2, 200, 330, 64, True, True, torch.float16),  # bottom-right, Lq < Lk
    (2, 4, 1, 1024, 1024, 64, False, False, torch.bfloat16),  # GQA 4:1
]
# (BLOCK_N, stages), programs (None: one per tile)
PARITY = [((128, 2), 1), ((128, 2), 3), ((128, 2), 7), ((128, 2), None), ((128, 3), 7),
          ((64, 4), 7)]


def parity() -> None:
    rows = gluon_probe.parity(
        PARITY, D64_CASES,
        lambda q, k, v, causal, cfg, o, lse, br: ws_call(q, k, v, causal, *cfg, o, lse, br,
                                                         num_consumers=3),
        label=lambda cfg: f"3 consumers, {cfg[0]} p{cfg[1]}")
    print(tabulate(rows, ["config (BLOCK_N, stages), programs", "case", "parity"],
                   tablefmt="github"))


def timing() -> None:
    points = [(32, 512, False), (32, 512, True), (16, 1024, False), (16, 1024, True),
              (4, 4096, False), (4, 4096, True), (1, 16384, True)]
    for batch, length, causal in points:
        problem = Problem(batch=batch, heads=16, seqlen_q=length, seqlen_k=length, head_dim=64,
                          dtype="float16", causal=causal)
        q, k, v = problem.inputs()
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        fns = peer_calls(q, k, v, causal)
        fns["ws 2 consumers 128x128 s2"] = ws_call(q, k, v, causal, (128, 2), sms)
        for cfg in ((128, 2), (128, 3)):
            fns[f"ws 3 consumers 192x{cfg[0]} s{cfg[1]}"] = ws_call(q, k, v, causal, cfg, sms,
                                                                   num_consumers=3)
        rows = ratio_rows(problem, interleaved_rounds(fns, rounds=30, calls_per_round=10))
        print(tabulate(rows, RATIO_HEADERS, tablefmt="github"), flush=True)


if __name__ == "__main__":
    modes = {"parity": parity, "timing": timing}
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        sys.exit("usage: PYTHONPATH=src:. python lab/2026-11-29-three-consumer-tile/consumers_probe.py parity|timing")
    modes[sys.argv[1]]()
