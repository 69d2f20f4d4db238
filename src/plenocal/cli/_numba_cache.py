"""Recovery from a corrupted numba kernel cache.

plenocal's numba kernels are compiled with ``cache=True``: the machine code is stored in
``__pycache__/*.nbi`` (index) and ``*.nbc`` (code) files beside the sources (or under
``$NUMBA_CACHE_DIR``). When such a file is truncated or overwritten (a full disk, a copy
interrupted, two numba versions sharing a folder), numba raises from its unpickler on every call
(``UnpicklingError``, ``EOFError``, ``ValueError``...): every ``detect`` would fail. The files are
only a cache: :func:`clear` removes plenocal's, and the CLI runs the command again (numba then
recompiles, once). When they cannot be removed, one line says which folder to clear.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from plenocal.errors import PlenocalError

CACHE_SUFFIXES = (".nbi", ".nbc")
_CACHING_MODULE = os.path.join("numba", "core", "caching.py")


def _frames(tb: TracebackType | None) -> list[str]:
    out = []
    while tb is not None:
        out.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return out


def is_cache_error(exc: BaseException) -> bool:
    """True when ``exc`` was raised while numba loaded or saved a cached kernel."""
    if isinstance(exc, PlenocalError):
        return False
    if any(f.endswith(_CACHING_MODULE) for f in _frames(exc.__traceback__)):
        return True
    return isinstance(exc, RuntimeError) and "cannot cache function" in str(exc)


def cache_folders() -> list[Path]:
    """Folders that may hold plenocal's numba cache files."""
    import plenocal

    package = Path(plenocal.__file__).resolve().parent
    folders = sorted(p for p in package.rglob("__pycache__") if p.is_dir())
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        # numba mirrors the source tree below $NUMBA_CACHE_DIR.
        mirrored = Path(env) / str(package).lstrip(os.sep)
        if mirrored.is_dir():
            folders += sorted(p for p in [mirrored, *mirrored.rglob("*")] if p.is_dir())
    return folders


def clear() -> list[Path]:
    """Remove plenocal's numba cache files; returns them.

    Raises
    ------
    PlenocalError
        One line naming the folder whose files could not be removed and what to do.
    """
    removed = []
    for folder in cache_folders():
        for p in folder.iterdir():
            if p.suffix not in CACHE_SUFFIXES:
                continue
            try:
                p.unlink()
            except OSError as exc:
                raise PlenocalError(
                    f"{folder}: numba's compiled-kernel cache is corrupted and cannot be removed ({exc.strerror}); "
                    f"delete its *.nbi and *.nbc files, or set NUMBA_CACHE_DIR to a writable folder"
                ) from None
            removed.append(p)
    if not removed:
        raise PlenocalError(
            "numba's compiled-kernel cache failed and no plenocal cache file was found to clear; set "
            "NUMBA_CACHE_DIR to a new writable folder and run again"
        )
    return removed


__all__ = ["cache_folders", "clear", "is_cache_error"]
