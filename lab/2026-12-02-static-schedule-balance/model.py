"""How evenly does each tile schedule spread a causal launch's work over the programs?
(lab/2026-12-02-static-schedule-balance; CPU only)

A tile's work is modelled as the key blocks its rows see (BLOCK_N = 128, top-left causal mask)
plus ``--overhead`` blocks per tile (its Q load, epilogue and turn passes); the tiles are in
the kernels' order (`flashrepro.kernels.fwd.tile_coords`: groups of G (batch, head) pairs, heads
fastest, heaviest query block first). Schedules on P = 132 programs:
- snake: the static persistent grid; round r takes P consecutive tiles, forwards in even
  rounds and backwards in odd ones (`fwd_gluon_ws._schedule_tile`);
- dynamic: each next tile to the program that frees first (the atomic claim, no claim cost);
- grid: one program per tile, handed to the first free SM (the same as dynamic here).
Reports the makespan over the ideal (total work / P) for the L2-bound groups and for equal
groups (`select.heads_per_group`, balanced), at the sweep's causal points.

    PYTHONPATH=src python lab/2026-12-02-static-schedule-balance/model.py
"""

from __future__ import annotations

import argparse
import heapq

from tabulate import tabulate

from flashrepro.select import heads_per_group

PROGRAMS = 132
BLOCK_N = 128


def tile_work(bh: int, seqlen: int, tile_m: int, group: int, overhead: float) -> list[float]:
    """The work of each tile in the kernels' run order."""
    num_m = -(-seqlen // tile_m)
    work = []
    for first in range(0, bh, group):
        heads_here = min(group, bh - first)
        for rank in range(heads_here * num_m):
            start_m = num_m - 1 - rank // heads_here
            last_row = min(seqlen, (start_m + 1) * tile_m) - 1
            work.append(-(-(last_row + 1) // BLOCK_N) + overhead)
    return work


def snake(work: list[float]) -> float:
    load = [0.0] * PROGRAMS
    for r in range(0, len(work), PROGRAMS):
        chunk = work[r:r + PROGRAMS]
        for i, w in enumerate(chunk):
            p = i if (r // PROGRAMS) % 2 == 0 else PROGRAMS - 1 - i
            load[p] += w
    return max(load)


def dynamic(work: list[float]) -> float:
    free = [0.0] * PROGRAMS
    heapq.heapify(free)
    for w in work:
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--overhead", type=float, default=1.0,
                        help="fixed work per tile, in key blocks (default 1)")
    parser.add_argument("--l2-mib", type=int, default=50, help="the GPU's L2 (default 50)")
    args = parser.parse_args()
    rows = []
    for d, tile_m in ((64, 128), (64, 192), (128, 128)):
        for seqlen in (512, 1024, 2048, 4096, 8192, 16384):
            bh = 16 * 16384 // seqlen
            args_g = (bh, seqlen, d, 2, args.l2_mib * 2**20)
            row = [d, tile_m, seqlen, bh]
            for balanced in (False, True):
                g = heads_per_group(*args_g, balanced=balanced)
                work = tile_work(bh, seqlen, tile_m, g, args.overhead)
                ideal = sum(work) / PROGRAMS
                row += [g, f"{snake(work) / ideal:.3f}", f"{dynamic(work) / ideal:.3f}"]
            rows.append(row)
    print(tabulate(rows, headers=["D", "tile rows", "L", "B·H", "G bound", "snake",
                                  "dynamic", "G equal", "snake", "dynamic"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
