"""lab/2026-11-29-persistent-tile-boundary/: the warp-specialized kernel with two Q buffers per consumer, the
ping-pong order kept across tiles, and a "snake" persistent schedule, against the kernel as
it was before (041defe), side by side.

Run from the repository root on an H200, with the earlier kernel written next to this file:

    git show 041defe:src/flashrepro/kernels/fwd_gluon_ws.py > lab/2026-11-29-persistent-tile-boundary/ws_before.py
    PYTHONPATH=src:. python lab/2026-11-29-persistent-tile-boundary/ws_side_by_side.py [ROUNDS] [a|blocks|c]

Times, in interleaved rounds with the project's timer: flashrepro's default launch, the kernel
now (persistent: one program per SM; and one program per tile), the kernel before
(persistent), the non-specialized Gluon kernel at 64x64 (``fa3-overlap``), torch's cuDNN and
flash backends; at the article problem causal and not, and at larger problems where the
per-tile cost (L 512, 1024 at B·L = 16k) or the causal schedule (L 4096, 16384) shows.
With ``blocks`` (ncu_blocks.sh): the kernel now at BLOCK_N 128 (2 stages) and 64 (2, 3, 4 stages) on
the first five of those problems. With ``c`` (deferred_epilogue.sh): the kernel now against the one
in ``ws_before.py``, whose ``COMMIT`` names the commit it was taken from.
"""

from __future__ import annotations

import sys

import torch
import ws_before
from tabulate import tabulate

from flashrepro.bench.problem import Problem, load_article
from flashrepro.bench.timing import interleaved_rounds
from lab.probes.gluon_probe import RATIO_HEADERS, gluon_call, peer_calls, ratio_rows
from lab.probes.ws_probe import ws_call


def problems() -> list[Problem]:
    article, _ = load_article()
    more = [(16, 1024, 128, False), (16, 1024, 128, True), (32, 512, 128, False),
            (4, 4096, 128, False), (4, 4096, 128, True), (1, 16384, 128, True),
            (16, 1024, 64, False)]
    return [Problem(**{**article.as_dict(), "causal": False}), article,
            *(Problem(batch=b, heads=16, seqlen_q=n, seqlen_k=n, head_dim=d, dtype="float16",
                      causal=c) for b, n, d, c in more)]


def variants(q, k, v, causal: bool, sms: int) -> dict:
    """``blocks``: the kernel now at each (BLOCK_N, stages) that fits, persistent."""
    return {f"ws now 128x{bn} s{st}": ws_call(q, k, v, causal, (bn, st), sms)
            for bn, st in ((128, 2), (64, 2), (64, 3), (64, 4))}


def timing(problem: Problem, rounds: int, mode: str = "a") -> list[list]:
    q, k, v = problem.inputs()
    causal = problem.causal
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    fns = peer_calls(q, k, v, causal)
    if mode == "blocks":
        fns.update(variants(q, k, v, causal, sms))
    elif mode == "c":
        fns["ws now, p=SMs"] = ws_call(q, k, v, causal, (128, 2), sms)
        fns[f"ws {ws_before.COMMIT}, p=SMs"] = ws_call(q, k, v, causal, (128, 2), sms,
                                                      module=ws_before)
    else:
        fns["ws now, p=SMs"] = ws_call(q, k, v, causal, (128, 2), sms)
        fns["ws now, p=tiles"] = ws_call(q, k, v, causal, (128, 2), None)
        fns["ws before, p=SMs"] = ws_call(q, k, v, causal, (128, 2), sms, module=ws_before)
        fns["fa3-overlap 64x64"] = gluon_call(q, k, v, causal, (64, 64, 3, 4))
    return ratio_rows(problem, interleaved_rounds(fns, rounds=rounds, calls_per_round=10))


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    mode = sys.argv[2] if len(sys.argv) > 2 else "a"
    for problem in problems()[:5] if mode == "blocks" else problems():
        print(tabulate(timing(problem, rounds, mode), RATIO_HEADERS, tablefmt="github"),
              flush=True)


if __name__ == "__main__":
    main()
