"""GPU runs of the warp-specialized, persistent Gluon kernel (lab/2026-11-29-warp-specialization/).

Run from the repository root on an H200:

    PYTHONPATH=src:. python lab/probes/ws_probe.py parity|timing

parity: :mod:`flashrepro.kernels.fwd_gluon_ws` against the tests' float32 reference and rule
(``tests.reference.assert_parity``) over the cases of ``gluon_probe.py`` (ragged, GQA,
bottom-right, bf16) plus a causal tile smaller than one consumer's rows, with a grid of 7
programs (so every program loops over several tiles of these small cases) and, for one
config, one program per tile.
timing: interleaved rounds with the project's timer, at the article problem causal and not,
B=4 L=4096 causal and not, and B=16 L=1024 D=64 non-causal: the kernel (persistent and one
program per tile) and the non-specialized Gluon kernel against flashrepro's default, torch's
cuDNN and flash backends.

The runs of this probe in lab/2026-11-29-warp-specialization/ (ws-first/, ws-persistent/) timed
earlier states of the kernel: one program per tile and one or two consumer warpgroups at
54d7a4f, persistent at 8fae499, ping-pong optional at 0728639. Ping-pong is always on since,
and only two consumers are kept; this script runs the kernel as it is now.
"""

from __future__ import annotations

import sys

import torch
from tabulate import tabulate

from flashrepro.bench.problem import Problem, load_article
from flashrepro.bench.timing import interleaved_rounds
from flashrepro.kernels import fwd_gluon_ws
from lab.probes import gluon_probe
from lab.probes.gluon_probe import (
    CASES,
    RATIO_HEADERS,
    gluon_call,
    launch_args,
    peer_calls,
    ratio_rows,
)

# (BLOCK_N, stages), programs ("sm": one per SM; None: one per tile)
TIMED = [((128, 2), "sm"), ((128, 2), None)]
PARITY = [((128, 2), 7), ((128, 2), None), ((64, 3), 7), ((64, 4), 5)]
PLAIN = [(64, 64, 3, 4)]  # fwd_gluon, not specialized (gluon_probe's configs)
WS_CASES = [*CASES, (1, 2, 2, 50, 50, 128, True, False, torch.float16)]


def ws_call(q, k, v, causal, cfg, num_programs, out=None, lse=None, bottom_right=False,
            module=fwd_gluon_ws, **launch_kw):
    """A direct launch of ``module``'s ws kernel at ``cfg`` = (BLOCK_N, stages), LSE stored;
    ``launch_kw`` go to its ``launch`` as they are (``num_consumers``)."""
    block_n, stages = cfg
    o, lse, hpg, offset, qk_scale = launch_args(q, k, out, lse, bottom_right)

    def run():
        module.launch(q, k, v, o, lse, causal=causal, qk_scale=qk_scale, causal_offset=offset,
                      heads_per_group=hpg, store_lse=True, block_n=block_n, num_stages=stages,
                      num_programs=num_programs, **launch_kw)
        return o
    return run


def parity(module=fwd_gluon_ws) -> None:
    """:func:`gluon_probe.parity` of ``module``'s kernel over :data:`PARITY` x
    :data:`WS_CASES`."""
    rows = gluon_probe.parity(
        PARITY, WS_CASES,
        lambda q, k, v, causal, cfg, o, lse, br: ws_call(q, k, v, causal, *cfg, o, lse, br,
                                                         module=module),
        label=lambda cfg: f"{cfg[0]} p{cfg[1]}")
    print(tabulate(rows, ["ws config (BLOCK_N, stages), programs", "case", "parity"],
                   tablefmt="github"))


def timing(problem: Problem) -> list[list]:
    q, k, v = problem.inputs()
    fns = peer_calls(q, k, v, problem.causal)
    for cfg in PLAIN:
        fns[f"gluon {cfg}"] = gluon_call(q, k, v, problem.causal, cfg)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    for cfg, programs in TIMED:
        fns[f"gluon-ws {cfg} p{programs}"] = ws_call(
            q, k, v, problem.causal, cfg, sms if programs == "sm" else programs)
    return ratio_rows(problem, interleaved_rounds(fns, rounds=30, calls_per_round=10))


def main() -> None:
    if sys.argv[1] == "parity":
        parity()
        return
    article, _ = load_article()
    problems = [Problem(**{**article.as_dict(), "causal": False}), article,
                Problem(batch=4, heads=16, seqlen_q=4096, seqlen_k=4096, head_dim=128,
                        dtype="float16", causal=False),
                Problem(batch=16, heads=16, seqlen_q=1024, seqlen_k=1024, head_dim=64,
                        dtype="float16", causal=False),
                Problem(batch=4, heads=16, seqlen_q=4096, seqlen_k=4096, head_dim=128,
                        dtype="float16", causal=True)]
    for problem in problems:
        print(tabulate(timing(problem), RATIO_HEADERS, tablefmt="github"), flush=True)


if __name__ == "__main__":
    main()
