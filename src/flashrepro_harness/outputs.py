"""Every file the harness writes: results, baselines, summaries, the golden file, the tuned
table, README.md.

All of them go through :func:`write_atomic` (or :func:`replaced_on_success` for a library that
writes by name, such as matplotlib): the bytes go to a temporary file in the same folder, then
``os.replace`` puts it in place, so a reader sees the old file or the new one, never a part of
one (a full disk or a file-size limit once cut a baseline to 32,768 bytes and lost its history).

A file named on the command line (``sass --markdown``, ``gate --summary``, ...) is checked when
the arguments are parsed (:func:`output_file`, an argparse type), so a typo fails at once and
not after minutes of work, and written with :func:`write_text`. Either way a path that cannot
be written is an error that names the option and the rule, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replaced_on_success(path: Path | str) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix, so a writer that picks the format from
    it still does) for the caller to write; moved onto ``path`` with ``os.replace`` when the
    block ends without an exception, removed when it raises.

    Missing folders are created. A symbolic link is written through (its target replaced), an
    existing file keeps its permission bits, and a new one gets ``0o666`` less the umask, as
    ``open()`` would give it.

    Raises:
        OSError: the folder or the file cannot be made, written or renamed (the temporary file
            is removed and ``path`` left as it was).
    """
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = (target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask())
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.",
                                suffix=target.suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_atomic(path: Path | str, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically: a temporary file in the same
    folder, flushed to the disk, then renamed into place (:func:`replaced_on_success`).

    Raises:
        OSError: as :func:`replaced_on_success`; ``path`` is then unchanged.
    """
    raw = data.encode() if isinstance(data, str) else data
    with replaced_on_success(path) as tmp, open(tmp, "wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())


def write_text(option: str, path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (the value of ``option``, e.g. ``"--markdown"``) with
    :func:`write_atomic`, creating missing folders.

    Raises:
        OutputError: the folder or the file cannot be made (permissions, a file in the way,
            a full disk); the message is ``"OPTION PATH: cannot write: ..."``.
    """
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write: "
                          f"{exc.strerror or exc}") from exc
