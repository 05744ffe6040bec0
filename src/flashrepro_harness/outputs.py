"""Every file the harness writes: results, baselines, summaries, the golden file, the tuned
table, README.md.

All go through :func:`write_atomic` (or :func:`replaced_on_success` for a library that writes by
name, such as matplotlib): a temporary file in the same folder, then ``os.replace``, so a reader
sees the old file or the new one, never part of one (a full disk or a file-size limit cannot
truncate a baseline).

A file or folder named on the command line is checked when the arguments are parsed
(:func:`output_file`, :func:`output_dir`)
and written with :func:`write_text`; a path that cannot be written is an error naming the option
and the rule, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def unwritable_reason(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file, or None: it must not be a folder, and the
    nearest existing folder above it must be a folder this user may write into."""
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
    ``ArgumentTypeError`` (:func:`unwritable_reason`; argparse exits 2)."""
    path = Path(text)
    reason = unwritable_reason(path)
    if reason is not None:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {reason}")
    return path


def output_dir(text: str) -> Path:
    """argparse ``type=`` of an option naming a folder to write results into (made if
    missing): the path, or an ``ArgumentTypeError`` before any work, so a long run never ends
    on a folder it cannot write (argparse exits 2)."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write into {text!r}: it is a file, not a "
                                         "folder")
    reason = unwritable_reason(path / "results.json")
    if reason is not None:
        raise argparse.ArgumentTypeError(f"cannot write into {text!r}: {reason}")
    return path


class OutputError(OSError):
    """A requested output file could not be written; the message names the option."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replaced_on_success(path: Path | str) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) for the caller to write; moved onto
    ``path`` when the block ends without an exception, removed when it raises. Missing folders
    are created; a symlink is written through; permission bits are kept, or ``0o666`` less the
    umask for a new file.

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
    """Write ``data`` (text as UTF-8) to ``path`` atomically, fsync'd before the rename.

    Raises:
        OSError: as :func:`replaced_on_success`; ``path`` is then unchanged.
    """
    raw = data.encode() if isinstance(data, str) else data
    with replaced_on_success(path) as tmp, open(tmp, "wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())


def write_text(option: str, path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (the value of ``option``, e.g. ``"--markdown"``) atomically.

    Raises:
        OutputError: the folder or the file cannot be made (permissions, a file in the way,
            a full disk); the message is ``"OPTION PATH: cannot write: ..."``.
    """
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write: "
                          f"{exc.strerror or exc}") from exc


def require_plotting() -> None:
    """Before any work of a command that draws its plot last (bench, model): where matplotlib
    is not installed, raise the ModuleNotFoundError its import would raise at the end, after
    the measurement; ``flashrepro`` names the extra that installs it (``cli.EXTRAS``)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
