"""Where the harness reads and writes.

Package data, installed with the wheel: the article's problem and published numbers
(``data/article.toml``) and the golden SASS counts (``data/golden/``); a checkout links them
from ``reproduce/``. The per-GPU baselines, the committed results and ``README.md`` exist only
in a clone of the repository (:data:`CHECKOUT`); a command that reads them names the file it
lacks and the option that takes its path.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
ARTICLE_TOML = DATA / "article.toml"
GOLDEN_DIR = DATA / "golden"


def _is_checkout(folder: Path) -> bool:
    return (folder / "pyproject.toml").is_file() and (folder / "reproduce").is_dir()


def find_checkout(start: Path | None = None) -> Path | None:
    """The flashrepro checkout this harness runs from (an editable install or ``src/`` on the
    path), else ``start`` (default: the current folder) or the nearest folder above it that
    holds ``pyproject.toml`` and ``reproduce/``; None outside any."""
    source = Path(__file__).resolve().parents[2]
    if _is_checkout(source):
        return source
    here = (start or Path.cwd()).resolve()
    return next((d for d in (here, *here.parents) if _is_checkout(d)), None)


CHECKOUT = find_checkout()


def checkout_path(*parts: str) -> Path:
    """``parts`` under the checkout, or under the current folder when there is none (the
    command that reads it then reports the missing file by name)."""
    return (CHECKOUT or Path.cwd()).joinpath(*parts)
