"""Files that a command writes on request (``sass --markdown``, ``gate --summary``, ...).

A command checks such a path when it parses its arguments (:func:`output_file`, an argparse
type), so a typo fails at once and not after minutes of work, and it writes with
:func:`write_text`, which creates missing folders. Either way a path that cannot be written
is an error that names the option and the rule, never a traceback.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def unwritable_reason(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file, or None when it can (as far as a check
    before writing can tell).

    The rule: ``path`` is not an existing folder, and the nearest folder above it that exists
    is a folder (not a file) that this user may write into; folders missing in between are
    created by :func:`write_text`.
    """
    if path.is_dir():
        return f"{path} is a folder; name a file in it"
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a folder, so {path} cannot be created"
    if not os.access(parent, os.W_OK | os.X_OK):
        return (f"folder {parent} is not writable by this user (uid {os.getuid()}); pick "
                "another path, or make the folder writable (chmod, or run as its owner)")
    return None


def output_file(text: str) -> Path:
    """argparse ``type=`` of an option naming a file to write: the path, or an
    ``ArgumentTypeError`` saying why it cannot be written (:func:`unwritable_reason`), which
    argparse reports as ``argument --OPTION: ...`` with exit status 2."""
    path = Path(text)
    reason = unwritable_reason(path)
    if reason is not None:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {reason}")
    return path


class OutputError(OSError):
    """A requested output file could not be written; the message names the option."""


def write_text(option: str, path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (the value of ``option``, e.g. ``"--markdown"``), creating
    missing folders.

    Raises:
        OutputError: the folder or the file cannot be made (permissions, a file in the way,
            a full disk); the message is ``"OPTION PATH: cannot write: ..."``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write: "
                          f"{exc.strerror or exc}") from exc
