"""Progress of long steps (SASS compiles, timing rounds, tuning, the sweep, profiling) on stderr.

:func:`progress` wraps an iterable in a `tqdm <https://tqdm.github.io>`_ bar. On a terminal
it is tqdm's live bar; elsewhere (CI logs, a pipe, a file) it is a plain line such as
``sass compiles: 12/34 [01:02<01:40, 2.9 s/kernel]`` when the step starts, at most every
:data:`LOG_INTERVAL_S` seconds while it runs, and when it ends. It writes to stderr only, so
stdout (tables, JSON that a caller parses) is untouched. ``FLASHREPRO_PROGRESS=0`` turns it off,
``FLASHREPRO_PROGRESS=1`` forces the plain lines, ``bar`` forces the bar.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TypeVar

from tqdm import tqdm

T = TypeVar("T")

LOG_INTERVAL_S = 30.0
"""Seconds between two plain progress lines (non-terminal stderr): a few lines a minute at most
in a CI log (override: $FLASHREPRO_PROGRESS_INTERVAL)."""

PLAIN_FORMAT = "{desc}: {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"


class _LineWriter:
    """A file for tqdm that turns its carriage-return redraws into whole lines on ``stream``."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def mode(stream: IO[str] | None = None) -> str:
    """``"off"``, ``"bar"`` (a terminal) or ``"lines"`` (anything else) for ``stream``
    (default stderr), after ``$FLASHREPRO_PROGRESS`` (0/off, 1/lines, bar)."""
    stream = sys.stderr if stream is None else stream
    setting = os.environ.get("FLASHREPRO_PROGRESS", "").strip().lower()
    if setting in ("0", "off", "false", "no"):
        return "off"
    if setting in ("1", "lines", "plain"):
        return "lines"
    if setting == "bar":
        return "bar"
    isatty = getattr(stream, "isatty", None)
    return "bar" if isatty is not None and isatty() else "lines"


def progress(iterable: Iterable[T], desc: str, *, total: int | None = None,
             unit: str = "it", leave: bool = True) -> Iterator[T]:
    """Iterate over ``iterable`` showing ``desc`` and a count on stderr (see the module doc).

    Args:
        iterable: what to iterate over; ``total`` defaults to its ``len()`` where it has one.
        desc: what is being done, e.g. ``"sass compiles"``.
        total: the number of items, for an iterable without ``len()``.
        unit: the name of one item in the rate (``"round"``, ``"kernel"``).
        leave: keep the finished bar on a terminal (inner loops pass False).

    Returns:
        An iterator over the same items, in the same order.
    """
    return iter(bar(desc, total=total, unit=unit, leave=leave, iterable=iterable))


def bar(desc: str, *, total: int | None, unit: str = "it", leave: bool = True,
        iterable: Iterable[T] | None = None) -> tqdm:
    """A :class:`tqdm.tqdm` on stderr set up as in the module doc; call ``update(n)`` on it and
    ``close()`` it (or use it as a context manager) where items finish out of a loop, e.g.
    in worker threads (tqdm's updates are thread-safe)."""
    how = mode()
    if how == "bar":
        return tqdm(iterable, desc=desc, total=total, unit=unit, leave=leave, file=sys.stderr,
                    dynamic_ncols=True)
    interval = float(os.environ.get("FLASHREPRO_PROGRESS_INTERVAL", LOG_INTERVAL_S))
    return tqdm(iterable, desc=desc, total=total, unit=unit, leave=True,
                file=_LineWriter(sys.stderr), disable=how == "off", mininterval=interval,
                maxinterval=interval, bar_format=PLAIN_FORMAT, ascii=True, ncols=0)
