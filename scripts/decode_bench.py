"""Decode attention on a GPU: flashrepro.attention_kvcache against torch SDPA (cuDNN, flash)
and FlashAttention 4, and the device's copy rate as the bandwidth ceiling.

Problem: one query row per sequence (L_q = 1), GQA 16/8, D = 128, bf16, every sequence using
its whole cache of L_k keys (so SDPA runs at the exact length, with no mask), over
B in {1, 16, 64} x L_k in {1k, 8k, 32k}. Layouts: flashrepro and SDPA read (B, H_kv, L_k, D)
caches; FA4 its native (B, L_k, H_kv, D), through ``flash_attn_func`` and through
``flash_attn_varlen_func`` with ``seqused_k``.

Method: CUDA events around each call, a 256 MiB buffer zeroed before it (L2 flushed) and a GPU
busy-wait queued before that (the host's launch work stays out of the interval); kernels
interleaved in rounds (the order rotates), a round's value the median of its calls, the
reported time the median of the rounds. "KV TB/s": bytes of K and V (B·H_kv·L_k·D·2·2) over
the time. "copy": a device-to-device copy of 1 GiB, (read + written bytes) / time, same method.

    python3 scripts/decode_bench.py --out DIR [--splits 8,16] [--configs 64x4x3,128x4x2]

Writes DIR/decode_bench.json and DIR/decode_bench.md; prints the tables. A peer that does not
import or refuses the problem is recorded with the reason, never dropped silently.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import triton
from tabulate import tabulate
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

from flashrepro import launch_varlen

H, H_KV, D, DTYPE = 16, 8, 128, torch.bfloat16
FLUSH_BYTES = 256 * 2**20
SLEEP_CYCLES = 2_000_000  # ~1 ms busy-wait: longer than any call's host work
COPY_BYTES = 2**30
FULL_CACHE = "flashrepro full cache"
"""The row of ``seqused_k=None``: every sequence holds the whole cache, as SDPA's calls here."""


class Timer:
    """Per-call GPU time of a callable, L2 flushed and the GPU kept busy before each call."""

    def __init__(self) -> None:
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def time(self, fn: Callable[[], object], calls: int) -> list[float]:
        """``calls`` per-call times of ``fn`` in µs."""
        events = []
        for _ in range(calls):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            self.flush.zero_()
            torch.cuda._sleep(SLEEP_CYCLES)
            start.record()
            fn()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        return [1e3 * s.elapsed_time(e) for s, e in events]


def interleaved(timer: Timer, kernels: dict[str, Callable[[], object]], rounds: int,
                calls: int) -> dict[str, list[float]]:
    """Per-round medians (µs) of each kernel, the kernels timed in turn each round."""
    names = list(kernels)
    for fn in kernels.values():  # warm-up: compiles, autotuning, allocator
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    medians: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            medians[name].append(statistics.median(timer.time(kernels[name], calls)))
    return medians


def copy_rate(timer: Timer, rounds: int, calls: int) -> float:
    """Device-to-device copy rate of a 1 GiB buffer, (read + written bytes) / time, TB/s."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    medians = interleaved(timer, {"copy": lambda: dst.copy_(src)}, rounds, calls)["copy"]
    return 2 * COPY_BYTES / (statistics.median(medians) * 1e-6) / 1e12


def fa4_functions() -> tuple[Callable | None, Callable | None, str | None]:
    """FA4's flash_attn_func and flash_attn_varlen_func, or the reason they do not import."""
    try:
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
    except Exception as exc:  # any import failure is a reason to skip, recorded
        return None, None, f"flash_attn.cute does not import: {type(exc).__name__}: {exc}"
    return flash_attn_func, flash_attn_varlen_func, None


def sdpa_call(backend: SDPBackend, q: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> tuple[Callable[[], object], str]:
    """An SDPA call on one backend with enable_gqa, or, where the backend refuses GQA, on k
    and v expanded to H heads (copied once, outside the timing); the note says which."""
    def run(k_, v_, gqa):
        with sdpa_kernel([backend]):
            return sdpa(q, k_, v_, enable_gqa=gqa)
    try:
        run(k, v, True)
        return (lambda: run(k, v, True)), "enable_gqa"
    except RuntimeError:
        k_full, v_full = (t.repeat_interleave(H // H_KV, dim=1) for t in (k, v))
        run(k_full, v_full, False)  # raises for a backend that refuses the problem
        return (lambda: run(k_full, v_full, False)), "K/V expanded to H heads"


def build_kernels(b: int, l_k: int, fa4: tuple, splits: list[int], configs: list[str]
                  ) -> tuple[dict[str, Callable[[], object]], dict[str, str], dict[str, str],
                             dict[str, float]]:
    """The callables timed at one point, notes per kernel, skip reasons, and each kernel's
    max |o - SDPA math| (a broken run shows here)."""
    q = torch.randn(b, H, 1, D, device="cuda", dtype=DTYPE)
    k, v = (torch.randn(b, H_KV, l_k, D, device="cuda", dtype=DTYPE) for _ in range(2))
    used = torch.full((b,), l_k, dtype=torch.int32, device="cuda")
    with sdpa_kernel([SDPBackend.MATH]):  # float32, 8 sequences at a time (memory)
        ref = torch.cat([sdpa(q[i:i + 8].float(), k[i:i + 8].float(), v[i:i + 8].float(),
                              enable_gqa=True) for i in range(0, b, 8)])
    kernels: dict[str, Callable[[], object]] = {}
    notes: dict[str, str] = {}
    skipped: dict[str, str] = {}
    outputs: dict[str, Callable[[], torch.Tensor]] = {}

    def frepro(num_splits=None, config=None, seqused_k=used):
        return lambda: launch_varlen.kvcache_forward(
            q, k, v, seqused_k, causal=True, scale=None, enable_gqa=True, num_splits=num_splits,
            return_lse=False, config=config)[0]

    shape = launch_varlen._decode_shape(q, k)  # the library's launch for this device
    chosen = shape.config
    auto = launch_varlen.num_kv_splits(shape.programs, l_k, chosen.block_n, shape.num_sms)
    outputs["flashrepro"] = frepro()
    notes["flashrepro"] = f"{auto} splits, {chosen}, seqused_k"
    outputs[FULL_CACHE] = frepro(seqused_k=None)
    notes[FULL_CACHE] = f"{auto} splits, {chosen}, no seqused_k (every key valid)"
    for s in splits:
        outputs[f"flashrepro splits={s}"] = frepro(num_splits=s)
    for label in configs:  # BLOCK_NxWARPSxSTAGES, optionally /SPLITS
        tiles, _, count = label.partition("/")
        block_n, warps, stages = (int(x) for x in tiles.split("x"))
        cfg = launch_varlen.DecodeConfig(block_n, warps, stages)
        outputs[f"flashrepro {label}"] = frepro(num_splits=int(count) if count else None,
                                                config=cfg)

    for name, backend in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):
        try:
            fn, note = sdpa_call(backend, q, k, v)
        except RuntimeError as exc:
            skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            continue
        outputs[name], notes[name] = fn, note

    flash_attn_func, flash_attn_varlen_func, reason = fa4
    if reason is not None:
        skipped["fa4"] = skipped["fa4-seqused_k"] = reason
    else:
        q4 = q.transpose(1, 2).contiguous()  # (B, 1, H, D)
        k4, v4 = (t.transpose(1, 2).contiguous() for t in (k, v))  # (B, L, H_kv, D)

        def first(result):
            return (result[0] if isinstance(result, tuple) else result).transpose(1, 2)

        candidates = {
            "fa4": lambda: first(flash_attn_func(q4, k4, v4, causal=True)),
            "fa4-seqused_k": lambda: first(flash_attn_varlen_func(
                q4, k4, v4, seqused_k=used, max_seqlen_q=1, max_seqlen_k=l_k, causal=True)),
        }
        for name, fn in candidates.items():
            try:
                fn()
                outputs[name] = fn
            except Exception as exc:  # a refusal of the problem is recorded, not fatal
                skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"

    errors = {}
    for name, fn in outputs.items():
        errors[name] = (fn().float() - ref).abs().max().item()
        kernels[name] = fn
    return kernels, notes, skipped, errors


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    commit = os.environ.get("FLASHREPRO_GIT_COMMIT", "")  # a copied tree's .git may be stale
    try:
        commit = commit or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                          text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    versions = {"torch": torch.__version__, "triton": triton.__version__,
                "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    try:
        from importlib.metadata import version
        versions["flash-attn-4"] = version("flash-attn-4")
    except Exception:  # not installed
        pass
    return {"gpu": props.name, "sms": props.multi_processor_count, "versions": versions,
            "commit": commit, "date": datetime.date.today().isoformat(),
            "python": sys.version.split()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON and md")
    parser.add_argument("--batch", default="1,16,64", help="batch sizes (default 1,16,64)")
    parser.add_argument("--lengths", default="1024,8192,32768",
                        help="cache lengths L_k (default 1024,8192,32768)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (10)")
    parser.add_argument("--calls", type=int, default=5, help="timed calls per round (5)")
    parser.add_argument("--splits", default="",
                        help="extra flashrepro rows at fixed split counts, e.g. 8,16")
    parser.add_argument("--configs", default="",
                        help="extra flashrepro rows at BLOCK_NxWARPSxSTAGES[/SPLITS], e.g. "
                             "128x4x2 or 128x4x2/8")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("decode_bench needs a CUDA GPU", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    batches = [int(x) for x in args.batch.split(",")]
    lengths = [int(x) for x in args.lengths.split(",")]
    splits = [int(x) for x in args.splits.split(",") if x]
    configs = [x for x in args.configs.split(",") if x]

    timer = Timer()
    ceiling = copy_rate(timer, args.rounds, args.calls)
    fa4 = fa4_functions()
    records = []
    for b in batches:
        for l_k in lengths:
            kernels, notes, skipped, errors = build_kernels(b, l_k, fa4, splits, configs)
            medians = interleaved(timer, kernels, args.rounds, args.calls)
            kv_bytes = 2 * b * H_KV * l_k * D * torch.finfo(DTYPE).bits // 8
            times = {name: statistics.median(m) for name, m in medians.items()}
            peers = [t for name, t in times.items() if not name.startswith("flashrepro")]
            best_peer = min(peers) if peers else math.nan
            for name, t in times.items():
                records.append({
                    "batch": b, "l_k": l_k, "kernel": name, "median_us": t,
                    "round_medians_us": medians[name], "ratio_to_best_peer": t / best_peer,
                    "kv_tb_s": kv_bytes / (t * 1e-6) / 1e12, "max_err_vs_math": errors[name],
                    "note": notes.get(name, "")})
            for name, reason in skipped.items():
                records.append({"batch": b, "l_k": l_k, "kernel": name, "skipped": reason})
            del kernels
            torch.cuda.empty_cache()

    rows = [[r["batch"], r["l_k"], r["kernel"], f"{r['median_us']:.1f}",
             f"{r['ratio_to_best_peer']:.3f}", f"{r['kv_tb_s']:.2f}",
             f"{100 * r['kv_tb_s'] / ceiling:.0f}", f"{r['max_err_vs_math']:.1e}", r["note"]]
            for r in records if "skipped" not in r]
    detail = tabulate(rows, headers=["B", "L_k", "kernel", "µs", "/ best peer", "KV TB/s",
                                     "% copy", "max err", "note"], tablefmt="github")
    grid = []
    for b in batches:
        for kernel in ("flashrepro", FULL_CACHE):
            row = [b, kernel]
            for l_k in lengths:
                mine = [r for r in records if r["batch"] == b and r["l_k"] == l_k
                        and r["kernel"] == kernel and "skipped" not in r]
                row.append(f"{mine[0]['ratio_to_best_peer']:.2f}" if mine else "")
            grid.append(row)
    summary = tabulate(grid, headers=["B", "kernel", *(f"L_k={l_k}" for l_k in lengths)],
                       tablefmt="github")
    skips = "\n".join(f"- B={r['batch']} L_k={r['l_k']} {r['kernel']}: {r['skipped']}"
                      for r in records if "skipped" in r)
    env = environment()
    text = (f"# Decode: flashrepro against SDPA and FA4\n\n{env['gpu']}, {env['versions']}, "
            f"commit {env['commit']}, {env['date']}.\nL_q = 1, H = {H}, H_kv = {H_KV}, D = {D}, "
            f"bf16, every sequence at L_k. Device-to-device copy: {ceiling:.2f} TB/s "
            f"(read + written).\n\nflashrepro's time over the best peer's (lower is better):"
            f"\n\n{summary}\n\n{detail}\n" + (f"\nSkipped:\n{skips}\n" if skips else ""))
    print(text)
    (args.out / "decode_bench.md").write_text(text)
    result = {"env": env, "copy_tb_s": ceiling,
              "problem": {"h": H, "h_kv": H_KV, "d": D, "dtype": str(DTYPE), "l_q": 1},
              "method": {"timer": "cuda events", "l2_flush_bytes": FLUSH_BYTES,
                         "busy_wait_cycles": SLEEP_CYCLES, "rounds": args.rounds,
                         "calls_per_round": args.calls,
                         "statistic": "median of per-round medians"},
              "records": records}
    (args.out / "decode_bench.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
