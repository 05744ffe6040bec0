"""Host µs per attention call inside an eager Qwen3 decode step: frepro's call against SDPA
flash's, with Python's garbage collector on and off (lab/2026-12-03-decode-call-flat-path).

One random bf16 Qwen3-0.6B-shaped model per process; each variant is registered as an
attention function wrapped by ``perf_counter`` sums and runs a decode loop of its own (a
1024-token prompt into a DynamicCache, ``--steps`` greedy steps). ``--rounds`` rounds per
batch size, the variants rotated; medians, and the median of the per-round ratios to SDPA
flash with the collector in the same state. Which flashrepro runs is whatever ``PYTHONPATH``
puts first (run.sh alternates two trees).

    PYTHONPATH=src python3 lab/2026-12-03-decode-call-flat-path/probe_model.py --out $OUT
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
from transformers import AttentionInterface, AttentionMaskInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import flashrepro
import flashrepro.integrations.transformers as fr_tf
from flashrepro_harness.qwen3 import build


class Accumulator:
    """An attention function that sums its own host time."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.seconds, self.calls = fn, 0.0, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


IMPLS = {"frepro": fr_tf.attention_forward, "sdpa-flash": sdpa_attention_forward}
VARIANTS = [(impl, collector) for collector in ("gc on", "gc off") for impl in IMPLS]


def decode(model: Any, impl: str, collector: str, ids: torch.Tensor, steps: int,
           acc: Accumulator) -> tuple[float, float]:
    """(host µs per attention call, wall ms per step) of ``steps`` decode steps."""
    model.set_attn_implementation(f"probe_{list(IMPLS).index(impl)}")
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    with torch.inference_mode(), build.sdpa_context("sdpa-flash"):
        cache = DynamicCache(config=model.config)
        logits = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        token = logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        gc.collect()
        if collector == "gc off":
            gc.disable()
        acc.seconds, acc.calls = 0.0, 0
        try:
            start.record()
            for _ in range(steps):
                logits = model(input_ids=token, past_key_values=cache, use_cache=True,
                               logits_to_keep=1).logits
                token = logits[:, -1:].argmax(-1)
            end.record()
            torch.cuda.synchronize()
        finally:
            gc.enable()
    return acc.seconds * 1e6 / max(acc.calls, 1), start.elapsed_time(end) / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = build.build_models(build.qwen3_0_6b_config(), ["frepro"])["frepro"]
    accs = {}
    for i, (impl, fn) in enumerate(IMPLS.items()):
        accs[impl] = Accumulator(fn)
        AttentionInterface.register(f"probe_{i}", accs[impl])
        AttentionMaskInterface.register(f"probe_{i}", fr_tf.mask if impl == "frepro"
                                        else AttentionMaskInterface._global_mapping["sdpa"])
    text = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, flashrepro from "
            f"{Path(flashrepro.__file__).parent}, {args.steps} steps x {args.rounds} rounds")
    results: dict[str, Any] = {}
    for b in (int(x) for x in args.batches.split(",")):
        ids = torch.randint(0, 1000, (b, 1024), device="cuda",
                            generator=torch.Generator("cuda").manual_seed(0))
        for impl, collector in VARIANTS:
            decode(model, impl, collector, ids, 4, accs[impl])
        samples: dict[str, list[tuple[float, float]]] = {f"{i}, {c}": [] for i, c in VARIANTS}
        for r in range(args.rounds):
            for impl, collector in VARIANTS[r % 4:] + VARIANTS[:r % 4]:
                samples[f"{impl}, {collector}"].append(
                    decode(model, impl, collector, ids, args.steps, accs[impl]))
        rows = []
        for name, s in samples.items():
            ref = samples[f"sdpa-flash, {name.split(', ')[1]}"]
            rows.append([name, statistics.median(a for a, _ in s),
                         statistics.median(a / r[0] for (a, _), r in zip(s, ref, strict=True)),
                         statistics.median(w for _, w in s),
                         statistics.median(w / r[1] for (_, w), r in zip(s, ref, strict=True))])
        text += f"\n\nB={b}\n" + tabulate(
            rows, ["variant", "µs / attention call", "/ sdpa-flash's (per round)",
                   "ms / step", "/ sdpa-flash's (per round)"], floatfmt=".3f")
        results[f"B={b}"] = samples
    print(text)
    (args.out / "probe_model.txt").write_text(text + "\n")
    (args.out / "probe_model.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
