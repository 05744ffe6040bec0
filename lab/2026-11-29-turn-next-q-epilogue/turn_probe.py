"""lab/2026-11-29-turn-next-q-epilogue/ (results in ``named-barrier-turn/``): the ping-pong turn handed
over with named barriers, as FA3's warp-scheduler barrier, instead of mbarriers. It was
0.7-1.9 % faster at three of the four problems and equal at the article causal one, and the
kernel has passed its turn that way since a71ef80 (which also skips consumer 1's last pass of
a program; this variant leaves that arrival pending at exit), so the EDITS below match only
the kernel as it was before (e6d106d); kept as the record of that measurement.

lab/2026-11-29-persistent-tile-boundary/ (ncu-b16/): 7.5-12.4 % of each consumer's stall samples sit in the warpgroup
``BAR.SYNC 0x2, 0x80`` that Gluon emits before every ``mbarrier.arrive`` (all 128 threads meet,
then one arrives), the largest before a consumer passes the turn. Here a consumer waits with
``bar.sync 8 + c, 256`` and passes with ``bar.arrive 8 + (1 - c), 256``, each thread arriving
without waiting (inline PTX; named barriers 8 and 9 are above the ids Gluon's partitions use,
0-2 in the SASS). Consumer 1 arrives once before its loop so that consumer 0 goes first.

The variant is generated from the kernel module by :func:`variant_source`. Run from the
repository root on an H200, with the kernel at e6d106d:

    PYTHONPATH=src:. python lab/2026-11-29-turn-next-q-epilogue/turn_probe.py parity|timing
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

from flashrepro.kernels import fwd_gluon_ws

TURN_FUNCS = '''
TURN_BARRIER = gl.constexpr(8)  # named barriers 8 and 9: above the ids Gluon's partitions use


@gluon.jit
def _turn_wait(CONSUMER: gl.constexpr):
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])  # one element per thread
    ids = gl.full([128], TURN_BARRIER + CONSUMER, gl.int32, layout=one)
    gl.inline_asm_elementwise("bar.sync $1, 256; mov.b32 $0, $1;", "=r,r", [ids],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _turn_pass(CONSUMER: gl.constexpr):
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    ids = gl.full([128], TURN_BARRIER + 1 - CONSUMER, gl.int32, layout=one)
    gl.inline_asm_elementwise("bar.arrive $1, 256; mov.b32 $0, $1;", "=r,r", [ids],
                              dtype=gl.int32, is_pure=False, pack=1)

'''
EDITS = [  # (text in the kernel, replacement, expected count)
    ("\n\n@gluon.jit\ndef _tile_blocks(", "\n" + TURN_FUNCS + "\n@gluon.jit\ndef _tile_blocks(", 1),
    ("mbarrier.wait(turn.index(CONSUMER), (turns & 1) ^ (1 - CONSUMER))",
     "_turn_wait(CONSUMER)", 3),
    ("mbarrier.arrive(turn.index(1 - CONSUMER), count=1)", "_turn_pass(CONSUMER)", 3),
    ("    turns = 0  # ping-pong turns taken so far, over all tiles\n",
     "    turns = 0  # ping-pong turns taken so far, over all tiles\n"
     "    if CONSUMER == 1:\n        _turn_pass(CONSUMER)  # consumer 0 goes first\n", 1),
]


def variant_source(source: str) -> str:
    """The kernel module's source with the turn on named barriers.

    Raises:
        ValueError: the kernel no longer has the text an edit expects (it changed: update EDITS).
    """
    for old, new, count in EDITS:
        if source.count(old) != count:
            raise ValueError(f"expected {count} x {old[:50]!r} in fwd_gluon_ws.py, found "
                             f"{source.count(old)}")
        source = source.replace(old, new)
    return source


def load_variant():
    """Write and import the variant as a module (Triton's JIT needs a source file)."""
    path = Path(tempfile.mkdtemp()) / "ws_named_barrier_turns.py"
    path.write_text(variant_source(Path(fwd_gluon_ws.__file__).read_text()))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    import torch
    from tabulate import tabulate

    from flashrepro.bench.problem import Problem, load_article
    from flashrepro.bench.timing import interleaved_rounds
    from lab.probes.gluon_probe import RATIO_HEADERS, peer_calls, ratio_rows
    from lab.probes.ws_probe import parity, ws_call

    variant = load_variant()
    if sys.argv[1] == "parity":
        parity(module=variant)
        return
    article, _ = load_article()
    for batch, causal in ((2, False), (2, True), (16, False), (16, True)):
        problem = Problem(**{**article.as_dict(), "batch": batch, "causal": causal})
        q, k, v = problem.inputs()
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        fns = peer_calls(q, k, v, causal)
        fns["ws, turn on mbarriers"] = ws_call(q, k, v, causal, (128, 2), sms)
        fns["ws, turn on named barriers"] = ws_call(q, k, v, causal, (128, 2), sms,
                                                    module=variant)
        rows = ratio_rows(problem, interleaved_rounds(fns, rounds=30, calls_per_round=10))
        print(tabulate(rows, RATIO_HEADERS, tablefmt="github"), flush=True)


if __name__ == "__main__":
    main()
