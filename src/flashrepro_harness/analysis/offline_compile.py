"""Compile a kernel for a target GPU arch on a machine without a GPU, and count its SASS.

What is compiled is the launch the library chooses: :func:`flashrepro.select.select` (for the
article's kernel :func:`flashrepro.select.article_call`) on contiguous meta tensors of the
problem's shape, with the target's arch and ``DISABLE_MMA_V3``; a variant naming another kernel
than the one selected is an error. ``JITFunction.warmup`` compiles the
:class:`~flashrepro.kernels.call.KernelCall` under a driver that reports the target arch
(:class:`_OfflineDriver`), so Triton specializes exactly as on a GPU; the cubin is disassembled
by :mod:`flashrepro_harness.analysis.disasm`.

Every target takes :data:`~flashrepro.select.STAND_IN_NUM_SMS` SMs (only the ws kernel's grid,
which no compile reads) and :data:`~flashrepro.select.STAND_IN_L2_BYTES` of L2 (at the article
problem any L2 of 32 MiB or more gives the same head grouping).

Compiles run in worker processes (:func:`kernel_sass`): under ``TRITON_INTERPRET=1`` kernels
cannot be compiled, and Triton reads ``DISABLE_MMA_V3`` from the environment at compile time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from flashrepro.configs import KernelConfig
from flashrepro.kernels.call import KernelCall
from flashrepro.select import STAND_IN_L2_BYTES, STAND_IN_NUM_SMS, article_call, select
from flashrepro_harness.analysis.disasm import Resources, SassCounts, disassemble_cubin
from flashrepro_harness.problem import Problem
from flashrepro_harness.progress import bar as progress_bar


@dataclass(frozen=True)
class Target:
    """A compile target: ``name`` (``sm_80`` ... ``sm_90``, ``sm_90-mma.sync``), ``arch`` (80,
    86, 89, 90); ``mma_v3`` False compiles with ``DISABLE_MMA_V3=1`` (HMMA instead of HGMMA)."""

    name: str
    arch: int
    mma_v3: bool = True

    @property
    def wgmma(self) -> bool:
        """True where Triton lowers tl.dot to wgmma (sm_90 with MMA v3 on)."""
        return self.arch >= 90 and self.mma_v3

    @property
    def config_arch(self) -> int:
        """The arch whose default config applies: sm_80's on sm_90's mma.sync path
        (``flashrepro.configs.launch_arch``)."""
        return self.arch if self.mma_v3 else min(self.arch, 80)


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("sm_80", 80), Target("sm_86", 86), Target("sm_89", 89), Target("sm_90", 90),
    Target("sm_90-mma.sync", 90, mma_v3=False),
)}


@dataclass(frozen=True)
class Variant:
    """A kernel to count; ``kernel``: ``module:attribute`` of the JIT function the selected
    launch must run."""

    name: str
    kernel: str
    description: str


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("article", "flashrepro.kernels.article:article_fwd_kernel",
            "the article's Triton kernel, frozen (kernels/article.py)"),
    Variant("fwd", "flashrepro.kernels.fwd:attn_fwd_kernel",
            "the production kernel (kernels/fwd.py)"),
    Variant("fwd_gluon", "flashrepro.kernels.fwd_gluon:attn_fwd_gluon_kernel",
            "the Gluon kernel with FA3's overlap (kernels/fwd_gluon.py), sm_90 only"),
    Variant("fwd_gluon_ws", "flashrepro.kernels.fwd_gluon_ws:attn_fwd_gluon_ws_kernel",
            "the warp-specialized, persistent Gluon kernel (kernels/fwd_gluon_ws.py), sm_90 "
            "only"),
)}


@dataclass(frozen=True)
class KernelSpec:
    """One compile: variant x launch config x target, for a problem (whose sizes decide the
    specialization of the launch, e.g. the article's from ``reproduce/article.toml``)."""

    variant: str
    config: KernelConfig
    target: str
    problem: Problem

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {self.variant!r}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {list(TARGETS)}, got {self.target!r}")

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.variant, "config": self.config.as_dict(), "target": self.target,
                "problem": asdict(self.problem)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KernelSpec:
        return cls(d["variant"], KernelConfig(**d["config"]), d["target"], Problem(**d["problem"]))


@dataclass(frozen=True)
class KernelSass:
    """What one compile gives.

    Attributes:
        counts, resources: :mod:`flashrepro_harness.analysis.disasm`'s.
        shared_bytes: shared memory the launch requests (Triton's ``metadata.shared``).
        mma_layouts: distinct ``#ttg.nvidia_mma`` layouts of the TTGIR, each
            ``{"version": 2|3, "warps": [wm, wn], "instr_shape": [...]}`` (``warps``: the dot's
            output tile over warps, rows x columns).
        operand_loads: :func:`operand_loads` of the TTGIR.
    """

    spec: KernelSpec
    counts: SassCounts
    resources: Resources
    shared_bytes: int
    mma_layouts: list[dict[str, Any]]
    operand_loads: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec.to_json(), "counts": asdict(self.counts),
                "resources": asdict(self.resources), "shared_bytes": self.shared_bytes,
                "mma_layouts": self.mma_layouts, "operand_loads": self.operand_loads}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KernelSass:
        return cls(KernelSpec.from_json(d["spec"]), SassCounts(**d["counts"]),
                   Resources(**d["resources"]), d["shared_bytes"], d["mma_layouts"],
                   d["operand_loads"])


_MMA_LAYOUT = re.compile(r"#ttg\.nvidia_mma<\{versionMajor = (\d+), versionMinor = \d+, "
                         r"warpsPerCTA = \[([\d, ]+)\],.*?instrShape = \[([\d, ]+)\]\}>")


_OPERAND_LOAD = re.compile(r"^( *)%\S+ = ttg\.local_load .*-> tensor<([\dx]+)x\w+, "
                           r"#ttg\.dot_op<\{opIdx = (\d)", re.MULTILINE)
_FUNC = re.compile(r"^( *)tt\.func ", re.MULTILINE)


def operand_loads(ttgir: str) -> list[dict[str, Any]]:
    """Shared-memory loads of matrix-product operands in a TTGIR module, in program order.

    Each is ``{"operand": 0 (A) | 1 (B), "shape": [rows, cols], "in_loop": bool}``;
    ``in_loop`` is read from MLIR's indentation (nested in a region, an ``scf.for`` body). An A
    load outside every loop is a hoisted Q.
    """
    func = _FUNC.search(ttgir)
    body = (len(func.group(1)) if func else 2) + 2
    return [{"operand": int(m.group(3)), "shape": [int(x) for x in m.group(2).split("x")],
             "in_loop": len(m.group(1)) > body}
            for m in _OPERAND_LOAD.finditer(ttgir)]


def mma_layouts(ttgir: str) -> list[dict[str, Any]]:
    """The distinct MMA layouts declared in a TTGIR module (see :class:`KernelSass`)."""
    seen: list[dict[str, Any]] = []
    for m in _MMA_LAYOUT.finditer(ttgir):
        layout = {"version": int(m.group(1)),
                  "warps": [int(x) for x in m.group(2).split(",")],
                  "instr_shape": [int(x) for x in m.group(3).split(",")]}
        if layout not in seen:
            seen.append(layout)
    return seen


# --------------------------------------------------------------------------------------------
# In the worker process: select a launch, compile it for a target, count.
# --------------------------------------------------------------------------------------------

def _resolve(path: str) -> Any:
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


def kernel_call(spec: KernelSpec) -> KernelCall:
    """The launch ``spec`` compiles: what the library selects for the problem's inputs (meta
    tensors, contiguous) at ``spec.config`` on ``spec.target`` (see the module docstring).

    Raises:
        RuntimeError: the selected kernel is not the variant's.
    """
    variant, problem, target = VARIANTS[spec.variant], spec.problem, TARGETS[spec.target]
    dtype = problem.torch_dtype
    b, h, lq, lk, d = (problem.batch, problem.heads, problem.seqlen_q, problem.seqlen_k,
                       problem.head_dim)
    q, o = (torch.empty(b, h, lq, d, dtype=dtype, device="meta") for _ in range(2))
    k, v = (torch.empty(b, h, lk, d, dtype=dtype, device="meta") for _ in range(2))
    if variant.name == "article":
        call = article_call(q, k, v, o, causal=problem.causal, scale=None, config=spec.config)
    else:
        lse = torch.empty(b, h, lq, dtype=torch.float32, device="meta")
        chosen = select(q, k, v, o, lse, causal=problem.causal, scale=None,
                        causal_alignment="top_left", return_lse=False, config=spec.config,
                        arch=target.arch, mma_v3=target.mma_v3, num_sms=STAND_IN_NUM_SMS,
                        l2_bytes=STAND_IN_L2_BYTES)
        call = chosen.bind(chosen.operands(q, k, v, o, lse))
    if call.kernel is not _resolve(variant.kernel):
        raise RuntimeError(f"select() chose {call.kernel.__name__} for {problem.key()} at "
                           f"{spec.config.label()} on {spec.target}, not {variant.kernel}")
    return call


class _OfflineDriver:
    """Enough of a Triton driver for ``JITFunction.run(warmup=True)``: it names the target. The
    device id is the target's name, so each target has its own in-memory kernel cache."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def get_current_device(self) -> str:
        return self.target.name

    def get_current_stream(self, device: object) -> int:
        del device
        return 0

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget
        return GPUTarget("cuda", self.target.arch, 32)


def compile_spec(spec: KernelSpec, workdir: Path) -> KernelSass:
    """Compile ``spec`` in THIS process and count its SASS (the worker's job).

    It sets ``DISABLE_MMA_V3`` and Triton's active driver: run it in a process of its own.

    Raises:
        RuntimeError: as :func:`kernel_call` and :func:`~flashrepro_harness.analysis.disasm.
            cuobjdump`; or the kernel is an interpreter object (``TRITON_INTERPRET=1``).
    """
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    target = TARGETS[spec.target]
    call = kernel_call(spec)
    if not isinstance(call.kernel, JITFunction):
        raise RuntimeError(f"{call.kernel.__name__} is a {type(call.kernel).__name__}, not a "
                           "JITFunction: TRITON_INTERPRET was set when it was defined; compile "
                           "through flashrepro_harness.analysis.offline_compile.kernel_sass "
                           "(a clean process)")
    if target.mma_v3:
        os.environ.pop("DISABLE_MMA_V3", None)
    else:
        os.environ["DISABLE_MMA_V3"] = "1"
    driver.set_active(_OfflineDriver(target))
    compiled = call.kernel.warmup(*call.args, grid=call.grid, **call.kwargs)
    counts, resources = disassemble_cubin(compiled.asm["cubin"], workdir)
    ttgir = compiled.asm["ttgir"]
    return KernelSass(spec, counts, resources, int(compiled.metadata.shared),
                      mma_layouts(ttgir), operand_loads(ttgir))


def _worker_main() -> int:
    specs = [KernelSpec.from_json(d) for d in json.load(sys.stdin)]
    with tempfile.TemporaryDirectory(prefix="flashrepro-sass-") as tmp:
        for s in specs:  # one JSON line per compile, as it finishes: the caller's progress
            print(json.dumps(compile_spec(s, Path(tmp)).to_json()), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# In the caller: fan the compiles out to clean worker processes.
# --------------------------------------------------------------------------------------------

def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "DISABLE_MMA_V3")}
    src = str(Path(__file__).resolve().parents[2])  # the src/ dir holding this flashrepro
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def kernel_sass(specs: Sequence[KernelSpec], workers: int | None = None) -> list[KernelSass]:
    """Compile and count every spec, in clean worker processes; results in ``specs`` order.

    ``workers``: parallel processes; default ``min(len(specs), os.cpu_count())``.

    Raises:
        RuntimeError: a worker failed (its stderr is in the message).
    """
    if not specs:
        return []
    n = max(1, min(len(specs), workers or os.cpu_count() or 1))
    chunks = [list(specs[i::n]) for i in range(n)]
    by_spec: dict[KernelSpec, KernelSass] = {}
    with progress_bar("sass compiles", total=len(specs), unit="kernel") as shown:
        def drain(chunk: list[KernelSpec]) -> None:
            with tempfile.TemporaryFile("w+") as err:
                module = "flashrepro_harness.analysis.offline_compile"
                p = subprocess.Popen([sys.executable, "-m", module],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                     text=True, env=_worker_env())
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write(json.dumps([s.to_json() for s in chunk]))
                p.stdin.close()
                for line in p.stdout:
                    result = KernelSass.from_json(json.loads(line))
                    by_spec[result.spec] = result
                    shown.update(1)
                if p.wait() != 0:
                    err.seek(0)
                    raise RuntimeError(f"SASS worker failed ({p.returncode}):\n"
                                       f"{err.read().strip()[-4000:]}")

        with ThreadPoolExecutor(len(chunks)) as pool:  # feed and drain every worker at once
            list(pool.map(drain, chunks))
    return [by_spec[s] for s in specs]


def main(argv: Sequence[str] | None = None) -> int:
    """Worker entry point: JSON list of :class:`KernelSpec` on stdin, results on stdout."""
    argparse.ArgumentParser(description=main.__doc__, allow_abbrev=False).parse_args(argv)
    return _worker_main()


if __name__ == "__main__":
    sys.exit(main())
