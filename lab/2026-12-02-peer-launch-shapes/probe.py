"""Launch shapes of the peers' attention forward kernels against flashrepro's (Nsight Compute).

Question: at short problems (L <= 1024) cuDNN is up to 18 % faster than flashrepro, and at
D=64 causal long L FA4 is 7-14 % faster (lab/2026-12-01-fa4-peer-sweep/). What grid, block
size, registers per thread, shared memory per block, CTAs per SM (the occupancy limit) and
duration do the peers' kernels use there, against flashrepro's?

Run on the GPU machine (Nsight Compute's ``ncu`` on PATH, ``$FLASHREPRO_NCU`` or in a CUDA
install) from the repository root:

    PYTHONPATH=src:. python lab/2026-12-02-peer-launch-shapes/probe.py --out /tmp/out/shapes

Writes ``<out>/shapes.md`` (the table, also printed), ``<out>/shapes.json`` (every metric, the
full kernel names, the ncu command lines) and ``<out>/raw/`` (each run's ncu CSV, and the tail
of ncu's output for a run that failed).

Two modes in this file:

* driver (default): for each point (D, mask, L) and implementation, one
  ``ncu --clock-control none --nvtx --nvtx-include probe/ --csv --page raw --metrics ...``
  of this file's worker, one after another (``--jobs`` > 1 runs several ncu at once, at the
  cost of kernels of one process running beside another's profiled kernel). A run that fails
  (no ncu, an implementation that does not import, a timeout) is a row with the reason. No run
  starts after ``--deadline-s``; those are listed as skipped. Runs are ordered so that
  flashrepro and the peer the question names at each point (cuDNN at L <= 1024, FA4 above) come
  first, the rest after.
* worker (``--worker IMPL D MASK L DTYPE``): H=16, B=16384//L, inputs ``torch.randn`` on cuda;
  three calls, the last inside the NVTX push/pop range ``probe``, the only launches ncu
  profiles. Nothing on stdout (ncu prints its CSV there); a failure is one ``PROBE-ERROR:`` line
  on stderr and exit status 3. Where ncu's NVTX filter selects no launch, the driver falls
  back (for that run and every later one) to the third launch whose name matches the
  implementation's :data:`KERNEL_REGEX` (``--kernel-name regex:... --launch-skip 2``).

Nsight Compute's defaults otherwise: kernel replay, caches flushed before each pass (durations
of a cold L2, as in the harness's ``profile``), clocks not locked (``--clock-control none``).
With several kernels in the range (none expected) the row is the attention kernel
(:func:`flashrepro_harness.qwen3.classify.attention_label`), the longest if several.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import csv
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashrepro_harness.analysis.ncu import KernelProfile, NcuError, find_ncu, parse_csv
from flashrepro_harness.qwen3.classify import attention_label

REPO = Path(__file__).resolve().parents[2]
HEADS = 16
TOKENS = 16384  # B * L
NVTX_RANGE = "probe"
ERROR_MARK = "PROBE-ERROR:"
IMPLS = ("flashrepro", "cudnn", "flash", "fa4")
DEFAULT_POINTS = ("64:causal:512", "64:causal:1024", "64:causal:8192", "64:full:512",
                  "128:causal:512", "128:full:512", "128:full:1024")
DTYPES = {"fp16": "float16", "float16": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16"}
MASKS = {"causal": True, "full": False, "non-causal": False, "noncausal": False}

METRICS = {  # quantity -> ncu raw metric name
    "time_ns": "gpu__time_duration.sum",
    "grid": "launch__grid_size",
    "block": "launch__block_size",
    "regs": "launch__registers_per_thread",
    "smem_static": "launch__shared_mem_per_block_static",
    "smem_dynamic": "launch__shared_mem_per_block_dynamic",
    "limit_regs": "launch__occupancy_limit_registers",
    "limit_smem": "launch__occupancy_limit_shared_mem",
    "limit_warps": "launch__occupancy_limit_warps",
    "limit_blocks": "launch__occupancy_limit_blocks",
    "warps_active_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    # optional: a run drops those the installed ncu does not know
    "cluster_x": "launch__cluster_dim_x",
    "waves": "launch__waves_per_multiprocessor",
    "gpu": "device__attribute_display_name",
}
LIMITS = ("limit_regs", "limit_smem", "limit_warps", "limit_blocks")
UNKNOWN_METRIC = re.compile(r"Failed to find metric\s+(?:regex:)?\^?([A-Za-z0-9_.]+)")
MAX_ATTEMPTS = 3  # the first run, then retries without the metrics ncu reported unknown
KERNEL_REGEX = {  # the fallback selection, where ncu's NVTX filter selects nothing
    "flashrepro": "attn_fwd",
    "cudnn": "cudnn|sm90_flash|fort_native_sdpa|fmha",
    "flash": "flash_fwd",
    "fa4": "flash_attncute|FlashAttentionForward|flash_fwd",
}
KILL_GRACE_S = 30  # a run started before the deadline is killed at most this long after it
HEADERS = ["D", "mask", "L", "impl", "kernel", "grid", "block", "regs", "smem KiB", "CTAs/SM",
           "waves", "warps active %", "SM %", "DRAM %", "µs", "/ flashrepro", "note"]


# ---------------------------------------------------------------------------------------------
# points and arguments


@dataclass(frozen=True)
class Point:
    """One problem: head dim ``d``, causal or full mask, sequence length ``seqlen``."""

    d: int
    causal: bool
    seqlen: int

    @property
    def mask(self) -> str:
        return "causal" if self.causal else "full"

    @property
    def batch(self) -> int:
        return max(1, TOKENS // self.seqlen)

    def key(self) -> str:
        return f"{self.d}:{self.mask}:{self.seqlen}"


def parse_mask(text: str) -> bool:
    """``causal`` -> True; ``full``/``non-causal`` -> False (also 1/0, true/false)."""
    low = text.strip().lower()
    if low in MASKS:
        return MASKS[low]
    if low in ("1", "true"):
        return True
    if low in ("0", "false"):
        return False
    raise argparse.ArgumentTypeError(f"mask {text!r}: expected causal or full")


def parse_point(text: str) -> Point:
    """``D:MASK:L``, e.g. ``64:causal:512`` or ``128:full:1024``."""
    parts = text.strip().split(":")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"point {text!r}: expected D:MASK:L (64:causal:512)")
    try:
        d, seqlen = int(parts[0]), int(parts[2])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"point {text!r}: D and L must be integers") from exc
    if d <= 0 or seqlen <= 0:
        raise argparse.ArgumentTypeError(f"point {text!r}: D and L must be positive")
    return Point(d, parse_mask(parts[1]), seqlen)


def parse_points(values: Sequence[str]) -> list[Point]:
    """Points from arguments that may each hold a comma-separated list; duplicates dropped."""
    points = [parse_point(p) for v in values for p in v.split(",") if p.strip()]
    return list(dict.fromkeys(points))


def parse_impls(text: str) -> list[str]:
    impls = [s.strip() for s in text.split(",") if s.strip()]
    bad = [i for i in impls if i not in IMPLS]
    if bad or not impls:
        raise argparse.ArgumentTypeError(f"implementations {bad or text!r}: choose from {IMPLS}")
    return list(dict.fromkeys(impls))


def parse_dtype(text: str) -> str:
    """``fp16``/``bf16`` (or torch's names) -> ``fp16``/``bf16``."""
    name = DTYPES.get(text.strip().lower())
    if name is None:
        raise argparse.ArgumentTypeError(f"dtype {text!r}: expected fp16 or bf16")
    return "fp16" if name == "float16" else "bf16"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", nargs=5, metavar=("IMPL", "D", "MASK", "L", "DTYPE"),
                        help="worker mode (what ncu runs): one implementation at one point")
    parser.add_argument("--out", type=Path, default=Path("/tmp/out/shapes"),
                        help="output folder (default /tmp/out/shapes)")
    parser.add_argument("--points", nargs="+", default=list(DEFAULT_POINTS),
                        help="D:MASK:L points, space- or comma-separated "
                             f"(default {','.join(DEFAULT_POINTS)})")
    parser.add_argument("--impls", type=parse_impls, default=list(IMPLS),
                        help=f"comma-separated subset of {','.join(IMPLS)}")
    parser.add_argument("--dtype", type=parse_dtype, default="fp16", help="fp16 or bf16")
    parser.add_argument("--deadline-s", type=float, default=270.0,
                        help="no run starts after this many seconds (default 270)")
    parser.add_argument("--timeout-s", type=float, default=120.0,
                        help="limit of one ncu run, seconds (default 120)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="ncu runs at once (default 1; more overlaps one run's Python "
                             "start-up and compiles with another's profiling)")
    parser.add_argument("--ncu", default=None, help="the ncu executable (default: found)")
    return parser


# ---------------------------------------------------------------------------------------------
# worker


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:300]


def _build_call(impl: str, point: Point, dtype: str) -> Callable[[], Any]:
    """A zero-argument call of ``impl`` at ``point`` over fresh ``torch.randn`` inputs."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch")
    shape = (point.batch, HEADS, point.seqlen, point.d)
    q, k, v = (torch.randn(shape, device="cuda", dtype=getattr(torch, DTYPES[dtype]))
               for _ in range(3))
    if impl == "flashrepro":
        import flashrepro

        return lambda: flashrepro.attention(q, k, v, causal=point.causal)
    if impl in ("cudnn", "flash"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        backend = SDPBackend.CUDNN_ATTENTION if impl == "cudnn" else SDPBackend.FLASH_ATTENTION

        def call() -> torch.Tensor:
            with sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=point.causal)

        return call
    if impl == "fa4":  # the harness's peer: (B, L, H, D) copies made here, once
        from flashrepro_harness.bench import peers

        reason = peers.import_error("fa4-cute")
        if reason is not None:
            raise ImportError(reason)
        return peers.make_call("fa4-cute", (q, k, v), point.causal)
    raise ValueError(f"unknown implementation {impl!r}")


def worker(impl: str, point: Point, dtype: str) -> int:
    """Two calls, then one inside the NVTX range ncu profiles; 0, or 3 with a PROBE-ERROR."""
    stage = "setup"
    try:
        import torch

        call = _build_call(impl, point, dtype)
        stage = "warm-up calls"
        for _ in range(2):
            call()
        torch.cuda.synchronize()
        stage = "profiled call"
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    except Exception as exc:  # any failure is the row's reason
        print(f"{ERROR_MARK} {impl} failed at {stage}: {_first_line(exc)}", file=sys.stderr)
        return 3
    return 0


# ---------------------------------------------------------------------------------------------
# ncu output


def csv_section(text: str) -> str:
    """ncu's CSV: the lines from its header (a line starting with ``"ID"``) and the quoted
    lines after it; '' if none."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return ""
    return "\n".join(line for line in lines[start:] if line.startswith('"')) + "\n"


def launch_dims(text: str) -> dict[int, dict[str, str]]:
    """Launch ID -> ncu's ``Grid Size`` and ``Block Size`` columns (``(64, 640, 1)``) of a raw
    CSV; :func:`parse_csv` leaves these identifying columns out of the metrics."""
    section = csv_section(text)
    if not section:
        return {}
    rows = list(csv.reader(io.StringIO(section)))
    header = rows[0]
    out: dict[int, dict[str, str]] = {}
    for row in rows[1:]:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue
        cols = dict(zip(header, row, strict=True))
        out[int(row[0])] = {k: cols.get(k, "") for k in ("Grid Size", "Block Size")}
    return out


def dims_text(text: str) -> str:
    """``(64, 640, 1)`` -> ``64x640``; trailing 1s dropped, '' stays ''."""
    nums = re.findall(r"\d+", text)
    while len(nums) > 1 and nums[-1] == "1":
        nums.pop()
    return "x".join(nums)


def short_kernel(name: str, width: int = 44) -> str:
    """A kernel name for the table: no ``void``, template arguments or parameters, known long
    prefixes abbreviated, and the middle elided beyond ``width`` characters (cuDNN's tile
    sizes are at the end of its names)."""
    s = re.sub(r"^void\s+", "", name.strip())
    s = re.split(r"[<(]", s, maxsplit=1)[0].strip() or name.strip()
    s = s.replace("cudnn_generated_fort_native_sdpa_", "cudnn:").replace("_fprop_wgmma_", "_")
    s = re.sub(r"_kernel\d*(_\d+)?$", "", s) if s.startswith("cudnn:") else s
    m = re.search(r"(FlashAttention\w*?Sm\d+)", s)
    if m and "cutlass" in s:
        s = f"cute:{m.group(1)}"
    if len(s) > width:
        head = (width - 1) // 2
        s = s[:head] + "…" + s[len(s) - (width - 1 - head):]
    return s


def pick_kernel(kernels: list[KernelProfile]) -> KernelProfile:
    """The attention kernel among those profiled in the range: attention names first, then the
    longest duration."""
    def key(k: KernelProfile) -> tuple[int, float]:
        return (attention_label(k.kernel) is not None, k.value(METRICS["time_ns"]) or 0.0)

    return max(kernels, key=key)


def error_tail(text: str, limit: int = 6) -> str:
    """ncu's error/warning lines (or the output's last lines), joined on one line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "==ERROR==" in line or "==WARNING==" in line
              or "Error" in line or "error:" in line]
    return " | ".join((errors or lines)[-limit:])[:400]


# ---------------------------------------------------------------------------------------------
# driver


@dataclass
class Run:
    """One (point, implementation): ``status`` ok, failed or skipped, with the reason."""

    point: Point
    impl: str
    status: str = "pending"
    reason: str = ""
    kernel: str = ""
    grid_dims: str = ""
    block_dims: str = ""
    metrics: dict[str, float | str | None] = field(default_factory=dict)
    other_kernels: list[str] = field(default_factory=list)
    dropped_metrics: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    selection: str = ""
    wall_s: float = 0.0
    attempts: int = 0

    def file_stem(self) -> str:
        return f"d{self.point.d}_{self.point.mask}_L{self.point.seqlen}_{self.impl}"


class Driver:
    """Runs each (point, implementation) under ncu and keeps the metrics ncu rejects."""

    def __init__(self, ncu: str | None, dtype: str, out: Path, timeout_s: float,
                 deadline: float) -> None:
        self.ncu, self.dtype, self.out = ncu, dtype, out
        self.timeout_s, self.deadline = timeout_s, deadline
        self.dropped: set[str] = set()
        self.selection = "nvtx"
        self.lock = threading.Lock()

    def metrics(self) -> list[str]:
        with self.lock:
            return [m for m in METRICS.values() if m not in self.dropped]

    def command(self, run: Run, metrics: list[str], selection: str) -> list[str]:
        """ncu over this file's worker; ``selection`` ``nvtx`` (the launches in the worker's
        NVTX range) or ``name`` (the third launch whose name matches :data:`KERNEL_REGEX`)."""
        assert self.ncu is not None
        select = (["--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "--launch-count", "4"]
                  if selection == "nvtx" else
                  ["--kernel-name", f"regex:{KERNEL_REGEX[run.impl]}", "--launch-skip", "2",
                   "--launch-count", "1"])
        return [self.ncu, "--clock-control", "none", "--target-processes", "all", *select,
                "--csv", "--page", "raw", "--print-units", "base",
                "--metrics", ",".join(metrics),
                sys.executable, str(Path(__file__).resolve()), "--worker", run.impl,
                str(run.point.d), run.point.mask, str(run.point.seqlen), self.dtype]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(REPO / "src"), str(REPO)]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def execute(self, cmd: list[str], timeout_s: float) -> tuple[int | None, str, str]:
        """(exit status or None on timeout, stdout, stderr); a timed-out ncu is killed with its
        worker (its own process group)."""
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env(), cwd=REPO, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
            return proc.returncode, out, err
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return None, out or "", err or ""

    def profile(self, run: Run) -> Run:
        """Profile ``run`` (retrying without unknown metrics) and fill in its fields."""
        if self.ncu is None:
            run.status, run.reason = "failed", "ncu not found (PATH, $FLASHREPRO_NCU, CUDA dirs)"
            return run
        start = time.monotonic()
        rc, out, err = None, "", ""
        run.selection = self.selection
        for attempt in range(1, MAX_ATTEMPTS + 2):
            metrics = self.metrics()
            run.command = self.command(run, metrics, run.selection)
            run.attempts = attempt
            left = self.deadline + KILL_GRACE_S - time.monotonic()
            rc, out, err = self.execute(run.command, min(self.timeout_s, max(left, 10.0)))
            unknown = sorted({m for m in UNKNOWN_METRIC.findall(out + err) if m in metrics})
            if rc is not None and unknown and len(unknown) < len(metrics):
                with self.lock:
                    self.dropped.update(unknown)
                continue
            if (run.selection == "nvtx" and rc == 0 and not csv_section(out)
                    and ERROR_MARK not in out + err):
                run.selection = "name"  # the NVTX range selected nothing: select by name
                continue
            break
        if run.selection == "name" and csv_section(out):
            with self.lock:
                self.selection = "name"  # NVTX filtering does not work here: stop trying it
        run.wall_s = time.monotonic() - start
        with self.lock:
            run.dropped_metrics = sorted(self.dropped)
        self.read(run, rc, out, err)
        self.save_raw(run, out, err)
        return run

    def read(self, run: Run, rc: int | None, out: str, err: str) -> None:
        """Fill ``run`` from one ncu invocation's exit status and output."""
        both = out + "\n" + err
        marked = [line.split(ERROR_MARK, 1)[1].strip()
                  for line in both.splitlines() if ERROR_MARK in line]
        if rc is None:
            run.status, run.reason = "failed", f"timed out after {run.wall_s:.0f} s"
            return
        if marked:
            run.status, run.reason = "failed", marked[-1]
            return
        try:
            kernels = parse_csv(out) if csv_section(out) else []
        except (NcuError, ValueError, KeyError, IndexError) as exc:
            run.status, run.reason = "failed", f"ncu CSV not parsed: {_first_line(exc)}"
            return
        if not kernels:
            why = error_tail(both) or f"ncu exit status {rc}"
            run.status = "failed"
            where = f"NVTX range '{NVTX_RANGE}/'" + (
                f" nor as 3rd launch of regex '{KERNEL_REGEX[run.impl]}'"
                if run.selection == "name" else "")
            run.reason = f"no kernel profiled in {where}: {why}"
            return
        chosen = pick_kernel(kernels)
        dims = launch_dims(out).get(chosen.launch_id, {})
        run.status, run.kernel = "ok", chosen.kernel
        run.grid_dims = dims_text(dims.get("Grid Size", ""))
        run.block_dims = dims_text(dims.get("Block Size", ""))
        run.metrics = {q: (chosen.value(name) if q != "gpu" else chosen.metrics.get(name))
                       for q, name in METRICS.items()}
        run.other_kernels = [k.kernel for k in kernels if k is not chosen]
        if rc != 0:
            run.reason = f"ncu exit status {rc}: {error_tail(both)}"

    def save_raw(self, run: Run, out: str, err: str) -> None:
        """``raw/<run>.csv`` (ncu's CSV alone) for a run that worked, else ``raw/<run>.log``
        (the command and the last lines of ncu's output)."""
        raw = self.out / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        if run.status == "ok":
            (raw / f"{run.file_stem()}.csv").write_text(csv_section(out))
            return
        tail = (out + "\n" + err).splitlines()[-40:]
        (raw / f"{run.file_stem()}.log").write_text(
            shlex.join(run.command) + "\n" + "\n".join(line[:500] for line in tail) + "\n")


def question_peer(point: Point) -> str:
    """The peer the question names at ``point``: cuDNN at L <= 1024, FA4 above."""
    return "cudnn" if point.seqlen <= 1024 else "fa4"


def run_order(points: list[Point], impls: list[str]) -> list[Run]:
    """Every (point, implementation), flashrepro and each point's :func:`question_peer` first."""
    runs = [Run(p, i) for p in points for i in impls]
    return sorted(runs, key=lambda r: (r.impl not in ("flashrepro", question_peer(r.point)),
                                       points.index(r.point), impls.index(r.impl)))


def _fmt(value: float | str | None, spec: str = ".0f") -> str:
    return format(value, spec) if isinstance(value, float) else ("" if value is None else value)


def table_rows(runs: list[Run], points: list[Point], impls: list[str]) -> list[list[str]]:
    """One row per run in point, implementation order (:data:`HEADERS`)."""
    ordered = sorted(runs, key=lambda r: (points.index(r.point), impls.index(r.impl)))
    base = {r.point: r.metrics.get("time_ns") for r in runs if r.impl == "flashrepro"}
    rows = []
    for r in ordered:
        p = r.point
        if r.status != "ok":
            rows.append([str(p.d), p.mask, str(p.seqlen), r.impl, "—", *[""] * 11,
                         f"{r.status}: {r.reason}"[:120]])
            continue
        m = r.metrics
        limits = [m[q] for q in LIMITS if isinstance(m.get(q), float)]
        smem = [m[q] for q in ("smem_static", "smem_dynamic") if isinstance(m.get(q), float)]
        cluster = m.get("cluster_x")
        grid = r.grid_dims or _fmt(m.get("grid"))
        if isinstance(cluster, float) and cluster > 1:
            grid += f" (cluster {cluster:.0f})"
        t, t0 = m.get("time_ns"), base.get(p)
        ratio = f"{t / t0:.3f}" if isinstance(t, float) and isinstance(t0, float) and t0 else ""
        notes = [f"+{len(r.other_kernels)} other kernel(s) in range"] if r.other_kernels else []
        if r.selection == "name":
            notes.append("3rd launch by kernel name (the NVTX range selected none)")
        notes += [r.reason] if r.reason else []
        rows.append([str(p.d), p.mask, str(p.seqlen), r.impl, short_kernel(r.kernel), grid,
                     _fmt(m.get("block")), _fmt(m.get("regs")),
                     f"{sum(smem) / 1024:.1f}" if smem else "",
                     f"{min(limits):.0f}" if limits else "", _fmt(m.get("waves"), ".2f"),
                     _fmt(m.get("warps_active_pct"), ".1f"), _fmt(m.get("sm_pct"), ".1f"),
                     _fmt(m.get("dram_pct"), ".1f"),
                     f"{t / 1e3:.1f}" if isinstance(t, float) else "", ratio,
                     "; ".join(notes)[:120]])
    return rows


def ncu_version(ncu: str | None) -> str:
    if ncu is None:
        return "not found"
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({_first_line(exc)})"
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else "unknown"


def write_outputs(out: Path, runs: list[Run], points: list[Point], impls: list[str],
                  info: dict[str, Any]) -> str:
    """``shapes.md`` and ``shapes.json``; returns the table's text."""
    rows = table_rows(runs, points, impls)
    table = tabulate(rows, HEADERS, tablefmt="github", disable_numparse=True)
    skipped = [f"{r.point.key()} {r.impl}" for r in runs if r.status == "skipped"]
    gpus = sorted({str(r.metrics["gpu"]) for r in runs if r.metrics.get("gpu")})
    notes = [
        f"GPU {', '.join(gpus) or 'n/a'}; ncu {info['ncu_version']}; dtype {info['dtype']}; "
        f"H={HEADS}, B=16384/L; inputs (B, H, L, D), FA4's (B, L, H, D); "
        f"{info['date']}, commit {info['commit']}.",
        "Per run: the third call, inside NVTX range `probe`, profiled with `ncu --clock-control "
        "none` (kernel replay, caches flushed: cold-L2 durations). CTAs/SM: the least of ncu's "
        "occupancy limits (registers, shared memory, warps, blocks); smem KiB: static + "
        "dynamic per block (the CUDA driver's 1 KiB per-block reserve not counted); "
        "/ flashrepro: duration over flashrepro's at the same point.",
    ]
    if info["dropped"]:
        notes.append(f"Metrics the installed ncu did not know: {', '.join(info['dropped'])}.")
    if skipped:
        notes.append(f"Skipped (deadline {info['deadline_s']:.0f} s reached): "
                     f"{', '.join(skipped)}.")
    md = ("# Launch shapes of the attention kernels\n\n" + "\n\n".join(notes)
          + "\n\n" + table + "\n")
    out.mkdir(parents=True, exist_ok=True)
    (out / "shapes.md").write_text(md)
    record = {**info, "metrics": METRICS, "headers": HEADERS, "rows": rows,
              "skipped": skipped,
              "runs": [{**asdict(r), "point": asdict(r.point)} for r in runs]}
    (out / "shapes.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    return md


def _commit() -> str:
    if os.environ.get("FLASHREPRO_GIT_COMMIT"):
        return os.environ["FLASHREPRO_GIT_COMMIT"][:12]
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def drive(args: argparse.Namespace) -> int:
    """Profile every (point, implementation) until the deadline; write the outputs."""
    started = time.monotonic()
    points, impls = parse_points(args.points), list(args.impls)
    ncu = find_ncu(args.ncu)
    driver = Driver(ncu, args.dtype, args.out, args.timeout_s, started + args.deadline_s)
    runs = run_order(points, impls)
    print(f"ncu: {ncu or 'not found'}; {len(runs)} runs, deadline {args.deadline_s:.0f} s",
          flush=True)

    def task(run: Run) -> Run:
        if time.monotonic() >= driver.deadline:
            run.status, run.reason = "skipped", f"deadline {args.deadline_s:.0f} s reached"
            return run
        driver.profile(run)
        t = run.metrics.get("time_ns")
        what = (f"{short_kernel(run.kernel)} {t / 1e3:.1f} µs" if isinstance(t, float)
                else run.reason if run.status != "ok" else run.kernel)
        print(f"[{time.monotonic() - started:5.0f} s] {run.point.key():>16} {run.impl:<10} "
              f"{run.status}: {what} ({run.wall_s:.1f} s, {run.attempts} attempt(s))",
              flush=True)
        return run

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(task, runs))
    info = {"question": __doc__.split("\n\n")[1].replace("\n", " "),
            "command": shlex.join([sys.executable, *sys.argv]), "ncu": ncu,
            "ncu_version": ncu_version(ncu), "dtype": args.dtype, "deadline_s": args.deadline_s,
            "dropped": sorted(driver.dropped), "commit": _commit(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "elapsed_s": round(time.monotonic() - started, 1)}
    print(write_outputs(args.out, runs, points, impls, info))
    raw = f", {args.out / 'raw'}/" if (args.out / "raw").is_dir() else ""
    print(f"wrote {args.out / 'shapes.md'}, {args.out / 'shapes.json'}{raw} "
          f"in {info['elapsed_s']:.0f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.worker is not None:
        impl, d, mask, seqlen, dtype = args.worker
        if impl not in IMPLS:
            parser.error(f"--worker IMPL: choose from {IMPLS}")
        try:
            point = parse_point(f"{d}:{mask}:{seqlen}")
            dtype = parse_dtype(dtype)
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
        return worker(impl, point, dtype)
    try:
        parse_points(args.points)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
