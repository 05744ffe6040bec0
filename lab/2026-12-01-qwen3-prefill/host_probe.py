"""Short-prefill host cost (GPU): where do frepro's extra ~77 µs per layer go at B=1, L=1024?

The eager 28-layer Qwen3-0.6B-shaped forward at B=1, L=1024 is host-bound (~24 ms); frepro was
8.7 % slower than SDPA flash there (24.7 vs 22.6 ms, model-1ac9342.txt). For frepro,
sdpa-cudnn and sdpa-flash (each its own copy of the same random bf16 weights, as in
``python -m flashrepro model``) this measures, eager, back to back:

(a) host µs per call inside the attention function and per forward inside the mask function:
    the functions registered with transformers' ``AttentionInterface`` /
    ``AttentionMaskInterface`` ("frepro", "sdpa") are wrapped with ``time.perf_counter``
    accumulation (no synchronisation; the wrapper's own cost, two perf_counter calls, is in);
(b) wall ms per forward: ``--forwards`` forwards back to back, one synchronisation at the end,
    (t_end - t_start) / forwards, and the host ms per forward (time until the last forward
    returned, before that synchronisation), ``--rounds`` interleaved rounds, median;
(c) a cProfile of one forward per implementation, top 15 by cumulative time
    (``cprofile-<impl>.txt``);
(d) inside frepro's attention call, after (a)-(c): host µs per call in ``flashrepro.attention``,
    ``launch._signature`` (the plan key), ``LaunchPlan.launch`` and ``DirectLaunch.__call__``
    (the C launcher and its argument cache), the same kind of wrappers, ``--rounds`` x
    ``--forwards`` forwards; and what missed a cache in them: calls that took the full path
    (``launch._forward_full``) and TMA descriptors encoded (``DirectLaunch.encodes``).

    PYTHONPATH=src python3 lab/2026-12-01-qwen3-prefill/host_probe.py --out $OUT/host_probe

Writes ``host_probe.json``, ``host_probe.md`` and the cProfile texts under ``--out``; prints
the table last.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

from flashrepro import env
from flashrepro.bench import model as M

IMPLS = ["frepro", "sdpa-cudnn", "sdpa-flash"]


class Accumulator:
    """Wraps a function; sums the host seconds spent in it and counts the calls."""

    def __init__(self, fn: Callable[..., Any]) -> None:
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


def wrap_interfaces(names: list[str]) -> tuple[dict[str, Accumulator], dict[str, Accumulator],
                                               Callable[[], None]]:
    """Replace the registered attention and mask functions of ``names`` by accumulators;
    returns them (attention, mask) and a function that restores the originals."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    attn = {n: Accumulator(ALL_ATTENTION_FUNCTIONS[n]) for n in names}
    mask = {n: Accumulator(ALL_MASK_ATTENTION_FUNCTIONS[n]) for n in names}
    for n in names:
        AttentionInterface.register(n, attn[n])
        AttentionMaskInterface.register(n, mask[n])

    def restore() -> None:
        for n in names:
            AttentionInterface.register(n, attn[n].fn)
            AttentionMaskInterface.register(n, mask[n].fn)

    return attn, mask, restore


def inner_timers() -> tuple[dict[str, Accumulator], Callable[[], None]]:
    """Time the pieces of frepro's attention call (docstring, (d)); returns the accumulators
    and a function that restores the originals."""
    import flashrepro
    from flashrepro import direct, launch

    targets = [(flashrepro, "attention", "flashrepro.attention"),
               (launch, "_signature", "launch._signature"),
               (launch, "_forward_full", "launch._forward_full"),
               (launch.LaunchPlan, "launch", "LaunchPlan.launch"),
               (direct.DirectLaunch, "__call__", "DirectLaunch.__call__")]
    accs: dict[str, Accumulator] = {}
    originals = []
    for owner, attr, label in targets:
        original = getattr(owner, attr)
        acc = accs[label] = Accumulator(original)

        def wrapper(*args: Any, _acc: Accumulator = acc, **kwargs: Any) -> Any:
            return _acc(*args, **kwargs)
        originals.append((owner, attr, original))
        setattr(owner, attr, wrapper)

    def restore() -> None:
        for owner, attr, original in originals:
            setattr(owner, attr, original)

    return accs, restore


def descriptor_encodes() -> int:
    """TMA descriptors encoded so far by every cached plan's direct launch."""
    from flashrepro import launch

    return sum(p.direct.encodes for p in launch._PLANS.values() if p.direct is not None)


def back_to_back(fn: Callable[[], object], forwards: int) -> tuple[float, float]:
    """(host ms, wall ms) per forward of ``forwards`` forwards queued back to back."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(forwards):
        fn()
    t_host = time.perf_counter()
    torch.cuda.synchronize()
    t_end = time.perf_counter()
    return (t_host - t0) * 1e3 / forwards, (t_end - t0) * 1e3 / forwards


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    parser.add_argument("--layers", type=env.positive_int, default=28)
    parser.add_argument("--seqlen", type=env.positive_int, default=1024)
    parser.add_argument("--forwards", type=env.positive_int, default=30,
                        help="forwards per round (default: %(default)s)")
    parser.add_argument("--rounds", type=env.positive_int, default=5,
                        help="interleaved rounds (default: %(default)s)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_probe: needs a CUDA GPU")
        return 1
    from transformers import Qwen3ForCausalLM

    import flashrepro.integrations.transformers  # noqa: F401  (registers "frepro")

    environment = env.capture()
    config = M.qwen3_0_6b_config(args.layers)
    torch.manual_seed(0)
    with torch.device("cuda"):
        base = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()
    models = {impl: copy.deepcopy(base) for impl in IMPLS}
    del base
    ids = torch.randint(0, config.vocab_size, (1, args.seqlen), device="cuda")
    fwds = {impl: M.make_forward(models[impl], impl) for impl in IMPLS}
    calls = {impl: (lambda f=fwds[impl]: f(ids)) for impl in IMPLS}
    attn, mask, restore = wrap_interfaces(["frepro", "sdpa"])
    args.out.mkdir(parents=True, exist_ok=True)
    host: dict[str, list[float]] = {i: [] for i in IMPLS}
    wall: dict[str, list[float]] = {i: [] for i in IMPLS}
    attn_us: dict[str, list[float]] = {i: [] for i in IMPLS}
    mask_us: dict[str, list[float]] = {i: [] for i in IMPLS}
    attn_calls: dict[str, int] = {}
    try:
        with torch.inference_mode():
            for impl in IMPLS:  # warm-up: the kernels' compilation and autotuning
                for _ in range(5):
                    calls[impl]()
            torch.cuda.synchronize()
            for r in range(args.rounds):
                for impl in IMPLS[r % len(IMPLS):] + IMPLS[:r % len(IMPLS)]:
                    name = M._attn_name(impl)
                    attn[name].reset()
                    mask[name].reset()
                    h, w = back_to_back(calls[impl], args.forwards)
                    host[impl].append(h)
                    wall[impl].append(w)
                    attn_us[impl].append(attn[name].seconds * 1e6 / attn[name].calls)
                    mask_us[impl].append(mask[name].seconds * 1e6 / args.forwards)
                    attn_calls[impl] = attn[name].calls // args.forwards
            restore()
            accs, restore_inner = inner_timers()
            inner: dict[str, list[float]] = {label: [] for label in accs}
            encodes_before, forwards_inner = descriptor_encodes(), 0
            try:
                for _ in range(args.rounds):
                    for acc in accs.values():
                        acc.reset()
                    back_to_back(calls["frepro"], args.forwards)
                    forwards_inner += args.forwards
                    for label, acc in accs.items():
                        inner[label].append(acc.seconds * 1e6 / max(acc.calls, 1))
                full_calls = accs["launch._forward_full"].calls
            finally:
                restore_inner()
            encodes = descriptor_encodes() - encodes_before
            for impl in IMPLS:
                prof = cProfile.Profile()
                prof.enable()
                calls[impl]()
                prof.disable()
                torch.cuda.synchronize()
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(15)
                (args.out / f"cprofile-{impl}.txt").write_text(text.getvalue())
    finally:
        restore()
    med = statistics.median
    rows = []
    for impl in IMPLS:
        a = med(attn_us[impl])
        rows.append({"impl": impl, "wall_ms": med(wall[impl]), "host_ms": med(host[impl]),
                     "attention_us_per_call": a, "attention_calls_per_forward": attn_calls[impl],
                     "attention_ms_per_forward": a * attn_calls[impl] / 1e3,
                     "mask_us_per_forward": med(mask_us[impl]),
                     "round_wall_ms": wall[impl], "round_attention_us": attn_us[impl]})
    ref = next(r for r in rows if r["impl"] == "sdpa-flash")
    for r in rows:
        r["wall_ms_minus_sdpa_flash"] = r["wall_ms"] - ref["wall_ms"]
        r["attention_ms_minus_sdpa_flash"] = (r["attention_ms_per_forward"]
                                              - ref["attention_ms_per_forward"])
    headers = ["impl", "wall ms/fwd", "host ms/fwd", "attn µs/call", "attn calls/fwd",
               "attn ms/fwd", "mask µs/fwd", "Δ wall ms vs flash", "Δ attn ms vs flash"]
    body = [[r["impl"], f"{r['wall_ms']:.2f}", f"{r['host_ms']:.2f}",
             f"{r['attention_us_per_call']:.1f}", r["attention_calls_per_forward"],
             f"{r['attention_ms_per_forward']:.2f}", f"{r['mask_us_per_forward']:.1f}",
             f"{r['wall_ms_minus_sdpa_flash']:+.2f}", f"{r['attention_ms_minus_sdpa_flash']:+.2f}"]
            for r in rows]
    inner_rows = [{"piece": label, "us_per_call": med(v), "round_us": v}
                  for label, v in inner.items() if label != "launch._forward_full"]
    inner_calls = forwards_inner * attn_calls["frepro"]
    misses = {"attention_calls": inner_calls, "full_path_calls_last_round": full_calls,
              "descriptor_encodes": encodes}
    gpu = (environment.get("gpu") or {}).get("name", "?")
    caption = (f"{gpu}, torch {environment['torch']}, {environment['date']}; Qwen3-0.6B shape, "
               f"{args.layers} layers, B=1 L={args.seqlen}, eager, bf16; {args.rounds} rounds "
               f"x {args.forwards} forwards back to back, medians; attention/mask host time by "
               "perf_counter wrappers on transformers' registered functions, no sync.")
    (args.out / "host_probe.json").write_text(json.dumps(
        {"env": environment, "args": {k: str(v) for k, v in vars(args).items()},
         "rows": rows, "inner": inner_rows, "inner_misses": misses}, indent=1,
        default=str) + "\n")
    inner_body = [[r["piece"], f"{r['us_per_call']:.1f}"] for r in inner_rows]
    inner_caption = (f"Inside frepro's attention call (wrappers on each piece, {args.rounds} x "
                     f"{args.forwards} forwards, medians): of {inner_calls} calls, "
                     f"{full_calls} took the full path in the last round and {encodes} TMA "
                     "descriptors were encoded.")
    inner_table = tabulate(inner_body, ["piece", "host µs/call"], "github")
    (args.out / "host_probe.md").write_text(
        f"# Short-prefill host cost\n\n{caption}\n\n{tabulate(body, headers, 'github')}\n\n"
        f"{inner_caption}\n\n{inner_table}\n")
    print(caption)
    print(tabulate(body, headers, "simple"))
    print(inner_caption)
    print(tabulate(inner_body, ["piece", "host µs/call"], "simple"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
