"""D=64 causal at long L: does the L2 head-group size, a two-consumer tile or 64-key blocks
change the dynamic-schedule kernel's time (lab/2026-12-02-d64-long-causal-groups)?

One process on an sm_90 GPU, fp16, H=16, B·L=16384, causal, L in {4096, 8192, 16384}. Rows:
``default`` (flashrepro.attention); ``G=g``: the default config launched with heads_per_group g
(select()'s L2 size set to hold g heads' K and V in its half); ``ws2``: 128x128 w8 s2 ws
dynamic; ``bn64``: 192x64 w12 s6 ws dynamic. Each row is checked once into a NaN-poisoned
output against the fp32 reference, then all are timed in interleaved rounds (L2 flushed,
busy-wait before each call, CUDA events); ratios per round to ``default``.

    PYTHONPATH=src:. python lab/2026-12-02-d64-long-causal-groups/run.py --out /tmp/out/groups
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from tabulate import tabulate

import flashrepro
from flashrepro.configs import KernelConfig, default_config, launch_arch
from flashrepro.counters import stream_counters
from flashrepro.select import select
from flashrepro_harness import env
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem
from tests.reference import assert_parity

GROUPS = (1, 2, 4, 8, 16, 32)
EXTRA = {"ws2": "128x128 w8 s2 tma overlap ws dynamic",
         "bn64": "192x64 w12 s6 tma overlap ws dynamic"}


def grouped(p: Problem, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            o: torch.Tensor, g: int) -> Callable[[], object]:
    """The default config's launch with heads_per_group = g, through Triton's JIT path."""
    cfg = default_config(p.head_dim, True, p.seqlen_q, launch_arch())
    kv_bytes = 2 * p.seqlen_k * p.head_dim * q.element_size()
    lse = torch.empty(1, dtype=torch.float32, device=q.device).as_strided(
        (1, 1, 1), (p.heads * p.seqlen_q, p.seqlen_q, 1))
    props = torch.cuda.get_device_properties(q.device)
    chosen = select(q, k, v, o, lse, causal=True, scale=None, causal_alignment="top_left",
                    return_lse=False, config=cfg, arch=90, mma_v3=True,
                    num_sms=props.multi_processor_count, l2_bytes=2 * g * kv_bytes)
    call = chosen.bind(chosen.operands(q, k, v, o, lse)).with_counter(
        stream_counters(q.device, 1))
    return lambda: call.run()


def measure(p: Problem, rounds: int, calls: int) -> dict:
    q, k, v = p.inputs("cuda", seed=p.seqlen_q)
    fns: dict[str, Callable[[], object]] = {
        "default": lambda: flashrepro.attention(q, k, v, causal=True)}
    outs: dict[str, torch.Tensor] = {}
    for g in GROUPS:
        if g <= p.batch * p.heads:
            outs[f"G={g}"] = torch.empty_like(q)
            fns[f"G={g}"] = grouped(p, q, k, v, outs[f"G={g}"], g)
    for name, label in EXTRA.items():
        cfg = KernelConfig.parse(label)
        fns[name] = (lambda c: lambda: flashrepro.attention(q, k, v, causal=True, config=c))(cfg)
    checks = {}
    for name, fn in fns.items():
        if name in outs:
            outs[name].fill_(float("nan"))
            fn()
            o = outs[name]
        else:
            o = fn()
        torch.cuda.synchronize()
        assert_parity(o, None, q, k, v, causal=True)  # type: ignore[arg-type]
        checks[name] = "ok"
    per_round = interleaved_rounds(fns, rounds, calls)
    ratios = {n: [t / d for t, d in zip(r, per_round["default"], strict=True)]
              for n, r in per_round.items()}
    return {"problem": p.as_dict(), "checks": checks, "round_medians_us": per_round,
            "median_us": {n: statistics.median(r) for n, r in per_round.items()},
            "over_default": {n: [statistics.median(r), min(r), max(r)]
                             for n, r in ratios.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available() or launch_arch() != 90:
        print("needs an sm_90 GPU", file=sys.stderr)
        return 2
    records = [measure(Problem(16384 // n, 16, n, n, 64, "float16", True), args.rounds,
                       args.calls) for n in (8192, 16384, 4096)]
    rows = [[r["problem"]["seqlen_q"], n, f"{r['median_us'][n]:.1f}",
             "{:.3f} [{:.3f}-{:.3f}]".format(*r["over_default"][n]), r["checks"][n]]
            for r in records for n in r["median_us"]]
    text = tabulate(rows, headers=["L", "row", "µs", "/ default", "check"])
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "groups.txt").write_text(text + "\n")
    (args.out / "groups.json").write_text(json.dumps(
        {"env": env.capture(), "rounds": args.rounds, "calls": args.calls,
         "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
