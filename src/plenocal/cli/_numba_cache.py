"""Recovery from a corrupted numba kernel cache.

plenocal's numba kernels are compiled with ``cache=True``: the machine code is stored in
``__pycache__/*.nbi`` (index) and ``*.nbc`` (code) files beside the sources (or under
``$NUMBA_CACHE_DIR``, or numba's user-wide cache folder). When such a file is truncated or overwritten (a full disk, a copy
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
    """Folders that may hold plenocal's numba cache files: numba's per-folder sub-folders
    (``<name>_<sha1 of the folder path>``) of ``$NUMBA_CACHE_DIR`` when it is set; otherwise
    ``__pycache__`` beside each source folder and those sub-folders of numba's user-wide cache
    (used when ``__pycache__`` is not writable)."""
    import hashlib

    import plenocal

    package = Path(plenocal.__file__).resolve().parent
    sources = sorted({p.parent for p in package.rglob("*.py")})
    chosen = os.environ.get("NUMBA_CACHE_DIR")  # when set, numba uses it alone
    bases = [Path(chosen)] if chosen else [Path(d) for d in (_user_wide_cache(),) if d]
    out = []
    for src in sources:
        if not chosen:
            out.append(src / "__pycache__")
        sub = f"{src.name}_{hashlib.sha1(str(src).encode()).hexdigest()}"
        out += [base / sub for base in bases]
    return [p for p in out if p.is_dir()]


def _user_wide_cache() -> str | None:
    try:
        from numba.misc.appdirs import AppDirs

        return str(AppDirs(appname="numba", appauthor=False).user_cache_dir)
    except Exception:  # numba's layout changed: the other folders still count
        return None


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
