"""A few calls of flashrepro's default launch at the article problem (causal or not), for
Nsight Compute to profile one of them (session8_b.sh).

    PYTHONPATH=src python reproduce/gpu/ncu_target.py full|causal [calls]
"""

import sys

import torch

import flashrepro
from flashrepro.bench.problem import Problem, load_article

article, _ = load_article()
problem = Problem(**{**article.as_dict(), "causal": sys.argv[1] == "causal"})
q, k, v = problem.inputs()
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
    flashrepro.attention(q, k, v, causal=problem.causal)
torch.cuda.synchronize()
