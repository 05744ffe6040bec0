"""The ws kernel's dynamic tile schedule (KernelConfig.dynamic_schedule) against the default
launch, cuDNN and FA4, over the sweep's points; README.md beside this file.

On the H200, from the repository root (about 3 minutes with fp16 only):

    PYTHONPATH=src:. python lab/2026-12-02-dynamic-tile-scheduler/run.py --out /tmp/out/dyn.json

Points: H=16, B=16384/L, L in 512..16384, D 64 and 128, causal and not (``--dtypes`` adds
bfloat16). At each point, ``default`` is ``flashrepro.attention`` with config None (the tuned
table's entry) and ``dynamic`` the same tiles with ``dynamic_schedule`` on (and ``tile_grid``
off: the dynamic schedule is the persistent grid's); where the entry is ``tile_grid``,
``persistent`` times its tiles on the persistent grid with the static snake order too. Where
the entry is not the ws kernel (D=64 causal L=512) there is no dynamic row.

Steps:

1. Compile every flashrepro variant in parallel worker processes for sm_90 (the harness's
   offline compile, ``kernel_sass``), so the timed process finds them in Triton's cache.
2. Correctness, before any timing: the dynamic variant three times in a row (its launch
   plan's counter must reset itself), each into a NaN-poisoned output, every element checked
   by the parity rule of tests/reference.py (max error <= 2x SDPA's + the dtype's floor
   against an fp32 reference).
3. Timing: ``interleaved_rounds`` of flashrepro_harness.bench.timing (L2 flushed and a ~1 ms
   busy-wait before each call, CUDA events), ``--rounds`` x ``--calls``, medians of per-round
   medians; ratios to the best peer (cuDNN or FA4, the faster in each round) per round, their
   median and range. Points go long causal first; none starts after ``--deadline-s``.

Prints one table per dtype; ``--out`` gets the JSON (environment, method, every per-round
median).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

import flashrepro
from flashrepro.configs import NAMED, KernelConfig, default_config, launch_arch
from flashrepro_harness import env
from flashrepro_harness.analysis.offline_compile import KernelSpec, kernel_sass
from flashrepro_harness.bench import impls, peers
from flashrepro_harness.bench.timing import interleaved_rounds
from flashrepro_harness.problem import Problem
from tests.reference import assert_parity

LENGTHS = (16384, 8192, 4096, 2048, 1024, 512)
HEADS, TOKENS = 16, 16384
PEERS = ("torch-cudnn", "fa4-cute")
HANG_S = 180.0  # a point's first dynamic calls (a compile included) must end within this


@contextlib.contextmanager
def watchdog(seconds: float, what: str) -> Iterator[None]:
    """Exit the process (code 3) if the block has not finished after ``seconds``: a kernel
    that deadlocks would otherwise hold the GPU until the caller's timeout."""
    timer = threading.Timer(seconds, lambda: (print(f"HANG: {what} still running after "
                                                    f"{seconds:.0f} s", flush=True),
                                              os._exit(3)))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def points(dtypes: list[str]) -> list[Problem]:
    """Every point, long causal D=64 first (where the issue's gap is largest)."""
    return [Problem(TOKENS // L, HEADS, L, L, d, dtype, causal)
            for dtype in dtypes for causal in (True, False) for d in (64, 128)
            for L in LENGTHS]


def configs(p: Problem) -> dict[str, KernelConfig | None]:
    """The flashrepro rows of point ``p``: name -> config (None: the default launch)."""
    entry = default_config(p.head_dim, p.causal, p.seqlen_q, launch_arch())
    rows: dict[str, KernelConfig | None] = {"default": None}
    if entry.warp_specialize:
        rows["dynamic"] = dataclasses.replace(entry, tile_grid=False, dynamic_schedule=True)
        if entry.tile_grid:
            rows["persistent"] = dataclasses.replace(entry, tile_grid=False)
    return rows


def prewarm(problems: list[Problem]) -> float:
    """Compile each point's flashrepro kernels for sm_90 in parallel (Triton's cache then holds
    them); returns seconds. A failure is printed and left for the timed process to repeat."""
    t0 = time.perf_counter()
    specs = set()
    for p in problems:
        entry = default_config(p.head_dim, p.causal, p.seqlen_q, launch_arch())
        for cfg in (entry, *(c for c in configs(p).values() if c is not None)):
            variant = "fwd_gluon_ws" if cfg.warp_specialize else "fwd"
            specs.add(KernelSpec(variant, cfg, "sm_90", p))
    try:
        kernel_sass(sorted(specs, key=str))
    except RuntimeError as exc:
        print(f"prewarm failed (the timed process compiles instead): {exc}", file=sys.stderr)
    return time.perf_counter() - t0


def check(p: Problem, cfg: KernelConfig, inputs: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    """The dynamic variant, three calls in a row into poisoned outputs, each checked."""
    q, k, v = inputs
    out = torch.empty_like(q)
    for call in range(3):
        out.fill_(float("nan"))
        with watchdog(HANG_S, f"{cfg.label()} at {p.key()}, call {call}"):
            o = flashrepro.attention(q, k, v, causal=p.causal, config=cfg, out=out)
            torch.cuda.synchronize()
        try:
            assert_parity(o, None, q, k, v, causal=p.causal)
        except AssertionError as exc:
            return {"ok": False, "call": call, "error": str(exc)}
    return {"ok": True, "calls": 3}


def measure(p: Problem, rounds: int, calls: int) -> dict[str, Any]:
    inputs = p.inputs("cuda", seed=p.seqlen_q + p.head_dim)
    rows = configs(p)
    record: dict[str, Any] = {"problem": p.as_dict(), "configs": {
        n: (c.label() if c else default_config(p.head_dim, p.causal, p.seqlen_q,
                                               launch_arch()).label())
        for n, c in rows.items()}}
    if "dynamic" in rows:
        record["check"] = check(p, rows["dynamic"], inputs)
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
    peer_names = [n for n in PEERS if n in per_round]
    if peer_names:
        best = [min(per_round[n][r] for n in peer_names) for r in range(rounds)]
        record["ratio_to_best_peer"] = {
            n: {"median": statistics.median(r), "min": min(r), "max": max(r)}
            for n in rows for r in [[t / b for t, b in zip(per_round[n], best, strict=True)]]}
    if "dynamic" in rows:
        dyn = [d / t for d, t in zip(per_round["dynamic"], per_round["default"], strict=True)]
        record["dynamic_over_default"] = {"median": statistics.median(dyn), "min": min(dyn),
                                          "max": max(dyn)}
    return record


def _short(label: str) -> str:
    """A config label with a named config's tiles shown by its name (``fa3-ws3 tilegrid``)."""
    for name, cfg in sorted(NAMED.items(), key=lambda item: -len(item[1].label())):
        if label.startswith(cfg.label()) and (label + " ")[len(cfg.label())] == " ":
            return name + label[len(cfg.label()):]
    return label


def _ratio(rec: dict[str, Any], name: str) -> str:
    r = rec.get("ratio_to_best_peer", {}).get(name)
    return f"{r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}]" if r else ""


def table(records: list[dict[str, Any]]) -> str:
    rows = []
    for rec in records:
        p, us = rec["problem"], rec["median_us"]
        times = [f"{us[n]:.1f}" if n in us else ""
                 for n in ("default", "dynamic", "persistent", "torch-cudnn", "fa4-cute")]
        dyn = rec.get("dynamic_over_default")
        check_cell = {None: "", True: "ok", False: "FAIL"}[rec.get("check", {}).get("ok")]
        rows.append([{"float16": "fp16", "bfloat16": "bf16"}[p["dtype"]], p["head_dim"],
                     "causal" if p["causal"] else "full", p["seqlen_q"],
                     _short(rec["configs"]["default"]), *times,
                     _ratio(rec, "default"), _ratio(rec, "dynamic"),
                     f"{dyn['median']:.3f}" if dyn else "", check_cell])
    return tabulate(rows, headers=["dtype", "D", "mask", "L", "default config", "default µs",
                                   "dynamic µs", "persistent µs", "cuDNN µs", "FA4 µs",
                                   "default/best", "dynamic/best", "dyn/default", "check"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    parser.add_argument("--dtypes", nargs="+", default=["float16"],
                        choices=["float16", "bfloat16"])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--deadline-s", type=float, default=210.0,
                        help="start no point after this many seconds")
    args = parser.parse_args()
    if not torch.cuda.is_available() or launch_arch() != 90:
        print("needs an sm_90 GPU (the ws kernel is Hopper-only)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    problems = points(args.dtypes)
    prewarm_s = prewarm(problems)
    print(f"prewarm: {prewarm_s:.0f} s; FA4: {peers.import_error('fa4-cute') or 'imports'}",
          flush=True)
    records, skipped = [], []
    for p in problems:
        if time.perf_counter() - t0 > args.deadline_s:
            skipped.append(p.key())
            continue
        records.append(measure(p, args.rounds, args.calls))
        rec = records[-1]
        print(f"{p.key()}: " + ", ".join(f"{n} {t:.1f}" for n, t in rec["median_us"].items())
              + (f"; check {'ok' if rec['check']['ok'] else rec['check']}"
                 if "check" in rec else ""), flush=True)
    for dtype in args.dtypes:
        print(f"\n{dtype}, H={HEADS}, B·L={TOKENS}; µs: medians of {args.rounds} rounds x "
              f"{args.calls} calls; x/best: per-round time over the faster of cuDNN and FA4, "
              "median [range]; dyn/default: per-round median")
        print(table([r for r in records if r["problem"]["dtype"] == dtype]))
    if skipped:
        print(f"\nnot started (past --deadline-s {args.deadline_s:.0f}): {', '.join(skipped)}")
    failed = [r["problem"] for r in records if not r.get("check", {"ok": True})["ok"]]
    wall = time.perf_counter() - t0
    print(f"\nwall {wall:.0f} s; dynamic variant checks: "
          f"{'all ok' if not failed else f'{len(failed)} FAILED'}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "env": env.capture(), "wall_s": wall, "prewarm_s": prewarm_s,
            "method": {"timer": "flashrepro_harness.bench.timing.interleaved_rounds",
                       "rounds": args.rounds, "calls_per_round": args.calls,
                       "statistic": "median of per-round medians",
                       "peers": list(PEERS), "layouts": peers.layouts_note(list(PEERS))},
            "skipped_points": skipped, "records": records}, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
