"""Warp-stall samples of ncu.sh's source pages, summed by stall reason and by SASS opcode, as
shares of all samples of the launch (every warp: consumers, the producer warp and the idle
warps of its warpgroup).

    cd lab/2026-12-03-d64-stall-samples && python summarize.py ncu-61bcd04
"""

import collections
import csv
import gzip
import re
import sys
from pathlib import Path

SOFTMAX = ("MUFU", "FMNMX", "FADD", "FFMA", "F2FP", "FMUL", "FSEL", "SHFL")


def opcode(source: str) -> str:
    op = re.sub(r"^@!?U?P\w+\s+", "", source.strip()).split()[0] if source.strip() else "?"
    keep = 2 if op.startswith(("HGMMA", "WARPGROUP", "SYNCS", "BAR")) else 1
    return ".".join(op.split(".")[:keep])


def summarize(path: Path) -> None:
    with gzip.open(path, "rt") as f:
        rows = list(csv.reader(f))
    header, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    by_reason: collections.Counter[str] = collections.Counter()
    by_op: collections.Counter[str] = collections.Counter()
    op_reason: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    total = 0
    for r in data:
        samples = int(r[col["Warp Stall Sampling (All Samples)"]] or 0)
        op = opcode(r[col["Source"]])
        total += samples
        by_op[op] += samples
        for h in reasons:
            by_reason[h[6:]] += int(r[col[h]] or 0)
            op_reason[op.split(".")[0]][h[6:]] += int(r[col[h]] or 0)
    pct = lambda v: f"{100 * v / total:.1f} %"
    print(f"== {path.name.removesuffix('-sass.csv.gz')}: {total} samples")
    print("  by reason: " + ", ".join(f"{k} {pct(v)}" for k, v in by_reason.most_common(8)))
    print("  by opcode: " + ", ".join(f"{k} {pct(v)}" for k, v in by_op.most_common(12)))
    print(f"  softmax opcodes ({', '.join(SOFTMAX)}): {pct(sum(by_op[o] for o in SOFTMAX))}")
    for op in ("MUFU", "FMNMX"):
        print(f"  {op} by reason: "
              + ", ".join(f"{k} {pct(v)}" for k, v in op_reason[op].most_common(4)))


if __name__ == "__main__":
    for f in sorted(Path(sys.argv[1]).glob("*-sass.csv.gz")):
        summarize(f)
