"""Host µs per attention call inside an eager Qwen3 decode step, and the step's time: frepro's
call through the C++ plan hit (flashrepro.native) against its Python plan hit and SDPA
flash's (lab/2026-12-06-decode-call-native-launch).

One random bf16 Qwen3-0.6B-shaped model per process; each variant is registered as an
attention function wrapped by ``perf_counter`` sums and runs a decode loop of its own (a
1024-token prompt into a DynamicCache, ``--steps`` greedy steps). ``--rounds`` rounds per
batch size, the variants rotated; medians, and the median of the per-round ratios to SDPA
flash. Before timing, the two frepro paths' outputs are compared bit for bit over a decode
of the timed steps' length, and the native path must have launched every call of its timed steps.

    PYTHONPATH=src:. python3 lab/2026-12-06-decode-call-native-launch/probe_model.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ["FLASHREPRO_NATIVE"] = "1"

import flashrepro.integrations.transformers as fr_tf
import torch
from flashrepro import native
from flashrepro_harness.qwen3 import build
from tabulate import tabulate
from transformers import AttentionInterface, AttentionMaskInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

REGISTRY = native.registry()
assert REGISTRY is not None, "the extension did not build"


class Accumulator:
    """An attention function that sums its own host time; ``native`` switches frepro's C++
    plan hit on or off for its calls."""

    def __init__(self, fn: Any, use_native: bool) -> None:
        self.fn, self.use_native, self.seconds, self.calls = fn, use_native, 0.0, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        native._REGISTRY = REGISTRY if self.use_native else None
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


IMPLS = {"frepro native": (fr_tf.attention_forward, True),
         "frepro python": (fr_tf.attention_forward, False),
         "sdpa-flash": (sdpa_attention_forward, False)}


def decode(model: Any, impl: str, ids: torch.Tensor, steps: int, acc: Accumulator,
           keep: list[torch.Tensor] | None = None) -> tuple[float, float]:
    """(host µs per attention call, wall ms per step) of ``steps`` decode steps."""
    model.set_attn_implementation(f"probe_{list(IMPLS).index(impl)}")
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    with torch.inference_mode(), build.sdpa_context("sdpa-flash"):
        cache = DynamicCache(config=model.config)
        logits = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        token = logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        acc.seconds, acc.calls = 0.0, 0
        start.record()
        for _ in range(steps):
            logits = model(input_ids=token, past_key_values=cache, use_cache=True,
                           logits_to_keep=1).logits
            token = logits[:, -1:].argmax(-1)
            if keep is not None:
                keep.append(logits.float().cpu())
        end.record()
        torch.cuda.synchronize()
    return acc.seconds * 1e6 / max(acc.calls, 1), start.elapsed_time(end) / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = build.build_models(build.qwen3_0_6b_config(), ["frepro"])["frepro"]
    accs = {}
    for i, (impl, (fn, use_native)) in enumerate(IMPLS.items()):
        accs[impl] = Accumulator(fn, use_native)
        AttentionInterface.register(f"probe_{i}", accs[impl])
        AttentionMaskInterface.register(f"probe_{i}", fr_tf.mask if impl.startswith("frepro")
                                        else AttentionMaskInterface._global_mapping["sdpa"])
    text = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
            f"{args.steps} steps x {args.rounds} rounds")
    results: dict[str, Any] = {}
    for b in (int(x) for x in args.batches.split(",")):
        ids = torch.randint(0, 1000, (b, 1024), device="cuda",
                            generator=torch.Generator("cuda").manual_seed(0))
        logits: dict[str, list[torch.Tensor]] = {}
        for impl in IMPLS:
            logits[impl] = []
            # the timed steps' cache lengths, so every plan (k's strides and L_max
            # specialized by Triton: a multiple of 16 or not) is registered before timing
            decode(model, impl, ids, args.steps, accs[impl], logits[impl])
        same = all(torch.equal(a, b_) for a, b_ in zip(logits["frepro native"],
                                                       logits["frepro python"], strict=True))
        gap = max((a - b_).abs().max().item() for a, b_ in zip(
            logits["frepro native"], logits["sdpa-flash"], strict=True))
        text += f"\n\nB={b}: native logits equal to python's: {same}; max |native - sdpa| {gap:.4f}"
        samples: dict[str, list[tuple[float, float]]] = {impl: [] for impl in IMPLS}
        names = list(IMPLS)
        for r in range(args.rounds):
            for impl in names[r % 3:] + names[:r % 3]:
                before = REGISTRY.launches
                samples[impl].append(decode(model, impl, ids, args.steps, accs[impl]))
                if impl == "frepro native":
                    launched = REGISTRY.launches - before
                    assert launched == args.steps * model.config.num_hidden_layers, launched
        rows = []
        for name, s in samples.items():
            ref = samples["sdpa-flash"]
            rows.append([name, statistics.median(a for a, _ in s),
                         statistics.median(a / r[0] for (a, _), r in zip(s, ref, strict=True)),
                         statistics.median(w for _, w in s),
                         statistics.median(w / r[1] for (_, w), r in zip(s, ref, strict=True)),
                         min(r[1] / w for (_, w), r in zip(s, ref, strict=True)),
                         max(r[1] / w for (_, w), r in zip(s, ref, strict=True))])
        text += "\n" + tabulate(
            rows, ["variant", "µs / attention call", "/ sdpa-flash's (per round)",
                   "ms / step", "/ sdpa-flash's (per round)", "speed / sdpa min",
                   "speed / sdpa max"], floatfmt=".3f")
        results[f"B={b}"] = samples
    print(text)
    (args.out / "probe_model.txt").write_text(text + "\n")
    (args.out / "probe_model.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
