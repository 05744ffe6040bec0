"""Dynamic tile schedule with per-stream counters against the table's one-program-per-tile
entries, cuDNN and FA4, at the long causal points (lab/2026-12-02-dynamic-schedule-default).

One process on an sm_90 GPU: for each dtype, D in {64, 128}, causal L in {4096, 8192, 16384}
(H=16, B·L=16384): the dynamic variant is checked first (three launches of one plan into
NaN-poisoned outputs, every element against an fp32 reference), then timed side by side in
interleaved rounds (L2 flushed, a busy-wait before each call, CUDA events) with the default
launch, cuDNN and FA4 in its native layout. Ratios are per round, to the faster peer.

    PYTHONPATH=src:. python lab/2026-12-02-dynamic-schedule-default/run.py --out /tmp/out/dyn.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

import flashrepro
from flashrepro.configs import KernelConfig, default_config, launch_arch
from flashrepro_harness import env
from flashrepro_harness.bench import impls, peers
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem
from tests.reference import assert_parity

HEADS, TOKENS = 16, 16384
LENGTHS = (16384, 8192, 4096)
PEERS = ("torch-cudnn", "fa4-cute")


def variants(p: Problem) -> dict[str, KernelConfig | None]:
    """default (the table's entry) and the same tiles, persistent, with the dynamic schedule."""
    entry = default_config(p.head_dim, p.causal, p.seqlen_q, launch_arch())
    return {"default": None,
            "dynamic": dataclasses.replace(entry, tile_grid=False, dynamic_schedule=True)}


def check(p: Problem, cfg: KernelConfig, inputs: tuple[torch.Tensor, ...]) -> bool:
    q, k, v = inputs
    out = torch.empty_like(q)
    for _ in range(3):
        out.fill_(float("nan"))
        flashrepro.attention(q, k, v, causal=p.causal, config=cfg, out=out)
        torch.cuda.synchronize()
        assert_parity(out, None, q, k, v, causal=p.causal)
    return True


def measure(p: Problem, rounds: int, calls: int) -> dict[str, Any]:
    inputs = p.inputs("cuda", seed=p.seqlen_q + p.head_dim)
    rows = variants(p)
    entry = default_config(p.head_dim, p.causal, p.seqlen_q, launch_arch())
    record: dict[str, Any] = {"problem": p.as_dict(), "default": entry.label(),
                              "check": check(p, rows["dynamic"], inputs)}  # type: ignore[arg-type]
    fns = {n: impls.make_call("flashrepro", inputs, p.causal, config=c) for n, c in rows.items()}
    for name in PEERS:
        reason = impls.available(name, inputs, p.causal)
        if reason is None:
            fns[name] = impls.make_call(name, inputs, p.causal)
        else:
            record.setdefault("skipped", {})[name] = reason
    per_round = interleaved_rounds(fns, rounds, calls)
    record["round_medians_us"] = per_round
    record["median_us"] = {n: statistics.median(t) for n, t in per_round.items()}
    best_peers = [n for n in PEERS if n in per_round]
    ratios: dict[str, list[float]] = {}
    if best_peers:
        best = [min(per_round[n][r] for n in best_peers) for r in range(rounds)]
        for n in rows:
            ratios[f"{n}/best"] = [t / b for t, b in zip(per_round[n], best, strict=True)]
    ratios["dynamic/default"] = [d / t for d, t in zip(per_round["dynamic"],
                                                        per_round["default"], strict=True)]
    record["ratios"] = {n: {"median": statistics.median(r), "min": min(r), "max": max(r)}
                        for n, r in ratios.items()}
    return record


def _cell(rec: dict[str, Any], name: str) -> str:
    r = rec["ratios"].get(name)
    return f"{r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}]" if r else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available() or launch_arch() != 90:
        print("needs an sm_90 GPU (the ws kernel is Hopper-only)", file=sys.stderr)
        return 2
    print(f"FA4: {peers.import_error('fa4-cute') or 'imports'}", flush=True)
    records = []
    for dtype in args.dtypes:
        for d in (64, 128):
            for length in LENGTHS:
                p = Problem(TOKENS // length, HEADS, length, length, d, dtype, True)
                records.append(measure(p, args.rounds, args.calls))
                print(p.key(), {n: round(t, 1) for n, t in records[-1]["median_us"].items()},
                      flush=True)
    rows = [[r["problem"]["dtype"], r["problem"]["head_dim"], r["problem"]["seqlen_q"],
             r["default"], *(f"{r['median_us'].get(n, float('nan')):.1f}"
                             for n in ("default", "dynamic", *PEERS)),
             _cell(r, "default/best"), _cell(r, "dynamic/best"), _cell(r, "dynamic/default"),
             "ok" if r["check"] else "FAIL"] for r in records]
    text = tabulate(rows, headers=["dtype", "D", "L", "default config", "default µs",
                                   "dynamic µs", "cuDNN µs", "FA4 µs", "default/best",
                                   "dynamic/best", "dynamic/default", "check"])
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".txt").write_text(text + "\n")
    args.out.write_text(json.dumps({
        "env": env.capture(), "method": {
            "timer": "flashrepro_harness.bench.timing.interleaved_rounds",
            "rounds": args.rounds, "calls_per_round": args.calls,
            "statistic": "median of per-round medians; ratios per round",
            "layouts": peers.layouts_note(list(PEERS))},
        "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
