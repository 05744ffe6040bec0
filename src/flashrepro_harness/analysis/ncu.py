"""Nsight Compute runner: profile selected kernel launches of a command and parse the metrics.

One job: run a command (usually ``python -m ...``) under ``ncu``, collect a list of metrics for
the launches picked by a kernel-name regex and a launch skip/count, and return them as one dict
per launch, in base units (bytes, nanoseconds, instructions, %).

How (Nsight Compute CLI guide, https://docs.nvidia.com/nsight-compute/NsightComputeCli):

* ``ncu --clock-control none`` keeps the GPU's own clocks (the default locks them to base);
  the default ``--cache-control all`` flushes the caches before every replay pass and the
  default ``--replay-mode kernel`` replays the kernel once per group of metrics that the
  hardware counters cannot collect together, so the DRAM bytes are those of a cold L2;
* ``--kernel-name regex:R`` selects kernels by function name; ``--launch-skip S`` and
  ``--launch-count N`` count only the launches that match, so warm-up launches are skipped;
* the results go to a report (``--export``), which ``ncu --import ... --csv --page raw
  --print-units base`` prints as CSV: a header row, a units row, one row per profiled launch,
  one column per metric. :func:`parse_csv` also reads the long ``--page details`` form (one
  row per metric).

Metric names differ between GPU generations and ncu versions; :func:`query_metrics` asks
``ncu --query-metrics`` which base names this GPU has, :func:`resolve` picks the first known
name from a list of candidates, and :func:`profile` drops (and reports) names that ncu still
rejects, so that a missing metric becomes "n/a" instead of a failed run.
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
    """The metrics of one profiled kernel launch.

    Attributes:
        launch_id: ncu's ``ID`` of the launch (0, 1, ... in profiling order).
        kernel: the kernel's function name, as ncu reports it.
        metrics: metric name -> value in base units (float), or the text ncu printed when it is
            not a number (e.g. ``'n/a'``).
        units: metric name -> the unit ncu printed (before conversion to base units).
    """

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
    """What :func:`profile` returns.

    Attributes:
        kernels: one :class:`KernelProfile` per profiled launch, in launch order.
        csv: the CSV text as ncu printed it (raw page, base units).
        command: the profiling command line that produced it.
        dropped: requested metrics that ncu did not know and that were left out.
    """

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

    Lines before the header (``==PROF==`` messages, the program's own output) are skipped.
    Values lose their thousands separators and are scaled to base units (byte, nsecond)
    when ncu printed a scaled unit (``Mbyte``, ``usecond``, ...).

    Args:
        text: what ``ncu --csv`` (``--page raw`` or ``--page details``) printed.

    Returns:
        One :class:`KernelProfile` per launch, ordered by ncu's launch ID.

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

    Runs ``ncu --query-metrics``; returns None when that fails (no device, old ncu), in which
    case callers should request their first-choice names and rely on :func:`profile`'s retry.
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

    Args:
        candidates: quantity key -> metric names to try, best first (e.g. the ``smsp__`` and
            ``sm__`` spellings of a counter); at least one each.
        known: base names from :func:`query_metrics`, or None when unknown.

    Returns:
        quantity key -> metric name: the first known candidate, else the first candidate (ncu
        then has the last word: :func:`profile` drops names it rejects).

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
        command: the program to profile, e.g. ``[sys.executable, "-m", "pkg.workload"]``.
        metrics: metric names (``dram__bytes_read.sum``, ...).
        kernel_regex: regex on the kernel function name (``--kernel-name regex:...``).
        launch_skip: matching launches to skip first (warm-up).
        launch_count: matching launches to profile after the skipped ones.
        env: the command's environment (default: this process's).
        ncu: the ncu executable (default: :func:`find_ncu`).
        report: where to keep the ``.ncu-rep`` report; default a temporary file, deleted.
        timeout_s: wall-clock limit for each ncu invocation, seconds.

    Returns:
        An :class:`NcuResult`; metrics ncu did not know are listed in ``dropped`` and absent
        from the kernels' dicts.

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
