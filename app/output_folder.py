"""Outputs appear whole or not at all: a command writes its output folder into a temporary folder
beside the target and renames it into place when everything succeeded; on any failure the
temporary folder is removed and the previous output is left exactly as it was."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tilewright.errors import UserError

__all__ = ["OutputError", "output_folder"]


class OutputError(UserError, ValueError):
    """An output path the command cannot write a folder to."""


@contextlib.contextmanager
def output_folder(out: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``out`` to write the whole output into; when the
    block ends normally it replaces ``out`` (an existing folder there is swapped out and then
    removed), otherwise it is deleted and ``out`` is untouched. Raises :class:`OutputError` when
    ``out`` is an existing file, and the ``OSError`` of a parent that cannot be written."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: is a file; -o takes a folder (created if missing, replaced "
                          f"whole if present)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)
