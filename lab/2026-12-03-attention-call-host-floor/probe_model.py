"""Host µs per attention call inside an eager Qwen3 decode step, for frepro's call and for
parts of it, against SDPA flash's (lab/2026-12-03-attention-call-host-floor).

One random bf16 Qwen3-0.6B-shaped model; each variant is registered as an attention function
(wrapped by ``perf_counter`` sums) and run as a decode loop of its own (1024-token prompt into
a DynamicCache, ``--steps`` greedy steps):

- ``frepro``: ``attention_forward`` as shipped;
- ``frepro, no launch``: the same with the decode plan's launch replaced by nothing;
- ``output only``: ``torch.empty`` of the output and nothing else;
- ``sdpa-flash``: transformers' ``sdpa_attention_forward`` under the flash backend.

The variants without a launch compute garbage: only their host time is read. ``--rounds``
rounds, variants rotated; medians.

    PYTHONPATH=src python3 lab/2026-12-03-attention-call-host-floor/probe_model.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate
from transformers import AttentionInterface, AttentionMaskInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import flashrepro.integrations.transformers as fr_tf
from flashrepro import launch_varlen
from flashrepro_harness.qwen3 import build


class Accumulator:
    def __init__(self, fn: Any) -> None:
        self.fn, self.seconds, self.calls = fn, 0.0, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def no_launch(*args: Any, **kwargs: Any) -> Any:
    real = launch_varlen._launch_plan
    launch_varlen._launch_plan = lambda *a, **k: None
    try:
        return fr_tf.attention_forward(*args, **kwargs)
    finally:
        launch_varlen._launch_plan = real


def output_only(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
    b, h, lq, d = query.shape
    return torch.empty((b, lq, h, d), dtype=query.dtype, device=query.device), None


VARIANTS = {"frepro": fr_tf.attention_forward, "frepro, no launch": no_launch,
            "output only": output_only, "sdpa-flash": sdpa_attention_forward}


def registered(name: str) -> str:
    """The variant's attn_implementation name: none may contain "flash" (transformers would
    look for a FlashAttention build)."""
    return f"probe_{list(VARIANTS).index(name)}"


def decode(model: Any, name: str, ids: torch.Tensor, steps: int, acc: Accumulator
           ) -> tuple[float, float]:
    model.set_attn_implementation(registered(name))
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
        end.record()
        torch.cuda.synchronize()
    return acc.seconds * 1e6 / max(acc.calls, 1), start.elapsed_time(end) / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = build.build_models(build.qwen3_0_6b_config(), ["frepro"])["frepro"]
    accs = {}
    for name, fn in VARIANTS.items():
        reg = registered(name)
        accs[name] = Accumulator(fn)
        AttentionInterface.register(reg, accs[name])
        AttentionMaskInterface.register(
            reg, fr_tf.mask if name.startswith("frepro") or name == "output only"
            else AttentionMaskInterface._global_mapping["sdpa"])
    ids = torch.randint(0, 1000, (args.batch, 1024), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    names = list(VARIANTS)
    for name in names:
        decode(model, name, ids, 4, accs[name])
    samples: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(decode(model, name, ids, args.steps, accs[name]))
    # frepro's call again, its plan launch and the C launcher inside it timed on their own
    plan_acc = Accumulator(launch_varlen._launch_plan)
    launch_varlen._launch_plan = plan_acc
    raw_accs = []
    for plan in launch_varlen._DECODE_PLANS.values():
        raw_accs.append(Accumulator(plan.decode._raw))
        plan.decode._raw = raw_accs[-1]
    parts = []
    for _ in range(args.rounds):
        plan_acc.seconds, plan_acc.calls = 0.0, 0
        for a in raw_accs:
            a.seconds, a.calls = 0.0, 0
        call_us, _ = decode(model, "frepro", ids, args.steps, accs["frepro"])
        raw_s, raw_n = sum(a.seconds for a in raw_accs), sum(a.calls for a in raw_accs)
        parts.append([call_us, plan_acc.seconds * 1e6 / max(plan_acc.calls, 1),
                      raw_s * 1e6 / max(raw_n, 1), raw_n])
    ref = samples["sdpa-flash"]
    rows = [[n, statistics.median(a for a, _ in s), min(a for a, _ in s),
             statistics.median(a / b[0] for (a, _), b in zip(s, ref, strict=True)),
             statistics.median(w for _, w in s)] for n, s in samples.items()]
    table = tabulate(rows, ["variant", "µs / attention call (median)", "min",
                            "/ sdpa-flash's, same round", "wall ms / step"],
                     floatfmt=".2f")
    table += "\n\nfrepro's call and its parts, µs per call (median of rounds)\n" + tabulate(
        [[statistics.median(p[i] for p in parts) for i in range(4)]],
        ["attention call", "_launch_plan", "C launcher", "launches per round"],
        floatfmt=".2f")
    text = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, B={args.batch}, "
            f"{args.steps} steps x {args.rounds} rounds\n{table}")
    print(text)
    (args.out / f"probe_model_b{args.batch}.txt").write_text(text + "\n")
    (args.out / f"probe_model_b{args.batch}.json").write_text(json.dumps(samples, indent=1))


if __name__ == "__main__":
    main()
