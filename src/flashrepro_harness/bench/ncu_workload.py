"""The program that ``python -m flashrepro_harness profile`` runs under Nsight Compute.

It builds one problem's inputs (seeded standard-normal q, k, v), launches every requested
ladder variant ``--warmup`` times, synchronises, then launches each variant once more in the
order given — the launches the profiler measures (``--launch-skip warmup x variants``,
``--launch-count variants``, see :mod:`flashrepro_harness.bench.profile`). It prints one line per
measured launch so that a failed run shows how far it got.

Usage: ``python -m flashrepro_harness.bench.ncu_workload --shape B,H,L,D --dtype float16 [--causal]
--config BM,BN,WARPS,STAGES [--warmup N] VARIANT...``
"""

from __future__ import annotations

import argparse
import sys

import torch

from flashrepro.configs import KernelConfig
from flashrepro_harness.bench.ladder_kernels import VARIANTS
from flashrepro_harness.bench.ladder_rungs import launch

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _ints(text: str, n: int, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) != n or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{name} must be {n} positive integers separated by "
                                         f"commas, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flashrepro_harness.bench.ncu_workload",
                                description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--shape", required=True, type=lambda s: _ints(s, 4, "--shape"),
                   help="B,H,L,D (Lq = Lk = L)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float16")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--config", required=True, type=lambda s: _ints(s, 4, "--config"),
                   help="BLOCK_M,BLOCK_N,num_warps,num_stages")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured launches per variant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("variants", nargs="+", choices=VARIANTS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not torch.cuda.is_available():
        print("ncu_workload: no CUDA GPU visible to torch", file=sys.stderr)
        return 1
    b, h, seqlen, d = args.shape
    cfg = KernelConfig(*args.config)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    q, k, v = (torch.randn((b, h, seqlen, d), generator=gen, device="cuda",
                           dtype=DTYPES[args.dtype]) for _ in range(3))
    out = torch.empty_like(q)
    for variant in args.variants:
        for _ in range(args.warmup):
            launch(variant, q, k, v, causal=args.causal, config=cfg, out=out)
    torch.cuda.synchronize()
    for variant in args.variants:
        launch(variant, q, k, v, causal=args.causal, config=cfg, out=out)
        torch.cuda.synchronize()
        print(f"ncu_workload: measured launch of {variant} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
