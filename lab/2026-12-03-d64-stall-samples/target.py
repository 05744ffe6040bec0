"""A few calls of flashrepro's default launch at one sweep point (H=16, fp16), for Nsight
Compute to profile one of them (lab/2026-12-03-d64-stall-samples/ncu.sh).

    PYTHONPATH=src:. python lab/2026-12-03-d64-stall-samples/target.py D full|causal L B [calls]
"""

import sys

import torch

import flashrepro
from flashrepro_harness.problem import Problem

d, mask, length, batch = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
calls = int(sys.argv[5]) if len(sys.argv) > 5 else 4
problem = Problem(batch, 16, length, length, d, "float16", mask == "causal")
q, k, v = problem.inputs("cuda", seed=0)
for _ in range(calls):
    flashrepro.attention(q, k, v, causal=problem.causal)
torch.cuda.synchronize()
