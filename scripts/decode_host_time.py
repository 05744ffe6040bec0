"""Host time per call of a decode-like loop: L_k growing by one each call against the same
loop at a fixed L_k (issue 33: "a decode-like loop with L_k growing costs no more host time per
call than the same loop at a fixed L_k").

The loop: ``flashrepro.attention_kvcache`` on a preallocated cache (B, H_kv, L_max, D), q with
L_q = 1, ``seqused_k`` an int32 tensor on the device that each step advances in place
(``used.add_(step)``: 1 in the growing loop, 0 in the fixed one, the same host work). The
shapes never change, so neither loop should make a new launch plan or compile anything.
Two more loops for context: ``kvcache, cache grows by cat`` calls ``attention_kvcache`` on
caches that grow by one token per call as transformers' ``DynamicCache`` grows them
(``torch.cat``; a new shape and new strides per call, timed without the cat); ``--dense`` also
times ``flashrepro.attention`` on a cache sliced to each new length (a new shape per call: the
path the issue measured at 253 µs per call).

Method: per round, a GPU busy-wait is queued first (longer than the round's host work, so the
launch queue never blocks the host), then ``time.perf_counter`` around ``--calls`` steps,
without synchronizing; µs per call = elapsed / calls. Warm-up steps first; rounds of the two
loops interleaved; the median of the rounds is compared. Exit 1 when the growing loop's median
exceeds the fixed loop's by more than ``--tolerance`` (default 10 %), else 0 (2 without a GPU).

    PYTHONPATH=src python3 scripts/decode_host_time.py [--batch 16] [--calls 200] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch

import flashrepro


def host_us_per_call(step: Callable[[], object], reset: Callable[[], object], calls: int,
                     sleep_cycles: int) -> float:
    """One round: ``reset()``, a busy-wait queued, then ``calls`` steps timed on the host;
    µs per step."""
    reset()
    torch.cuda.synchronize()
    torch.cuda._sleep(sleep_cycles)
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def interleaved_rounds(loops: dict[str, tuple[Callable[[], object], Callable[[], object]]],
                       calls: int, rounds: int, sleep_cycles: int) -> dict[str, list[float]]:
    """``rounds`` rounds of every loop in turn, the order rotated each round; µs per step."""
    names = list(loops)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            step, reset = loops[name]
            out[name].append(host_us_per_call(step, reset, calls, sleep_cycles))
    return out


def verdict(growing: list[float], fixed: list[float], tolerance: float) -> tuple[bool, float]:
    """(growing median <= fixed median · (1 + tolerance), their ratio)."""
    ratio = statistics.median(growing) / statistics.median(fixed)
    return ratio <= 1.0 + tolerance, ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--start", type=int, default=1024, help="L_k of the first step")
    parser.add_argument("--calls", type=int, default=200, help="steps per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--dense", action="store_true",
                        help="also time flashrepro.attention on the cache sliced to each length")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("decode_host_time: needs a CUDA GPU")
        return 2
    b, h, h_kv, d = args.batch, args.heads, args.kv_heads, args.head_dim
    l_max = args.start + args.calls + args.warmup + 1
    gen = torch.Generator("cuda").manual_seed(0)
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(b, h_kv, l_max, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(2))
    out = torch.empty_like(q)
    used = torch.full((b,), args.start, dtype=torch.int32, device="cuda")
    lengths = [args.start]

    def kvcache_step(delta: int) -> Callable[[], object]:
        def step() -> object:
            used.add_(delta)
            return flashrepro.attention_kvcache(q, k, v, used, enable_gqa=True, out=out)
        return step

    grown = [k[:, :, :args.start].contiguous(), v[:, :, :args.start].contiguous()]
    caches = []  # L_k + 1 keys per call, made ahead so the loop times the attention call alone

    def grown_step() -> object:
        k_n, v_n, used_n = caches[lengths[0] - args.start]
        lengths[0] += 1
        return flashrepro.attention_kvcache(q, k_n, v_n, used_n, enable_gqa=True, out=out)

    def dense_step() -> object:
        lengths[0] += 1
        n = lengths[0]
        return flashrepro.attention(q, k[:, :, :n], v[:, :, :n], enable_gqa=True, out=out)

    def reset() -> None:
        used.fill_(args.start)
        lengths[0] = args.start

    loops = {"kvcache, L_k growing": (kvcache_step(1), reset),
             "kvcache, L_k fixed": (kvcache_step(0), reset),
             "kvcache, cache grows by cat": (grown_step, reset)}
    for n in range(max(args.calls, args.warmup) + 1):  # DynamicCache's torch.cat, ahead of time
        caches.append((*grown, torch.full((b,), args.start + n, dtype=torch.int32,
                                          device="cuda")))
        grown = [torch.cat([t, t[:, :, -1:]], dim=2) for t in grown]
    if args.dense:
        loops["attention, L_k growing (new shape per call)"] = (dense_step, reset)
    # A busy-wait longer than a round's host work: 2e3 cycles (~1 µs) per µs, 100 µs per step.
    sleep_cycles = int(2_000 * 100 * args.calls)
    with torch.inference_mode():
        for step, rst in loops.values():
            rst()
            for _ in range(args.warmup):
                step()
        torch.cuda.synchronize()
        rounds = interleaved_rounds(loops, args.calls, args.rounds, sleep_cycles)
    print(f"host µs per call, B={b} H={h} H_kv={h_kv} D={d} bf16, L_k from {args.start}, "
          f"{args.calls} calls per round, {args.rounds} rounds ({torch.cuda.get_device_name()})")
    for name, samples in rounds.items():
        print(f"  {name:45s} median {statistics.median(samples):7.2f}  "
              f"min {min(samples):7.2f}  max {max(samples):7.2f}")
    ok, ratio = verdict(rounds["kvcache, L_k growing"], rounds["kvcache, L_k fixed"],
                        args.tolerance)
    print(f"growing / fixed = {ratio:.3f} ({'PASS' if ok else 'FAIL'}: at most "
          f"{1 + args.tolerance:.2f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
