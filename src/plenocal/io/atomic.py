"""Atomic writes: of one file (a temporary file beside it, then :func:`os.replace`) and of a
stage's whole output folder (a temporary folder beside it, then renamed into place).

An interrupted or failed write never leaves a half-written file or a half-written stage at the
destination, and never touches any other file (DESIGN §8). Temporaries are named
``.<destination name>.plenocal-<pid>-<random>.tmp``: a process killed outright (SIGKILL, power
loss) leaves one behind, and the next write to the same destination removes those whose
process no longer exists (:func:`remove_stale_temporaries`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path

from plenocal.errors import InputFileError, UsageError

_TEMP_TAG = ".plenocal-"
_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.plenocal-(?P<pid>\d+)-[0-9a-z_]+(?:\.[^/]*)?\.(?:tmp|old)$")
_LEGACY_TEMP_RE = re.compile(r"^\..+\.[0-9a-z_]{8}(?:\.[^/]*)?\.tmp$")
"""Temporary files of plenocal before the process id was in their name."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _oserror(path: Path, what: str, exc: OSError) -> InputFileError:
    return InputFileError(path, f"{what} ({exc.strerror or exc})")


def _write_error(dest: Path, exc: OSError) -> OSError | InputFileError:
    """An OSError raised while an output is being written, naming the output when the error names
    no file (a full disk: "No space left on device" said nothing of where)."""
    if exc.filename is not None:
        return exc
    return InputFileError(dest, f"cannot write the output ({exc.strerror or exc}); nothing of it was written")


TEMP_NAME_OVERHEAD = 1 + len(".plenocal-") + 7 + 1 + 8 + len(".old")
"""Characters a temporary name adds to its destination's name (:func:`_temp_name`: a dot, the tag,
a process id of up to 7 digits, a dash, 8 hex digits, the ``.tmp`` / ``.old`` kind)."""


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def is_temporary(name: str) -> bool:
    """True for the name of a plenocal temporary (current or legacy naming)."""
    return bool(_TEMP_RE.match(name) or _LEGACY_TEMP_RE.match(name))


def remove_stale_temporaries(folder: str | Path, *, name: str | None = None) -> list[Path]:
    """Remove the temporaries in ``folder`` left by plenocal processes that no longer exist.

    Parameters
    ----------
    folder : str or Path
        Where to look (not recursive). A missing folder has none.
    name : str, optional
        Only the temporaries of this destination name.

    Returns
    -------
    list of Path
        What was removed.
    """
    d = Path(folder)
    removed: list[Path] = []
    try:
        entries = list(d.iterdir())
    except OSError:
        return removed
    for p in entries:
        m = _TEMP_RE.match(p.name)
        if m is None or (name is not None and m.group("name") != name) or _process_alive(int(m.group("pid"))):
            continue
        with contextlib.suppress(OSError):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p)
    return removed


def _temp_name(dest: Path, suffix: str = "", kind: str = "tmp") -> str:
    return f".{dest.name}{_TEMP_TAG}{os.getpid()}-{secrets.token_hex(4)}{suffix}.{kind}"


@contextlib.contextmanager
def atomic_output(path: str | Path, *, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    The parent folder is created if needed. On any exception (including Ctrl-C) the temporary
    file is removed and ``path`` is left as it was.

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
        raise _oserror(dest.parent, "cannot create output folder", exc) from None
    if dest.is_dir():
        raise InputFileError(dest, "output path is a folder, expected a file name")
    remove_stale_temporaries(dest.parent, name=dest.name)
    tmp = dest.parent / _temp_name(dest, suffix)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise _oserror(dest.parent, "cannot write in the output folder", exc) from None
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if is_temporary(dest.parent.name):  # inside a stage's temporary folder: atomic_folder names the stage's
            raise
        raise _write_error(dest, exc) from None
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


def foreign_entries(folder: str | Path, owned: Collection[str]) -> list[str]:
    """Names in ``folder`` that are neither in ``owned`` nor plenocal temporaries (sorted).

    A missing folder has none.
    """
    d = Path(folder)
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir() if p.name not in owned and not is_temporary(p.name))


def check_name_lengths(path: Path, *, option: str = "-o") -> None:
    """Refuse, before any work, an output path whose names the file system cannot hold: each
    component within NAME_MAX, the last one with room for its temporary name beside it
    (:data:`TEMP_NAME_OVERHEAD`). A 240-character ``-o`` failed only once everything was computed."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        name_max = int(os.pathconf(probe, "PC_NAME_MAX"))
    except (OSError, ValueError):
        name_max = 255
    parts = path.absolute().parts
    for part in parts[1:-1]:
        if len(part.encode()) > name_max:
            raise UsageError(f"{option} {path}: the folder name {part[:24]}... is {len(part.encode())} bytes, the file "
                             f"system allows {name_max}; choose a shorter path")
    last = len(parts[-1].encode()) if len(parts) > 1 else 0
    if last + TEMP_NAME_OVERHEAD > name_max:
        raise UsageError(f"{option} {path}: the name {parts[-1][:24]}... is {last} bytes; the output is built beside "
                         f"it under a temporary name {TEMP_NAME_OVERHEAD} bytes longer and the file system allows "
                         f"{name_max}: use a name of at most {name_max - TEMP_NAME_OVERHEAD} bytes")


def check_writable(path: Path) -> Path:
    """The nearest existing ancestor of ``path`` (or itself), checked writable."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise InputFileError(probe, "is a file: the output folder cannot be created below it")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputFileError(probe, "folder is not writable: the output cannot be created here "
                                    "(choose another output folder or change its permissions)")
    # The permission bits do not tell everything (root passes os.access on /proc, a read-only
    # mount, a full quota): a temporary folder is created there and removed, before the work, so
    # that the output's failure is not found once everything is computed (a calibration took 21 s
    # to say it could not write in /proc).
    try:
        Path(tempfile.mkdtemp(prefix=f".probe{_TEMP_TAG}{os.getpid()}-", suffix=".tmp", dir=probe)).rmdir()
    except OSError as exc:
        raise InputFileError(probe, f"folder is not writable: the output cannot be created here ({exc.strerror or exc}); "
                                    "choose another output folder") from None
    return probe


@contextlib.contextmanager
def atomic_folder(path: str | Path, *, owned: Collection[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it becomes ``path``.

    Everything a stage writes goes into the temporary folder; only when the block finishes
    does the folder take ``path``'s place (one rename when ``path`` does not exist; otherwise the
    old folder is renamed aside, the new one renamed in, the old one removed). So ``path`` is
    either the complete previous folder, absent for an instant, or the complete new one — never a
    mix. On any exception the temporary folder is removed and ``path`` is left as it was.

    Parameters
    ----------
    path : str or Path
        The stage's output folder.
    owned : collection of str
        Names the stage may write in ``path``. An existing ``path`` holding anything else is
        refused (its content would be lost with the old folder).

    Raises
    ------
    InputFileError
        ``path`` is a file, holds files the stage does not own, or its parent is not writable.
    """
    dest = Path(path)
    if dest.is_symlink():
        dest = dest.resolve()
    if dest.exists() and not dest.is_dir():
        raise InputFileError(dest, "output path is a file, expected a folder")
    foreign = foreign_entries(dest, owned)
    if foreign:
        raise InputFileError(dest, f"output folder holds files this command does not write ({', '.join(foreign[:3])}"
                                   f"{', ...' if len(foreign) > 3 else ''}); choose a new or empty folder")
    parent = dest.parent
    check_writable(parent)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _oserror(parent, "cannot create output folder", exc) from None
    remove_stale_temporaries(parent, name=dest.name)
    tmp = parent / _temp_name(dest)
    try:
        tmp.mkdir(mode=0o777)
    except OSError as exc:
        raise _oserror(parent, "cannot write in the output folder", exc) from None
    try:
        yield tmp
        if dest.exists():
            old = parent / _temp_name(dest, kind="old")
            os.rename(dest, old)
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(dest, exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_files(folder: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``folder``; on success move each file it holds into
    ``folder`` (each move atomic), for outputs that join a folder holding other files (e.g. a
    libpleno folder). On any exception nothing is moved and the temporary folder is removed."""
    dest = Path(folder)
    if dest.exists() and not dest.is_dir():
        raise InputFileError(dest, "output path is a file, expected a folder")
    parent = dest.parent
    check_writable(dest if dest.exists() else parent)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _oserror(parent, "cannot create output folder", exc) from None
    remove_stale_temporaries(parent, name=dest.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}{_TEMP_TAG}{os.getpid()}-", suffix=".tmp", dir=parent))
    try:
        yield tmp
        dest.mkdir(exist_ok=True)
        for p in sorted(tmp.iterdir()):
            os.replace(p, dest / p.name)
    except OSError as exc:
        raise _write_error(dest, exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = [
    "atomic_files",
    "atomic_folder",
    "atomic_output",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_name_lengths",
    "check_writable",
    "foreign_entries",
    "is_temporary",
    "remove_stale_temporaries",
]
