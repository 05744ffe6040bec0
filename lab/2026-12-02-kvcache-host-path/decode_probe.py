"""Where does an eager Qwen3 decode step spend its host time, per implementation (GPU)?

For frepro, SDPA flash and SDPA cuDNN (each its own copy of one random bf16 Qwen3-0.6B-shaped
model, as ``flashrepro model --generate`` builds them), at each B of ``--batches``: a 1024-token
prompt into a DynamicCache, then ``--steps`` greedy decode steps, timed as:

- wall ms per step: CUDA events around the steps (no sync inside);
- host ms per step: ``perf_counter`` until the last step returned, before the sync;
- host µs per attention call: the function registered with transformers' AttentionInterface
  ("frepro" or "sdpa") wrapped with ``perf_counter`` sums;
- for frepro, the calls that went through Triton's JIT launch (``KernelCall.run``), and the
  kvcache signature checks that missed.

Each implementation also runs with Python's garbage collector off during its steps (rows
"(gc off)"): per-call Python objects (plan keys, argument tuples) could trigger collections
that traverse the whole model's objects, a cost that would land on every implementation's
host time but grow with the allocations of one. And a B=1, L=1024 prefill (one forward,
``use_cache=False``), eager, GC on and off: the short prefill that trailed SDPA flash
(reproduce/results/nvidia-h200/model.md).

``--rounds`` rounds with the implementations interleaved, the median. Writes ``probe.json``
and prints the tables.

    PYTHONPATH=src python3 lab/2026-12-02-kvcache-host-path/decode_probe.py --out $OUT
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate
from transformers import AttentionInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import flashrepro.integrations.transformers as fr_tf
from flashrepro.kernels.call import KernelCall
from flashrepro_harness.qwen3 import build

IMPLS = ["frepro", "sdpa-flash", "sdpa-cudnn"]


class Accumulator:
    """Wraps a function; sums the host seconds spent in it and counts the calls."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.seconds, self.calls = fn, 0.0, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0


def decode(model: Any, impl: str, ids: torch.Tensor, steps: int,
           attn: Accumulator) -> dict[str, float]:
    """One prefill and ``steps`` decode steps; the step timings."""
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    with torch.inference_mode(), build.sdpa_context(impl):
        cache = DynamicCache(config=model.config)
        logits = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        token = logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        attn.reset()
        start.record()
        t0 = time.perf_counter()
        for _ in range(steps):
            logits = model(input_ids=token, past_key_values=cache, use_cache=True,
                           logits_to_keep=1).logits
            token = logits[:, -1:].argmax(-1)
        host = time.perf_counter() - t0
        end.record()
        torch.cuda.synchronize()
    return dict(wall_ms=start.elapsed_time(end) / steps, host_ms=host * 1e3 / steps,
                attn_us=attn.seconds * 1e6 / max(attn.calls, 1),
                attn_ms_per_step=attn.seconds * 1e3 / steps)


def prefill_ms(model: Any, impl: str, ids: torch.Tensor, calls: int = 5) -> float:
    """Wall ms per forward of ``calls`` back-to-back prefills (CUDA events)."""
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    with torch.inference_mode(), build.sdpa_context(impl):
        model(ids, use_cache=False, logits_to_keep=1)
        torch.cuda.synchronize()
        start.record()
        for _ in range(calls):
            model(ids, use_cache=False, logits_to_keep=1)
        end.record()
        torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def gc_off(fn: Any, *args: Any) -> Any:
    gc.collect()
    gc.disable()
    try:
        return fn(*args)
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = build.build_models(build.qwen3_0_6b_config(), IMPLS)
    wrapped = {"frepro": Accumulator(fr_tf.attention_forward),
               "sdpa": Accumulator(sdpa_attention_forward)}
    for name, acc in wrapped.items():
        AttentionInterface.register(name, acc)
    jit_runs: list[Any] = []
    jit_run = KernelCall.run

    def counted(call: KernelCall) -> Any:
        jit_runs.append(call.kernel)
        return jit_run(call)

    KernelCall.run = counted  # type: ignore[method-assign]
    for impl, model in models.items():
        model.set_attn_implementation(build.attn_name(impl))
    gen = torch.Generator("cuda").manual_seed(0)
    rows, raw = [], {}
    for b in [int(x) for x in args.batches.split(",")]:
        ids = torch.randint(0, 1000, (b, 1024), device="cuda", generator=gen)
        for impl, model in models.items():  # warm-up: plans, kernels, cuDNN graphs
            decode(model, impl, ids, 4, wrapped["frepro" if impl == "frepro" else "sdpa"])
        labels = [(impl, off) for impl in IMPLS for off in (False, True)]
        samples: dict[str, list[dict[str, float]]] = {}
        runs_per_round = []
        for r in range(args.rounds):
            for impl, off in labels[r % len(labels):] + labels[:r % len(labels)]:
                acc = wrapped["frepro" if impl == "frepro" else "sdpa"]
                jit_runs.clear()
                run = (models[impl], impl, ids, args.steps, acc)
                label = impl + (" (gc off)" if off else "")
                samples.setdefault(label, []).append(gc_off(decode, *run) if off
                                                     else decode(*run))
                if impl == "frepro":
                    runs_per_round.append(len(jit_runs))
        raw[b] = samples
        for label, s in samples.items():
            med = {k: statistics.median(x[k] for x in s) for k in s[0]}
            rows.append([b, label, round(med["wall_ms"], 2), round(med["host_ms"], 2),
                         round(med["attn_us"], 1), round(med["attn_ms_per_step"], 2),
                         runs_per_round if label == "frepro" else ""])
    headers = ["B", "impl", "wall ms/step", "host ms/step", "host µs/attention call",
               "attention host ms/step", "JIT launches per round"]
    table = tabulate(rows, headers, tablefmt="github")
    ids = torch.randint(0, 1000, (1, 1024), device="cuda", generator=gen)
    prefill: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for impl in IMPLS[r % len(IMPLS):] + IMPLS[:r % len(IMPLS)]:
            prefill.setdefault(impl, []).append(prefill_ms(models[impl], impl, ids))
            prefill.setdefault(impl + " (gc off)", []).append(
                gc_off(prefill_ms, models[impl], impl, ids))
    table += "\n\nB=1, L=1024 eager prefill, ms per forward (median of rounds)\n\n" + tabulate(
        [[k, round(statistics.median(v), 2), round(min(v), 2), round(max(v), 2)]
         for k, v in prefill.items()], ["impl", "median", "min", "max"], tablefmt="github")
    (args.out / "probe.json").write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, steps=args.steps,
        rounds=args.rounds, rows=rows, raw={str(k): v for k, v in raw.items()},
        prefill=prefill), indent=1))
    (args.out / "probe.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
