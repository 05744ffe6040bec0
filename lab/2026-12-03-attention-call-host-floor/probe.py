"""Host µs per call of the attention calls a host-bound Qwen3 step makes, and of their pieces,
on the GPU's host (lab/2026-12-03-attention-call-host-floor).

Qwen3-0.6B's attention at B=1 (GQA 16/8, D=128, bf16):

- decode (q L=1, k/v L=1025): transformers' ``sdpa_attention_forward`` under SDPA flash and
  cuDNN, flashrepro's ``attention_forward``, and its pieces (``kvcache_forward`` with
  ``bshd``; one ``torch.empty`` of the output; a Python call of the same signature that does
  nothing);
- prefill (q, k, v L=1024, causal), the calls a compiled layer's code makes:
  ``torch.ops.flashrepro.attention_bshd`` against aten's flash and cuDNN SDPA ops (k and v
  expanded to 16 heads beforehand) and ``F.scaled_dot_product_attention`` with ``enable_gqa``.

Method: per round and row, a GPU busy-wait is queued first (longer than the round), then
``perf_counter`` around ``--calls`` calls with no sync; µs per call. ``--rounds`` rounds, the
rows' order rotated each round; the median and the per-round ratio to SDPA flash's row of the
same group (rounds pair rows that ran seconds apart).

    PYTHONPATH=src python3 lab/2026-12-03-attention-call-host-floor/probe.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tabulate import tabulate
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import flashrepro.integrations.transformers as fr_tf
from flashrepro import launch_varlen, ops


class Layer(torch.nn.Module):
    is_causal = True
    layer_idx = 3

    def __init__(self) -> None:
        super().__init__()
        self.num_key_value_groups = 2
        self.config = type("C", (), {"_attn_implementation": "sdpa"})()


def nothing(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
            is_causal=None, **kwargs):
    return None, None


def rows(scale: float) -> dict[str, dict[str, Callable[[], object]]]:
    dev, dt = "cuda", torch.bfloat16
    gen = torch.Generator(dev).manual_seed(0)
    q1 = torch.randn(1, 16, 1, 128, device=dev, dtype=dt, generator=gen)
    kc, vc = (torch.randn(1, 8, 1025, 128, device=dev, dtype=dt, generator=gen) for _ in "kv")
    qp = torch.randn(1, 16, 1024, 128, device=dev, dtype=dt, generator=gen)
    kp, vp = (torch.randn(1, 8, 1024, 128, device=dev, dtype=dt, generator=gen) for _ in "kv")
    kx, vx = (t.repeat_interleave(2, dim=1) for t in (kp, vp))
    layer = Layer()
    kw = {"dropout": 0.0, "scaling": scale, "position_ids": None}
    flash, cudnn = SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION

    def in_backend(backend, fn):
        def call():
            with sdpa_kernel([backend]):
                return fn()
        return call

    decode = {
        "sdpa-flash": in_backend(flash, lambda: sdpa_attention_forward(
            layer, q1, kc, vc, None, **kw)),
        "sdpa-cudnn": in_backend(cudnn, lambda: sdpa_attention_forward(
            layer, q1, kc, vc, None, **kw)),
        "frepro attention_forward": lambda: fr_tf.attention_forward(layer, q1, kc, vc, None, **kw),
        "frepro kvcache_forward": lambda: launch_varlen.kvcache_forward(
            q1, kc, vc, None, causal=True, scale=scale, enable_gqa=True, num_splits=None,
            return_lse=False, bshd=True),
        "torch.empty (1, 1, 16, 128)": lambda: torch.empty((1, 1, 16, 128), dtype=dt,
                                                           device=dev),
        "python call, same signature": lambda: nothing(layer, q1, kc, vc, None, **kw),
    }
    aten = torch.ops.aten
    prefill = {
        "sdpa-flash": lambda: aten._scaled_dot_product_flash_attention(
            qp, kx, vx, 0.0, True, scale=scale),
        "sdpa-cudnn": lambda: aten._scaled_dot_product_cudnn_attention(
            qp, kx, vx, None, False, 0.0, True, scale=scale),
        "F.sdpa flash, enable_gqa": in_backend(flash, lambda: torch.nn.functional
                                               .scaled_dot_product_attention(
                                                   qp, kp, vp, is_causal=True, scale=scale,
                                                   enable_gqa=True)),
        "flashrepro attention_bshd op": lambda: ops.attention_bshd(
            qp, kp, vp, True, scale, True, "bottom_right", None),
    }
    return {"decode B=1": decode, "prefill B=1 L=1024": prefill}


def host_us(fn: Callable[[], object], calls: int, cycles: int) -> float:
    torch.cuda.synchronize()
    torch.cuda._sleep(cycles)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cycles = 2_000 * 150 * args.calls  # ~150 µs of GPU wait per call: longer than any row
    results = {}
    lines = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
             f"{args.calls} calls x {args.rounds} rounds"]
    with torch.inference_mode():
        for group, fns in rows(128 ** -0.5).items():
            for fn in fns.values():
                for _ in range(20):
                    fn()
            names = list(fns)
            samples = {n: [] for n in names}
            for r in range(args.rounds):
                for n in names[r % len(names):] + names[:r % len(names)]:
                    samples[n].append(host_us(fns[n], args.calls, cycles))
            ref = samples["sdpa-flash"]
            table = []
            for n, s in samples.items():
                ratios = [a / b for a, b in zip(s, ref, strict=True)]
                table.append([n, statistics.median(s), min(s), max(s),
                              statistics.median(ratios)])
            results[group] = samples
            lines.append(f"\n{group}\n" + tabulate(
                table, ["call", "median µs", "min", "max", "/ sdpa-flash (median of rounds)"],
                floatfmt=".2f"))
    text = "\n".join(lines)
    print(text)
    (args.out / "probe.txt").write_text(text + "\n")
    (args.out / "probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
