"""Host cost of the compiled attention op, the old ``out=`` path against the bshd plan.

Rows:

- ``frepro``: the integration as it is (``torch.ops.flashrepro.attention_bshd``: a launch
  plan keyed with ``bshd``, its own (B, L, H, D) buffer, no ``out=`` checks);
- ``frepro-out``: the same kernel through the op body before this change, registered here as
  ``flashrepro_lab::attention_bshd_out`` (a (B, L, H, D) buffer allocated in the op, then
  ``launch.forward(out=...)``: a plan keyed with ``out``'s layout, its memory checked against
  q, k and v, its version counter bumped);
- ``sdpa-flash``, ``sdpa-cudnn``: ``scaled_dot_product_attention`` in that backend.

Part 1, at one layer's shape (q (1, 16, 1024, 128), k and v (1, 8, 1024, 128), bf16, GQA,
causal): host µs per call of each op called directly (eager, no compile), ``--calls`` calls
issued behind a ``torch.cuda._sleep`` that covers them, ``perf_counter``, ``--rounds``
interleaved rounds, median.

Part 2: Qwen3-0.6B's shape (28 layers, random bf16 weights), each decoder layer compiled
(fullgraph, the ``model`` benchmark's regional compile), B=1, L=1024 prefill; ms per forward
with CUDA events, back to back, ``--model-rounds`` interleaved rounds of 5 forwards, median;
and one profiled forward per row (CPU and CUDA activity): the attention op's CPU time per
call and the CUDA launches per forward.

Run from the repository root on the GPU: ``PYTHONPATH=src python
lab/2026-12-02-compiled-prefill-op-path/probe.py --out DIR`` (writes ``DIR/probe.{json,md}``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tabulate import tabulate
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from flashrepro import launch
from flashrepro.integrations import transformers as fr_tf
from flashrepro_harness.env import capture
from flashrepro_harness.qwen3.build import build_models, decoder_layers, qwen3_0_6b_config
from flashrepro_harness.qwen3.measure import compile_layers, interleave, time_forwards

Q_SHAPE, KV_SHAPE, DTYPE = (1, 16, 1024, 128), (1, 8, 1024, 128), torch.bfloat16
OUT_NAME = "frepro-out"
BACKENDS = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}

_LIB = torch.library.Library("flashrepro_lab", "DEF")
_LIB.define("attention_bshd_out(Tensor q, Tensor k, Tensor v, bool causal, float? scale, "
            "bool enable_gqa, str causal_alignment, str? config) -> Tensor")


def _bshd_out(q, k, v, causal, scale, enable_gqa, causal_alignment, config):
    """The op body before the bshd plan: allocate, then forward through ``out=``."""
    b, h, lq, d = q.shape
    out = torch.empty((b, lq, h, d), dtype=q.dtype, device=q.device).transpose(1, 2)
    return launch.forward(q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
                          causal_alignment=causal_alignment, return_lse=True, config=None,
                          out=out)[0]


def _bshd_out_fake(q, k, v, causal, scale, enable_gqa, causal_alignment, config):
    b, h, lq, d = q.shape
    return q.new_empty((b, lq, h, d)).transpose(1, 2)


_LIB.impl("attention_bshd_out", _bshd_out, "CompositeExplicitAutograd")
torch.library.register_fake("flashrepro_lab::attention_bshd_out", _bshd_out_fake, lib=_LIB)
OUT_OP = torch.ops.flashrepro_lab.attention_bshd_out.default


def out_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                          is_causal=None, **kwargs):
    """An attention function for the model rows: ``frepro-out``'s op, no mask (B=1 prefill)."""
    assert attention_mask is None and not dropout
    o = OUT_OP(query, key, value, True, scaling, key.shape[1] != query.shape[1],
               "bottom_right", None)
    return o.transpose(1, 2), None


def sleep_cycles(seconds: float) -> int:
    return int(seconds * torch.cuda.get_device_properties(0).clock_rate * 1e3)


def host_us(fn: Callable[[], object], calls: int, cover_s: float = 0.05) -> tuple[float, bool]:
    """Host µs per call of ``calls`` calls issued behind a GPU sleep; whether it covered them."""
    torch.cuda.synchronize()
    before, slept = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    before.record()
    torch.cuda._sleep(sleep_cycles(cover_s))
    slept.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return host / calls * 1e6, host < before.elapsed_time(slept) / 1e3


def part1(rounds: int, calls: int) -> dict[str, Any]:
    torch.manual_seed(0)
    q = torch.randn(Q_SHAPE, dtype=DTYPE, device="cuda")
    k, v = (torch.randn(KV_SHAPE, dtype=DTYPE, device="cuda") for _ in range(2))
    scale = Q_SHAPE[-1] ** -0.5
    fns: dict[str, Callable[[], object]] = {
        "frepro": lambda: torch.ops.flashrepro.attention_bshd.default(
            q, k, v, True, scale, True, "bottom_right", None),
        OUT_NAME: lambda: OUT_OP(q, k, v, True, scale, True, "bottom_right", None),
    }
    for name, backend in BACKENDS.items():
        def sdpa(backend: SDPBackend = backend) -> object:
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                                      enable_gqa=True)
        fns[name] = sdpa
    ref = fns["sdpa-flash"]().float()
    errors = {n: (f().float() - ref).abs().max().item() for n, f in fns.items()}
    for f in fns.values():
        for _ in range(20):
            f()
    per: dict[str, list[float]] = {n: [] for n in fns}
    covered = True
    names = list(fns)
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            us, ok = host_us(fns[n], calls)
            per[n].append(us)
            covered &= ok
    return {"host_us": {n: statistics.median(v) for n, v in per.items()}, "rounds": per,
            "covered": covered, "max_abs_diff_vs_flash": errors}


def profiled(fn: Callable[[], object]) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    ops: dict[str, Any] = {}
    launches = 0
    for e in prof.key_averages():
        if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx",
                     "cudaLaunchKernelExC"):
            launches += e.count
        if "attention" in e.key and "::" in e.key:
            ops[e.key] = {"count": e.count, "cpu_us_per_call": e.cpu_time_total / e.count}
    return {"launches": launches, "attention_ops": ops}


def part2(rounds: int) -> dict[str, Any]:
    AttentionInterface.register(OUT_NAME, out_attention_forward)
    AttentionMaskInterface.register(OUT_NAME, fr_tf.mask)
    impls = ["frepro", OUT_NAME, *BACKENDS]
    models = build_models(qwen3_0_6b_config(), impls)
    ids = torch.randint(0, 1000, (1, 1024), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    fns: dict[str, Callable[[], object]] = {}
    logits: dict[str, torch.Tensor] = {}
    for impl, model in models.items():
        model.set_attn_implementation({"frepro": fr_tf.NAME, OUT_NAME: OUT_NAME}.get(impl,
                                                                                    "sdpa"))
        compile_layers(model, impl, fullgraph=True)
        assert len(decoder_layers(model)) == 28

        def fwd(model: torch.nn.Module = model) -> torch.Tensor:
            with torch.inference_mode():
                return model(ids, use_cache=False).logits
        for _ in range(3):
            logits[impl] = fwd()[:, -1].float()
        fns[impl] = fwd
    torch.cuda.synchronize()
    ms = interleave(fns, rounds, 5, time_forwards)
    best = {n: statistics.median(v) for n, v in ms.items()}
    sdpa_best = [min(ms[s][r] for s in BACKENDS) for r in range(rounds)]
    ratio = {n: [sdpa_best[r] / ms[n][r] for r in range(rounds)] for n in ms}
    prof = {n: profiled(f) for n, f in fns.items()}
    return {"ms": best, "rounds_ms": ms, "speed_vs_best_sdpa": {
        n: {"median": statistics.median(v), "min": min(v), "max": max(v)}
        for n, v in ratio.items()},
        "last_logits_max_abs_diff_vs_flash": {
            n: (logits[n] - logits["sdpa-flash"]).abs().max().item() for n in logits},
        "profile": prof}


def markdown(res: dict[str, Any]) -> str:
    p1, p2 = res["part1"], res["part2"]
    rows1 = [[n, f"{p1['host_us'][n]:.1f}", f"{p1['max_abs_diff_vs_flash'][n]:.3g}"]
             for n in p1["host_us"]]
    rows2 = []
    for n in p2["ms"]:
        r = p2["speed_vs_best_sdpa"][n]
        ops = p2["profile"][n]["attention_ops"]
        op_us = "; ".join(f"{k} {v['cpu_us_per_call']:.1f} µs x{v['count']}"
                          for k, v in ops.items())
        rows2.append([n, f"{p2['ms'][n]:.2f}", f"{r['median']:.3f} ({r['min']:.3f}-"
                      f"{r['max']:.3f})", p2["profile"][n]["launches"], op_us])
    env = res["env"]
    return "\n\n".join([
        "# Compiled prefill: the attention op's host path",
        f"{env.get('gpu', {}).get('name')}, torch {env.get('torch')}, triton "
        f"{env.get('triton')}, commit {env.get('git_commit')}, {env.get('date')}.",
        f"## Part 1: host µs per direct call (layer shape), {res['args']['rounds']} rounds x "
        f"{res['args']['calls']} calls, median; covered by the GPU sleep: {p1['covered']}",
        tabulate(rows1, ["row", "host µs / call", "max |Δ| vs flash"], tablefmt="github"),
        f"## Part 2: Qwen3-0.6B shape, 28 layers compiled (regional), B=1 L=1024, "
        f"{res['args']['model_rounds']} rounds x 5 forwards",
        tabulate(rows2, ["row", "ms / forward", "speed / best SDPA (range)",
                         "CUDA launches / forward", "attention op CPU time (profiler)"],
                 tablefmt="github")])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--model-rounds", type=int, default=10)
    args = ap.parse_args()
    env = capture()
    res = {"args": vars(args) | {"out": str(args.out)}, "env": env,
           "part1": part1(args.rounds, args.calls)}
    print(json.dumps(res["part1"]["host_us"]), flush=True)
    res["part2"] = part2(args.model_rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe.json").write_text(json.dumps(res, indent=1, default=str))
    md = markdown(res)
    (args.out / "probe.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
