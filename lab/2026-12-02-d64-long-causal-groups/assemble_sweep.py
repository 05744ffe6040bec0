"""The committed sweep of a commit whose points were measured in two runs: each point from the
run whose code chose the same head-group size as this checkout's select() does.

Run A (a224668) grouped every launch at the L2 bound; run B (c8cb184) grouped every launch in
equal groups (``heads_per_group(..., balanced=True)``). This checkout balances all but the
static persistent causal launches. Each run timed flashrepro, torch flash, cuDNN and FA4 side
by side in one process (``flashrepro bench --rounds 10 --calls 6``); a point's ratios are
its own run's. Writes ``bench.json`` (each point with its run), ``bench.md`` and ``bench.png``.

    PYTHONPATH=src python lab/2026-12-02-d64-long-causal-groups/assemble_sweep.py \\
        RUN_A/bench.json RUN_B/bench.json reproduce/results/nvidia-h200
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from flashrepro.select import STAND_IN_L2_BYTES, select
from flashrepro_harness.bench.sweep import write_results

H200_SMS = 132


def balanced_groups(point: dict[str, Any]) -> bool:
    """Whether this checkout's select() gives ``point`` equal head groups on sm_90: every
    launch but the static persistent ws grid under a causal mask."""
    p = point["problem"]
    dtype = getattr(torch, p["dtype"])
    q = torch.empty(p["batch"], p["heads"], p["seqlen_q"], p["head_dim"], dtype=dtype,
                    device="meta")
    k = torch.empty(p["batch"], p["heads"], p["seqlen_k"], p["head_dim"], dtype=dtype,
                    device="meta")
    lse = torch.empty(p["batch"], p["heads"], p["seqlen_q"], dtype=torch.float32,
                      device="meta")
    cfg = select(q, k, k, torch.empty_like(q), lse, causal=p["causal"], scale=None,
                 causal_alignment="top_left", return_lse=False, config=None, arch=90,
                 mma_v3=True, num_sms=H200_SMS, l2_bytes=STAND_IN_L2_BYTES).config
    snake = p["causal"] and cfg.warp_specialize and not (cfg.tile_grid or cfg.dynamic_schedule)
    return not snake


def main() -> int:
    run_a, run_b = (json.loads(Path(a).read_text()) for a in sys.argv[1:3])
    out = Path(sys.argv[3])
    key = ("dtype", "head_dim", "causal", "seqlen_q")
    a_points = {tuple(p["problem"][f] for f in key): p for p in run_a["points"]}
    points = []
    for pb in run_b["points"]:
        balanced = balanced_groups(pb)
        point, run = (pb, run_b) if balanced else (
            a_points[tuple(pb["problem"][f] for f in key)], run_a)
        points.append({**point, "run": {"commit": run["env"]["git_commit"],
                                        "date": run["env"]["date"],
                                        "head_groups": "equal" if balanced else "L2 bound"}})
    merged = {**run_b, "points": points}
    merged["method"] = {**run_b["method"], "runs": (
        "each its own process on an H200: "
        f"{run_a['env']['git_commit'][:7]} ({run_a['env']['date']}) where this code groups "
        f"heads at the L2 bound, {run_b['env']['git_commit'][:7]} ({run_b['env']['date']}) "
        "where it makes equal groups; each point's 'run' says which")}
    write_results(out, merged)
    md = out / "bench.md"
    md.write_text(md.read_text().replace("\n\n- ", "\n\nPoints from two runs (the `run` "
                                         "field of bench.json): " + merged["method"]["runs"]
                                         + ".\n\n- ", 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
