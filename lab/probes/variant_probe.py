"""The warp-specialized kernel as it is against earlier states of it, side by side
(lab/2026-11-29-turn-next-q-epilogue/ and later).

Each earlier state is the kernel module at a commit, written to a file and imported from its
path (Triton's JIT needs the source file). The saved module still imports its shared
functions (``store_output``, the softmax, the tile order) from the tree under test: where those changed
since (56f4f97 changed ``fwd_gluon.store_output``), save them too and point the import at the
copy, or the earlier state runs with today's versions. On an H200, from the repository root:

    git show a71ef80:src/flashrepro/kernels/fwd_gluon.py > /tmp/fwd_gluon_a71ef80.py
    git show a71ef80:src/flashrepro/kernels/fwd_gluon_ws.py \\
        | sed 's/^from flashrepro.kernels.fwd_gluon import/from fwd_gluon_a71ef80 import/' \\
        > /tmp/ws_a71ef80.py
    PYTHONPATH=src:.:/tmp python lab/probes/variant_probe.py [--rounds N] [--problems K] \\
        a71ef80=/tmp/ws_a71ef80.py ...

Times, in interleaved rounds with the project's timer, flashrepro's default launch, torch's
cuDNN and flash backends, the kernel now and each earlier state (persistent, one program per
SM, 128x128 tiles, 2 stages, LSE stored): at the article problem non-causal and causal, then
B=16 L=1024 non-causal and causal, B=4 L=4096 non-causal and causal, B=1 L=16384 causal,
B=16 L=1024 D=64 non-causal (the first K of these with ``--problems``).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch
from tabulate import tabulate

from flashrepro.bench.problem import Problem, load_article
from flashrepro.bench.timing import interleaved_rounds
from flashrepro.kernels import fwd_gluon_ws
from lab.probes.gluon_probe import RATIO_HEADERS, peer_calls, ratio_rows
from lab.probes.ws_probe import ws_call


def load_module(path: str | Path):
    """Import the kernel module saved at ``path``."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def edited_source(edits: list[tuple[str, str]]) -> str:
    """:mod:`flashrepro.kernels.fwd_gluon_ws`'s source with each (old, new) of ``edits``
    applied; exits naming an ``old`` that does not occur exactly once."""
    src = Path(fwd_gluon_ws.__file__).read_text()
    for old, new in edits:
        if src.count(old) != 1:
            raise SystemExit(f"edit does not match the kernel exactly once: {old!r}")
        src = src.replace(old, new)
    return src


def load_edited(edits: list[tuple[str, str]], path: Path):
    """:func:`edited_source` written to ``path`` and imported from there (Triton's JIT needs
    the source file)."""
    path.write_text(edited_source(edits))
    return load_module(path)


def problems() -> list[Problem]:
    article, _ = load_article()
    more = [(16, 1024, 128, False), (16, 1024, 128, True), (4, 4096, 128, False),
            (4, 4096, 128, True), (1, 16384, 128, True), (16, 1024, 64, False)]
    return [Problem(**{**article.as_dict(), "causal": False}), article,
            *(Problem(batch=b, heads=16, seqlen_q=n, seqlen_k=n, head_dim=d, dtype="float16",
                      causal=c) for b, n, d, c in more)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--problems", type=int, default=len(problems()))
    parser.add_argument("variants", nargs="*", help="LABEL=PATH of a saved kernel module")
    args = parser.parse_args()
    earlier = {label: load_module(path)
               for label, path in (v.split("=", 1) for v in args.variants)}
    for problem in problems()[:args.problems]:
        q, k, v = problem.inputs()
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        fns = peer_calls(q, k, v, problem.causal)
        fns["ws now"] = ws_call(q, k, v, problem.causal, (128, 2), sms)
        for label, module in earlier.items():
            fns[f"ws {label}"] = ws_call(q, k, v, problem.causal, (128, 2), sms, module=module)
        rows = ratio_rows(problem, interleaved_rounds(fns, rounds=args.rounds,
                                                      calls_per_round=10))
        print(tabulate(rows, RATIO_HEADERS, tablefmt="github"), flush=True)


if __name__ == "__main__":
    main()
