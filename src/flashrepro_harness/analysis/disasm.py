"""Disassemble with Triton's bundled ``cuobjdump`` and count SASS instructions by opcode and class.

The tool is Triton's own (``triton.knobs.nvidia.cuobjdump``, shipped in its wheel), so no CUDA
toolkit is needed. An *opcode* is the mnemonic with its modifiers (``LDSM.16.MT88.4``); a
*class* groups opcodes as the SASS article does (:data:`CLASSES`).
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import triton

_ADDR_PRED = r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P(?:T|\d)\s+)?"  # /*0a10*/ [@!P0 | @UPT]
_INSTRUCTION = re.compile(_ADDR_PRED + r"([A-Z][A-Za-z0-9_.]*)")
_BACKWARD_BRANCH = re.compile(_ADDR_PRED + r"BRA(?:\.[A-Z.]+)?\s+0x([0-9a-f]+)")
_EXIT = re.compile(_ADDR_PRED + r"EXIT\b")
# BAR.ARV 0x9, 0x100: a literal barrier id and, where given, the thread count
_NAMED_BARRIER = re.compile(_ADDR_PRED + r"(BAR\.[A-Z_.]+)\s+0x([0-9a-f]+)(?:,\s*0x([0-9a-f]+))?")
_RESOURCES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")

_ASYNC_COPIES = ("LDGSTS", "UTMALDG", "UTMASTG", "UTMAPF", "UTMAREDG",
                 "UBLKCP", "UBLKPF", "UBLKRED")


def _mnemonic(opcode: str) -> str:
    return opcode.split(".", 1)[0]


CLASSES: dict[str, Callable[[str], bool]] = {
    "HMMA": lambda op: _mnemonic(op) == "HMMA",  # mma.sync tensor-core MMA (sm_80+)
    "HGMMA": lambda op: _mnemonic(op) == "HGMMA",  # wgmma, warpgroup MMA (sm_90)
    "LDSM": lambda op: _mnemonic(op) == "LDSM" and ".MT" not in op,  # ldmatrix
    "LDSM.MT": lambda op: _mnemonic(op) == "LDSM" and ".MT" in op,  # ldmatrix .trans
    "LDS": lambda op: _mnemonic(op) == "LDS",  # plain shared-memory loads
    "STS": lambda op: _mnemonic(op) in ("STS", "STSM"),  # shared stores (STSM: stmatrix)
    "LDG": lambda op: _mnemonic(op) == "LDG",  # global loads into registers
    "STG": lambda op: _mnemonic(op) == "STG",  # global stores
    "ASYNC": lambda op: _mnemonic(op) in _ASYNC_COPIES,  # cp.async (LDGSTS), TMA, bulk copies
    "MUFU.EX2": lambda op: op.startswith("MUFU.EX2"),  # exp2 on the special-function unit
    "BAR": lambda op: _mnemonic(op) == "BAR",  # CTA barriers
    "LDL": lambda op: _mnemonic(op) == "LDL",  # local-memory loads: register spills
    "STL": lambda op: _mnemonic(op) == "STL",  # local-memory stores: register spills
}
"""Instruction classes, in table order."""

CLASS_NAMES: tuple[str, ...] = (*CLASSES, "total")


@dataclass(frozen=True)
class SassCounts:
    """Static instruction counts of one kernel function.

    Attributes:
        opcodes: instructions per full opcode (``{"HMMA.16816.F32": 256, ...}``), sorted by name.
        classes: instructions per class of :data:`CLASSES`, plus ``total`` (every instruction
            in the listing, padding ``NOP``\\s included).
        loop_classes: the same, only inside loop bodies (:func:`loop_ranges`).
        barriers: the distinct ``[id, threads]`` of each ``BAR.*`` opcode with a literal id,
            sorted (``{"BAR.ARV": [[8, 256], [9, 256]]}``; threads 0: the whole CTA).
    """

    opcodes: dict[str, int]
    classes: dict[str, int]
    loop_classes: dict[str, int]
    barriers: dict[str, list[list[int]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Resources:
    """``cuobjdump -res-usage`` of one function: registers per thread; bytes of stack, static
    shared memory and local memory (spill space) per thread block / thread as cuobjdump reports."""

    registers: int
    stack_bytes: int
    static_shared_bytes: int
    local_bytes: int


def cuobjdump(args: Sequence[str | Path], timeout_s: float = 600.0) -> str:
    """Run Triton's cuobjdump with ``args`` and return its stdout.

    Raises:
        RuntimeError: Triton's cuobjdump is missing (``triton.knobs.nvidia.cuobjdump``), or it
            exits non-zero (the message carries its stderr).
    """
    exe = triton.knobs.nvidia.cuobjdump.path
    proc = subprocess.run([exe, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump {' '.join(map(str, args))} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()[:2000]}")
    return proc.stdout


def tool_versions() -> dict[str, str]:
    """Versions of the bundled tools that shape the SASS: ptxas (codegen) and cuobjdump."""
    nv = triton.knobs.nvidia
    return {"ptxas": nv.ptxas.version, "cuobjdump": nv.cuobjdump.version}


def _classify(ops: Counter[str]) -> dict[str, int]:
    out = {name: sum(n for op, n in ops.items() if pred(op)) for name, pred in CLASSES.items()}
    out["total"] = sum(ops.values())
    return out


def loop_ranges(sass: str) -> list[tuple[int, int]]:
    """Loop bodies of a one-function cuobjdump listing: address ranges ``[target, branch]`` of
    every backward ``BRA`` that lies before the function's last ``EXIT``.

    Branches after the last EXIT (out-of-line blocks such as an mbarrier wait's retry, the
    padding self-branch) close no loop.
    """
    exits = [int(m.group(1), 16) for m in _EXIT.finditer(sass)]
    end = max(exits, default=-1)
    ranges = []
    for m in _BACKWARD_BRANCH.finditer(sass):
        addr, target = int(m.group(1), 16), int(m.group(2), 16)
        if target < addr < end:
            ranges.append((target, addr))
    return ranges


def count_sass(sass: str) -> SassCounts:
    """Count the instructions of a cuobjdump ``-sass`` listing of ONE function.

    Args:
        sass: cuobjdump's text (``/*addr*/  [@pred] OPCODE operands ;`` lines).

    Raises:
        ValueError: the text holds no instruction.
    """
    instructions = [(int(m.group(1), 16), m.group(2)) for m in _INSTRUCTION.finditer(sass)]
    if not instructions:
        raise ValueError("the cuobjdump listing holds no SASS instruction")
    loops = loop_ranges(sass)
    ops = Counter(op for _, op in instructions)
    in_loops = Counter(op for a, op in instructions if any(lo <= a <= hi for lo, hi in loops))
    barriers: dict[str, set[tuple[int, int]]] = {}
    for m in _NAMED_BARRIER.finditer(sass):
        threads = int(m.group(4), 16) if m.group(4) else 0
        barriers.setdefault(m.group(2), set()).add((int(m.group(3), 16), threads))
    return SassCounts(opcodes=dict(sorted(ops.items())), classes=_classify(ops),
                      loop_classes=_classify(in_loops),
                      barriers={op: [list(b) for b in sorted(bs)]
                                for op, bs in sorted(barriers.items())})


def parse_resources(text: str) -> Resources:
    """Parse the first ``REG:.. STACK:.. SHARED:.. LOCAL:..`` line of ``cuobjdump -res-usage``.

    Raises:
        ValueError: no resource line in ``text``.
    """
    m = _RESOURCES.search(text)
    if m is None:
        raise ValueError("no 'REG:.. STACK:.. SHARED:.. LOCAL:..' line in cuobjdump -res-usage")
    return Resources(*(int(g) for g in m.groups()))


def disassemble_cubin(cubin: bytes, workdir: Path) -> tuple[SassCounts, Resources]:
    """Counts and resource usage of a single-function cubin (what Triton compiles).

    ``cubin``: the ELF bytes (``CompiledKernel.asm["cubin"]``); ``workdir``: an existing folder
    for the temporary file.

    Raises:
        RuntimeError, ValueError: see :func:`cuobjdump` and :func:`count_sass`.
    """
    path = workdir / "kernel.cubin"
    path.write_bytes(cubin)
    text = cuobjdump(["-res-usage", "-sass", path])
    return count_sass(text), parse_resources(text)
