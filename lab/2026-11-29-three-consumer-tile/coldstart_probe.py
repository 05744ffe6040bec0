"""The cold start of the ws kernel: the first loads of a program on the critical path alone
(lab/2026-11-29-three-consumer-tile/).

timeline_probe.py (ws3_tune_bench.sh) showed that at the article problem each consumer's first
tile waits ~3.1k cycles for its Q and K_0, 12 % of that tile, against 0.2k for the second tile
(loaded behind the first). At the start every SM loads at once: each program's producer issues
both consumers' Q, K_0, V_0, K_1, V_1 (160 KiB) together, ~21 MB across the GPU, ~8 MB of it
distinct (from HBM), and consumer 0 needs only its Q and K_0 of those to start. The load-order
variant (lab/2026-11-29-turn-next-q-epilogue/) issued the same loads in the order of first
use and saw no gain: all of them were still in
flight together. Here the producer holds the rest back until the first ones have landed:

- ``qk0``: consumer 0's Q and K_0 go alone; the producer waits for both to land before it
  issues consumer 1's Q, then V_0, K_1, V_1 as before.
- ``qqk0``: both consumers' Q and K_0 go first; the producer waits for K_0 before V_0, K_1, V_1.

Prediction: -0.5 to -1k cycles per program at the article problems (-1 to -2 % at B=2), nothing
at B=16 (once per program of 16 tiles). Run from the repository root on an H200:

    PYTHONPATH=src:. python lab/2026-11-29-three-consumer-tile/coldstart_probe.py parity|timing
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from tabulate import tabulate

from flashrepro.bench.timing import interleaved_rounds
from lab.probes import ws_probe
from lab.probes.gluon_probe import RATIO_HEADERS, peer_calls, ratio_rows
from lab.probes.variant_probe import load_edited, problems
from lab.probes.ws_probe import ws_call

Q_LOAD = """            tma.async_copy_global_to_shared(
                q_desc, [off_b, off_h, (start_m * NUM_CONSUMERS + c) * CONSUMER_ROWS, 0],
                q_ready.index(qb), q_smem.index(qb))
"""
K_LOAD = """            mbarrier.wait(k_empty.index(slot), empty_phase)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [off_b, off_hkv, j * BLOCK_N, 0],
                                            k_ready.index(slot), k_smem.index(slot))
"""
K0_EARLY = """                if local == 0:
                    mbarrier.expect(k_ready.index(0), k_desc.block_type.nbytes)
                    tma.async_copy_global_to_shared(k_desc, [off_b, off_hkv, 0, 0],
                                                    k_ready.index(0), k_smem.index(0))
                    mbarrier.wait(k_ready.index(0), 0)
"""
K_LATER = """            if it > 0:  # the program's first K_0 went early, alone
                mbarrier.wait(k_empty.index(slot), empty_phase)
                mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(k_desc, [off_b, off_hkv, j * BLOCK_N, 0],
                                                k_ready.index(slot), k_smem.index(slot))
"""
VARIANTS = {
    # consumer 0's Q and K_0 alone, then wait for both
    "qk0": [(Q_LOAD, Q_LOAD + "            if c == 0:\n" + K0_EARLY
             + "                    mbarrier.wait(q_ready.index(0), 0)\n"), (K_LOAD, K_LATER)],
    # both consumers' Q and K_0, then wait for K_0
    "qqk0": [(Q_LOAD, Q_LOAD + "            if c == NUM_CONSUMERS - 1:\n" + K0_EARLY),
             (K_LOAD, K_LATER)],
}


def load_variants(tmp: Path) -> dict:
    return {label: load_edited(edits, tmp / f"ws_{label}.py")
            for label, edits in VARIANTS.items()}


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) == 2 else ""
    if mode not in ("parity", "timing"):
        sys.exit("usage: PYTHONPATH=src:. python lab/2026-11-29-three-consumer-tile/coldstart_probe.py parity|timing")
    with tempfile.TemporaryDirectory() as tmp:
        modules = load_variants(Path(tmp))
        if mode == "parity":
            for label, module in modules.items():
                print(f"## {label}\n", flush=True)
                ws_probe.parity(module)
            return
        for problem in problems()[:6]:
            q, k, v = problem.inputs()
            sms = torch.cuda.get_device_properties(q.device).multi_processor_count
            fns = peer_calls(q, k, v, problem.causal)
            fns["ws now"] = ws_call(q, k, v, problem.causal, (128, 2), sms)
            for label, module in modules.items():
                fns[f"ws {label}"] = ws_call(q, k, v, problem.causal, (128, 2), sms,
                                             module=module)
            rows = ratio_rows(problem, interleaved_rounds(fns, rounds=30, calls_per_round=10))
            print(tabulate(rows, RATIO_HEADERS, tablefmt="github"), flush=True)


if __name__ == "__main__":
    main()
