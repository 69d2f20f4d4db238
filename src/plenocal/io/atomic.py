"""Atomic writes: a temporary file in the destination folder, then :func:`os.replace`.

An interrupted or failed write never leaves a half-written file at the destination, and never
touches any other file (DESIGN §8).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from plenocal.errors import InputFileError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path: str | Path, *, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    The parent folder is created if needed. On any exception the temporary file is removed and
    ``path`` is left as it was.

    Parameters
    ----------
    path : str or Path
        Final destination.
    suffix : str
        Suffix of the temporary file (some writers choose the encoder from the extension).
    """
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputFileError(dest.parent, f"cannot create output folder ({exc.strerror})") from None
    if dest.is_dir():
        raise InputFileError(dest, "output path is a folder, expected a file name")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix + ".tmp", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (fsync'ed before the rename). Returns the path."""
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically. Returns the path."""
    return atomic_write_bytes(path, text.encode("utf-8"))


__all__ = ["atomic_output", "atomic_write_bytes", "atomic_write_text"]
