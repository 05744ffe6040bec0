"""Host and device time per call of a compiled attention call, and a compiled 2-layer Qwen3.

Part 1, one layer's attention at Qwen3-0.6B's shape (q (1, 16, 1024, 128), k and v
(1, 8, 1024, 128), bf16, GQA, causal), each row ``torch.compile(fullgraph=True)`` of a function
of (q, k, v) returning o:

- ``sdpa-flash``, ``sdpa-cudnn``: ``scaled_dot_product_attention`` inside ``sdpa_kernel`` of
  that backend (traced into the graph);
- ``frepro-op``: ``flashrepro.attention`` (the opaque ``flashrepro::attention`` in the graph;
  its plan's launch, in Python, per call);
- ``frepro-inline``: ``flashrepro::attention_triton`` with config None (inductor launches
  attn_fwd_kernel from its own code; the inline config, no Gluon kernel), and
  ``frepro-inline <label>`` for each ``--extra-configs`` label;
- ``frepro-eager``: ``flashrepro.attention`` not compiled (the plan path), for reference.

Host µs per call: ``--calls`` calls issued back to back while the GPU is held busy by a
``torch.cuda._sleep`` long enough to cover them (checked: ``covered``), perf_counter around the
calls, no sync inside. Device µs per call: CUDA events around the same calls, recorded after
the sleep, so the calls' device time back to back (inputs in L2). Rows in interleaved rounds,
order rotated, median of the rounds. Each row's output is checked against SDPA flash's once
(max |Δ|), and inductor's code is searched for the launch (``inlined``: attn_fwd_kernel in the
code and no flashrepro op).

Part 2 (``--skip-model`` leaves it out): Qwen3-0.6B's shape with 2 decoder layers in
transformers (random bf16 weights), each decoder layer compiled (fullgraph, the ``model``
benchmark's regional compilation), B=1, L=1024 prefill, tokens/s for sdpa-flash, sdpa-cudnn,
frepro (the integration: the opaque ``attention_bshd``) and frepro-inline (an attention function
registered here that calls ``attention_triton`` with bshd=True under compilation); forwards
timed with CUDA events back to back, interleaved rounds, median; logits' max |Δ| to sdpa-flash.

Run from the repository root on the GPU (about 2-3 min):
``PYTHONPATH=src python lab/2026-12-02-compiled-op-host-cost/compiled_host_cost.py --out DIR``
Writes ``DIR/compiled_host_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tabulate import tabulate
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashrepro
from flashrepro import ops

Q_SHAPE, KV_SHAPE, DTYPE = (1, 16, 1024, 128), (1, 8, 1024, 128), torch.bfloat16
INLINE_NAME = "frepro_inline"


def sdpa_fn(backend: SDPBackend, gqa: bool = True) -> Callable[..., torch.Tensor]:
    def f(q, k, v):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    return f


def frepro_op(q, k, v):
    return flashrepro.attention(q, k, v, causal=True, enable_gqa=True)


def inline_fn(config: str | None) -> Callable[..., torch.Tensor]:
    def f(q, k, v):
        return ops.attention_triton(q, k, v, True, None, True, "top_left", config, False)[0]
    return f


def compiled(fn: Callable[..., torch.Tensor], args: tuple[torch.Tensor, ...]
             ) -> tuple[Callable[..., torch.Tensor], str, float]:
    """torch.compile(fn, fullgraph=True), its first call's inductor code and compile seconds."""
    from torch._inductor.utils import run_and_get_code

    c = torch.compile(fn, fullgraph=True)
    t0 = time.perf_counter()
    _, codes = run_and_get_code(c, *args)
    torch.cuda.synchronize()
    return c, "\n".join(codes), time.perf_counter() - t0


def sleep_cycles(seconds: float) -> int:
    """GPU clock cycles of ``torch.cuda._sleep`` for about ``seconds`` at the max SM clock."""
    khz = torch.cuda.get_device_properties(0).clock_rate
    return int(seconds * khz * 1e3)


def host_and_device_us(fn: Callable[[], object], calls: int, cover_s: float
                       ) -> tuple[float, float, bool]:
    """(host µs, device µs, covered) per call of ``calls`` calls issued behind a sleep of
    ``cover_s`` seconds; covered: the host finished issuing before the sleep ended."""
    start, end, slept = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    before = torch.cuda.Event(enable_timing=True)
    before.record()
    torch.cuda._sleep(sleep_cycles(cover_s))
    slept.record()
    start.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    sleep_s = before.elapsed_time(slept) / 1e3
    return host / calls * 1e6, start.elapsed_time(end) * 1e3 / calls, host < sleep_s


def part1(rounds: int, calls: int, extra_configs: list[str]) -> dict[str, Any]:
    torch.manual_seed(0)
    q = torch.randn(Q_SHAPE, dtype=DTYPE, device="cuda")
    k, v = (torch.randn(KV_SHAPE, dtype=DTYPE, device="cuda") for _ in range(2))
    args = (q, k, v)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    group = Q_SHAPE[1] // KV_SHAPE[1]
    repeated = (q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1))
    candidates: dict[str, list[tuple[str, Callable[..., torch.Tensor], tuple]]] = {
        "sdpa-flash": [("", sdpa_fn(SDPBackend.FLASH_ATTENTION), args)],
        # where cuDNN refuses enable_gqa: k and v repeated beforehand (outside the timing)
        "sdpa-cudnn": [("", sdpa_fn(SDPBackend.CUDNN_ATTENTION), args),
                       (" (k/v repeated)", sdpa_fn(SDPBackend.CUDNN_ATTENTION, False), repeated)],
        "frepro-op": [("", frepro_op, args)],
        "frepro-inline": [("", inline_fn(None), args)],
        **{f"frepro-inline {label}": [("", inline_fn(label), args)] for label in extra_configs},
    }
    rows: dict[str, dict[str, Any]] = {}
    fns: dict[str, Callable[[], object]] = {}
    for base, variants in candidates.items():
        for suffix, fn, fn_args in variants:
            name = base + suffix
            try:
                c, code, seconds = compiled(fn, fn_args)
                out = c(*fn_args)
            except Exception as exc:  # a row that fails to compile keeps its error
                rows[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                print(f"{name}: {rows[name]['error']}", file=sys.stderr)
                continue
            rows[name] = {
                "compile_s": round(seconds, 1),
                "max_abs_diff_to_sdpa_flash": (out.float() - ref.float()).abs().max().item(),
                "inlined": "attn_fwd_kernel" in code and "torch.ops.flashrepro" not in code,
                "flashrepro_op_in_code": "torch.ops.flashrepro" in code,
            }
            fns[name] = (lambda c=c, a=fn_args: c(*a))
            print(f"{name}: compiled in {seconds:.1f} s, {rows[name]}", file=sys.stderr,
                  flush=True)
            break
    fns["frepro-eager"] = lambda: frepro_op(*args)
    rows["frepro-eager"] = {"max_abs_diff_to_sdpa_flash":
                            (frepro_op(*args).float() - ref.float()).abs().max().item()}
    for fn in fns.values():  # warm
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples: dict[str, list[tuple[float, float, bool]]] = {n: [] for n in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(host_and_device_us(fns[name], calls, cover_s=calls * 300e-6))
    for name, got in samples.items():
        hosts, devices, covered = zip(*got, strict=True)
        rows[name].update(host_us=statistics.median(hosts), host_us_rounds=list(hosts),
                          device_us=statistics.median(devices),
                          device_us_rounds=list(devices), covered=all(covered))
    return rows


def inline_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                     value: torch.Tensor, attention_mask: torch.Tensor | None,
                     dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The integration's attention function, except that under compilation it calls
    ``attention_triton`` (bshd=True) instead of ``attention_bshd``."""
    if not torch.compiler.is_compiling() or attention_mask is not None or dropout:
        from flashrepro.integrations import transformers as fr_tf

        return fr_tf.attention_forward(module, query, key, value, attention_mask, dropout,
                                       scaling, is_causal, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = query.shape[2] > 1 and bool(causal)
    scale = None if scaling is None else float(scaling)
    o, _ = ops.attention_triton(query, key, value, causal, scale,
                                key.shape[1] != query.shape[1], "bottom_right", None, True)
    return o.transpose(1, 2), None


def part2(rounds: int, calls: int) -> dict[str, Any]:
    from transformers import AttentionInterface, AttentionMaskInterface

    from flashrepro.integrations import transformers as fr_tf
    from flashrepro_harness.qwen3.build import build_models, make_forward, qwen3_0_6b_config
    from flashrepro_harness.qwen3.measure import compile_layers, interleave, max_abs_diff

    AttentionInterface.register(INLINE_NAME, inline_attention)
    AttentionMaskInterface.register(INLINE_NAME, fr_tf.mask)
    impls = ["sdpa-flash", "sdpa-cudnn", "frepro", "frepro-inline"]
    models = build_models(qwen3_0_6b_config(2), impls)
    ids = torch.randint(0, 151936, (1, 1024), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    rows: dict[str, dict[str, Any]] = {}
    fns: dict[str, Callable[[], object]] = {}
    ref = None
    for impl in impls:
        model = models[impl]
        if impl == "frepro-inline":
            model.set_attn_implementation(INLINE_NAME)

            def fwd(x, model=model):
                return model(x, use_cache=False).logits
        else:
            fwd = make_forward(model, impl)
        compile_layers(model, "frepro" if impl == "frepro-inline" else impl, fullgraph=True)
        t0 = time.perf_counter()
        try:
            with torch.inference_mode():
                logits = fwd(ids)
            torch.cuda.synchronize()
        except Exception as exc:
            rows[impl] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(f"model {impl}: {rows[impl]['error']}", file=sys.stderr)
            continue
        ref = logits if ref is None else ref
        rows[impl] = {"compile_s": round(time.perf_counter() - t0, 1),
                      "max_abs_diff_to_sdpa_flash": max_abs_diff(logits, ref)}
        print(f"model {impl}: {rows[impl]}", file=sys.stderr, flush=True)

        def run(fwd=fwd):
            with torch.inference_mode():
                fwd(ids)
        fns[impl] = run
        for _ in range(2):
            run()
    torch.cuda.synchronize()
    per_round = interleave(fns, rounds, calls)
    best = None
    for impl, ms in per_round.items():
        rows[impl].update(ms=statistics.median(ms), ms_rounds=ms,
                          k_tokens_per_s=1024 / statistics.median(ms))
    sdpa = [i for i in ("sdpa-flash", "sdpa-cudnn") if i in per_round]
    if sdpa:
        best = min(sdpa, key=lambda i: rows[i]["ms"])
        for impl, ms in per_round.items():
            ratios = [b / m for b, m in zip(per_round[best], ms, strict=True)]
            rows[impl].update(speed_vs_best_sdpa=statistics.median(ratios),
                              speed_vs_best_sdpa_range=[min(ratios), max(ratios)])
    return {"best_sdpa": best, "rows": rows}


def markdown(results: dict[str, Any]) -> str:
    lines = [f"{results['env'].get('gpu')}, torch {results['env']['torch']}, triton "
             f"{results['env']['triton']}, commit {results['env'].get('git_commit')}; "
             f"{results['method']}", ""]
    table = [[name, r.get("host_us"), r.get("device_us"), r.get("covered"), r.get("inlined"),
              r.get("max_abs_diff_to_sdpa_flash"), r.get("compile_s"), r.get("error", "")]
             for name, r in results["attention"].items()]
    lines.append(tabulate(table, headers=["call", "host µs", "device µs", "covered", "inlined",
                                          "max |Δ| to flash", "compile s", "error"],
                          tablefmt="github", floatfmt=".2f"))
    if "model" in results:
        lines += ["", f"2-layer Qwen3 prefill B=1 L=1024, regional compile; best SDPA: "
                      f"{results['model']['best_sdpa']}", ""]
        table = [[name, r.get("k_tokens_per_s"), r.get("ms"), r.get("speed_vs_best_sdpa"),
                  r.get("speed_vs_best_sdpa_range"), r.get("max_abs_diff_to_sdpa_flash"),
                  r.get("error", "")] for name, r in results["model"]["rows"].items()]
        lines.append(tabulate(table, headers=["impl", "k tok/s", "ms/forward",
                                              "speed / best SDPA", "per-round range",
                                              "logits max |Δ|", "error"],
                              tablefmt="github", floatfmt=".3f"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=100, help="calls per round (part 1)")
    parser.add_argument("--extra-configs", default="128x64 w8 s3",
                        help="comma-separated configs for more frepro-inline rows ('' none)")
    parser.add_argument("--model-rounds", type=int, default=10)
    parser.add_argument("--model-calls", type=int, default=5)
    parser.add_argument("--skip-model", action="store_true")
    args = parser.parse_args(argv)
    from flashrepro_harness.env import capture
    from flashrepro_harness.qwen3.measure import recompile_room

    ops.INLINE_TRITON = False  # frepro-op is the opaque op; frepro-inline calls its op directly
    extras = [c.strip() for c in args.extra_configs.split(",") if c.strip()]
    results: dict[str, Any] = {
        "env": capture(),
        "method": (f"host µs: {args.calls} calls behind a GPU sleep, perf_counter; device µs: "
                   f"CUDA events around them; median of {args.rounds} interleaved rounds"),
    }
    with recompile_room(64):  # every model copy compiles the one decoder-layer code object
        results["attention"] = part1(args.rounds, args.calls, extras)
        if not args.skip_model:
            results["model"] = part2(args.model_rounds, args.model_calls)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compiled_host_cost.json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    (args.out / "compiled_host_cost.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
