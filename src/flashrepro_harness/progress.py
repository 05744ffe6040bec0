"""Progress of long steps on stderr (stdout stays for tables and JSON).

On a terminal, tqdm's live bar; elsewhere a plain line such as ``sass compiles: 12/34
[01:02<01:40, 2.9 s/kernel]`` at the start, at most every :data:`LOG_INTERVAL_S` seconds, and
at the end. ``FLASHREPRO_PROGRESS=0`` turns it off, ``=1`` forces the lines, ``=bar`` the bar.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TypeVar

from tqdm import tqdm

T = TypeVar("T")

LOG_INTERVAL_S = 30.0
"""Seconds between plain progress lines (override: $FLASHREPRO_PROGRESS_INTERVAL)."""

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

    ``total`` defaults to ``len(iterable)``; ``unit`` names an item in the rate; ``leave``
    keeps the finished bar on a terminal. Yields the same items in order.
    """
    return iter(bar(desc, total=total, unit=unit, leave=leave, iterable=iterable))


def bar(desc: str, *, total: int | None, unit: str = "it", leave: bool = True,
        iterable: Iterable[T] | None = None) -> tqdm:
    """A :class:`tqdm.tqdm` on stderr as in the module doc, for items that finish out of a loop
    (``update(n)`` is thread-safe; ``close()`` it or use it as a context manager)."""
    how = mode()
    if how == "bar":
        return tqdm(iterable, desc=desc, total=total, unit=unit, leave=leave, file=sys.stderr,
                    dynamic_ncols=True)
    interval = float(os.environ.get("FLASHREPRO_PROGRESS_INTERVAL", LOG_INTERVAL_S))
    return tqdm(iterable, desc=desc, total=total, unit=unit, leave=True,
                file=_LineWriter(sys.stderr), disable=how == "off", mininterval=interval,
                maxinterval=interval, bar_format=PLAIN_FORMAT, ascii=True, ncols=0)
