"""Nsight Compute runner: profile selected kernel launches of a command and parse the metrics.

Metrics of the launches a kernel-name regex and a launch skip/count pick, one dict per launch in
base units (bytes, ns, instructions, %). Flags (Nsight Compute CLI guide): ``--clock-control
none`` keeps the GPU's clocks; the default cache control and kernel replay give DRAM bytes of a
cold L2; the ``--export`` report is printed with ``--csv --page raw --print-units base``
(:func:`parse_csv` also reads ``--page details``).

Metric names differ between GPUs and ncu versions: :func:`resolve` picks the first name
``ncu --query-metrics`` knows, and :func:`profile` drops (and lists) names ncu still rejects, so
a missing metric is "n/a", not a failed run.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NCU_ENV = "FLASHREPRO_NCU"
_NCU_FALLBACKS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu")
_ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
               "Stream", "Block Size", "Grid Size", "Device", "CC")
_UNIT_SCALE = {  # ncu unit -> factor to the base unit (byte, nsecond)
    "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
    "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
}
_UNKNOWN_METRIC = re.compile(r"Failed to find metric\s+(?:regex:)?\^?([A-Za-z0-9_.]+)")
_METRIC_NAME = re.compile(r"^([a-z][a-z0-9]*__[a-z0-9_]+)\b")


class NcuError(RuntimeError):
    """ncu ran but produced no usable result; the message holds its error lines."""


@dataclass(frozen=True)
class KernelProfile:
    """The metrics of one profiled launch: ncu's ``launch_id`` and ``kernel`` name, ``metrics``
    (name -> value in base units, or ncu's text when not a number) and ncu's ``units``."""

    launch_id: int
    kernel: str
    metrics: dict[str, float | str]
    units: dict[str, str] = field(default_factory=dict)

    def value(self, name: str | None) -> float | None:
        """The metric's numeric value, or None when it is absent or not a number."""
        if name is None:
            return None
        v = self.metrics.get(name)
        return v if isinstance(v, float) else None


@dataclass(frozen=True)
class NcuResult:
    """What :func:`profile` returns: ``kernels`` in launch order, ncu's ``csv``, the
    ``command`` line and the ``dropped`` metrics ncu did not know."""

    kernels: list[KernelProfile]
    csv: str
    command: list[str]
    dropped: list[str]


def find_ncu(explicit: str | None = None) -> str | None:
    """Path of the ``ncu`` executable: ``explicit``, ``$FLASHREPRO_NCU``, PATH, or a CUDA
    install location; None when there is none."""
    for candidate in (explicit, os.environ.get(NCU_ENV)):
        if candidate:
            return shutil.which(candidate) or (candidate if Path(candidate).is_file() else None)
    found = shutil.which("ncu")
    if found:
        return found
    return next((p for p in _NCU_FALLBACKS if Path(p).is_file()), None)


def unavailable_reason(ncu: str | None) -> str | None:
    """Why profiling cannot run here (no ncu, no CUDA GPU), or None when it can."""
    if ncu is None:
        return (f"Nsight Compute (ncu) not found on PATH, in ${NCU_ENV} or in "
                f"{', '.join(_NCU_FALLBACKS)}")
    import torch  # local: keep this module importable without initialising CUDA

    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    return None


def _number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "")
    if not cleaned:
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _to_base(text: str, unit: str) -> float | str:
    value = _number(text)
    if value is None:
        return text.strip() or "n/a"
    return value * _UNIT_SCALE.get(unit.strip(), 1.0)


def parse_csv(text: str) -> list[KernelProfile]:
    """Parse ncu CSV output, raw (wide) or details (long) page, into per-launch metrics.

    Lines before the header are skipped; values lose thousands separators and are scaled to
    base units (byte, nsecond). Returns one :class:`KernelProfile` per launch, by launch ID.

    Raises:
        NcuError: no CSV header (a line starting with ``"ID"``) in ``text``.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise NcuError("no ncu CSV header (a line starting with '\"ID\"') in the output")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    col = {name: i for i, name in enumerate(header)}
    kernels: dict[int, KernelProfile] = {}

    def entry(row: list[str]) -> KernelProfile:
        launch = int(row[col["ID"]])
        if launch not in kernels:
            kernels[launch] = KernelProfile(launch, row[col["Kernel Name"]], {}, {})
        return kernels[launch]

    if "Metric Name" in col:  # details page: one row per (launch, metric)
        for row in body:
            name = row[col["Metric Name"]]
            if not name:
                continue
            unit = row[col["Metric Unit"]] if "Metric Unit" in col else ""
            k = entry(row)
            k.metrics[name] = _to_base(row[col["Metric Value"]], unit)
            k.units[name] = unit
        return [kernels[i] for i in sorted(kernels)]
    # raw page: a units row (empty ID) after the header, then one row per launch
    units = body[0] if body and not body[0][col["ID"]].strip() else [""] * len(header)
    metric_cols = [(i, name) for i, name in enumerate(header) if name not in _ID_COLUMNS]
    for row in body:
        if not row[col["ID"]].strip():
            continue
        k = entry(row)
        for i, name in metric_cols:
            k.metrics[name] = _to_base(row[i], units[i])
            k.units[name] = units[i]
    return [kernels[i] for i in sorted(kernels)]


def query_metrics(ncu: str, timeout_s: float = 120) -> frozenset[str] | None:
    """Base metric names (no ``.sum``-style suffix) that ncu offers on this machine's GPU.

    None when ``ncu --query-metrics`` fails: then request first choices and rely on
    :func:`profile`'s retry.
    """
    try:
        out = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    names = frozenset(m.group(1) for line in out.stdout.splitlines()
                      if (m := _METRIC_NAME.match(line.strip())))
    return names or None


def resolve(candidates: Mapping[str, Sequence[str]],
            known: frozenset[str] | None) -> dict[str, str]:
    """Pick one ncu metric name per quantity: the first candidate whose base name ncu knows.

    ``candidates``: quantity -> names, best first; ``known``: :func:`query_metrics`' names or
    None. With none known, the first candidate (:func:`profile` drops names ncu rejects).

    Raises:
        ValueError: a quantity with no candidate.
    """
    chosen: dict[str, str] = {}
    for key, names in candidates.items():
        if not names:
            raise ValueError(f"candidates[{key!r}] must list at least one metric name")
        chosen[key] = next((n for n in names if known is not None and n.split(".")[0] in known),
                           names[0])
    return chosen


def _error_lines(text: str, limit: int = 12) -> str:
    errors = [line for line in text.splitlines() if "==ERROR==" in line or "Error" in line]
    return "\n".join((errors or text.splitlines())[-limit:])


def profile(command: Sequence[str], metrics: Iterable[str], *, kernel_regex: str,
            launch_skip: int = 0, launch_count: int = 1, env: Mapping[str, str] | None = None,
            ncu: str | None = None, report: Path | None = None,
            timeout_s: float = 540) -> NcuResult:
    """Run ``command`` under Nsight Compute and return the selected launches' metrics.

    Args:
        command: the program to profile.
        metrics: metric names (``dram__bytes_read.sum``, ...).
        kernel_regex: regex on the kernel function name.
        launch_skip, launch_count: matching launches skipped (warm-up), then profiled.
        env: the command's environment (default: this process's).
        ncu: the executable (default: :func:`find_ncu`).
        report: where to keep the ``.ncu-rep``; default a temporary file.
        timeout_s: limit for each ncu invocation, seconds.

    Raises:
        NcuError: ncu is missing, failed, timed out, or profiled a different number of
            launches than ``launch_count``; the message holds ncu's error lines.
    """
    ncu = ncu or find_ncu()
    if ncu is None:
        raise NcuError(unavailable_reason(None) or "ncu not found")
    wanted, dropped = list(dict.fromkeys(metrics)), []
    with tempfile.TemporaryDirectory(prefix="flashrepro-ncu-") as tmp:
        rep = report if report is not None else Path(tmp) / "profile.ncu-rep"
        for _ in range(len(wanted) + 1):
            cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(wanted),
                   "--kernel-name", f"regex:{kernel_regex}", "--launch-skip", str(launch_skip),
                   "--launch-count", str(launch_count), "--target-processes", "all",
                   "--force-overwrite", "--export", str(rep), *command]
            try:
                run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                     env=dict(env) if env is not None else None, check=False)
            except subprocess.TimeoutExpired as exc:
                raise NcuError(f"ncu timed out after {timeout_s:.0f} s: {' '.join(cmd)}") from exc
            unknown = [m for m in _UNKNOWN_METRIC.findall(run.stdout + run.stderr) if m in wanted]
            if unknown and len(unknown) < len(wanted):
                dropped += unknown
                wanted = [m for m in wanted if m not in unknown]
                continue
            break
        if run.returncode != 0 or not rep.is_file():
            raise NcuError(f"ncu exited with {run.returncode}:\n"
                           f"{_error_lines(run.stdout + run.stderr)}")
        imp = subprocess.run([ncu, "--import", str(rep), "--csv", "--page", "raw",
                              "--print-units", "base"], capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    if imp.returncode != 0:
        raise NcuError(f"ncu --import exited with {imp.returncode}:\n"
                       f"{_error_lines(imp.stdout + imp.stderr)}")
    kernels = parse_csv(imp.stdout)
    if len(kernels) != launch_count:
        raise NcuError(f"expected {launch_count} profiled launch(es) of regex {kernel_regex!r}, "
                       f"got {len(kernels)}:\n{_error_lines(run.stdout + run.stderr)}")
    return NcuResult(kernels=kernels, csv=imp.stdout, command=cmd, dropped=dropped)
