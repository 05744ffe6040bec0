"""Back-to-back calls of flashrepro's default launch, torch's cuDNN and flash backends at the
article problem (causal or not), for Nsight Compute to read each kernel's own duration and SM
clock (lab/2026-11-29-three-consumer-tile/coldstart.sh): how much of a timed call's period is the kernel itself.

    PYTHONPATH=src:. python lab/probes/kernel_durations.py full|causal [calls]
"""

import sys

import torch

from flashrepro.bench.problem import Problem, load_article
from lab.probes.gluon_probe import peer_calls


def back_to_back(problem: Problem, calls: int = 5) -> None:
    """``calls`` calls of each peer (``gluon_probe.peer_calls``) on ``problem``, one kernel
    after another, then a synchronize."""
    q, k, v = problem.inputs()
    for fn in peer_calls(q, k, v, problem.causal).values():
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    article, _ = load_article()
    back_to_back(Problem(**{**article.as_dict(), "causal": sys.argv[1] == "causal"}),
                 int(sys.argv[2]) if len(sys.argv) > 2 else 5)
