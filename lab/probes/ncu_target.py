"""A few calls of flashrepro's default launch at the article problem (causal or not), for
Nsight Compute to profile one of them (lab/2026-11-29-persistent-tile-boundary/ncu_blocks.sh).

    PYTHONPATH=src python lab/probes/ncu_target.py full|causal [calls] [batch]

``batch`` replaces the article's B=2 (e.g. 16: 16 rounds of tiles per SM, so the kernel's cold
start weighs less against the tile transitions).
"""

import sys

import torch

import flashrepro
from flashrepro.bench.problem import Problem, load_article

article, _ = load_article()
batch = int(sys.argv[3]) if len(sys.argv) > 3 else article.batch
problem = Problem(**{**article.as_dict(), "causal": sys.argv[1] == "causal", "batch": batch})
q, k, v = problem.inputs()
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
    flashrepro.attention(q, k, v, causal=problem.causal)
torch.cuda.synchronize()
