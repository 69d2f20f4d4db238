"""Where a command may write: never onto, into or over its inputs (DESIGN §8).

Every subcommand calls :func:`check_output_folder` (or :func:`check_output_file`) before any
work, with everything it will read, so that a mistyped ``-o`` ends in one line and nothing is
written, instead of an overwritten dataset found later. The rules:

- the output is not an input folder (``calibrate DATASET -o DATASET``, ``calibrate --initial
  PRE -o PRE``): those folders' files would be replaced, or new files would be read later as
  the input's own;
- no input file lies inside the output folder (``-o`` a parent of the dataset): the stage's
  folder is replaced as a whole when it is written (:func:`plenocal.io.atomic.atomic_folder`);
- no output file is an input file;
- the output is not inside a folder that must only be read (``forbid_inside``, e.g. libpleno
  sources);
- an existing output folder holds only what the command writes, and its parent is writable.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

from plenocal.errors import UsageError
from plenocal.io.atomic import check_name_lengths, check_writable, foreign_entries

STAGE_RECORD = "stage.json"
"""Written by ``plenocal run`` into each stage's folder; every stage owns it."""


def _real(p: str | Path) -> Path:
    return Path(os.path.realpath(p))


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def check_output_folder(
    out: str | Path,
    *,
    inputs: Iterable[str | Path | None],
    owned: Collection[str] | None,
    writes: Collection[str] = (),
    forbid_inside: Iterable[str | Path] = (),
    option: str = "-o",
) -> Path:
    """Check an output folder against the command's inputs (see the module docstring).

    Parameters
    ----------
    out : str or Path
        The output folder (need not exist).
    inputs : iterable of path or None
        Every file and folder the command reads (None entries are skipped).
    owned : collection of str or None
        Names the command writes in ``out``, which it replaces as a whole
        (:func:`plenocal.io.atomic.atomic_folder`): an existing ``out`` holding other names, or
        holding an input at any depth, is refused. None: ``out`` may hold anything, the command
        adds ``writes`` to it (:func:`plenocal.io.atomic.atomic_files`).
    writes : collection of str
        With ``owned=None``: the names written in ``out`` (none may be an input).
    forbid_inside : iterable of path
        Folders ``out`` must not be in (only read, e.g. import sources).
    option : str
        The option's name in messages.

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    UsageError
        One line naming the option, the input concerned and what to do.
    InputFileError
        ``out`` or its nearest existing ancestor is a file, or not writable.
    """
    o = Path(out)
    ro = _real(o)
    if o.exists() and not o.is_dir():
        raise UsageError(f"{option} {o}: is a file; expected an output folder")
    check_name_lengths(o, option=option)
    for folder in forbid_inside:
        rf = _real(folder)
        if _inside(ro, rf):
            where = "is" if ro == rf else "is inside"
            raise UsageError(f"{option} {o}: {where} the input folder {folder}, which is only read; "
                             "choose an output folder outside it")
    items = [(item, _real(item)) for item in inputs if item is not None]
    for item, ri in items:
        if ri == ro:
            raise UsageError(f"{option} {o}: is the input {item}; outputs never go into an input folder "
                             f"(they would replace or join its files): choose another folder, e.g. {o / 'out'}")
    for item, ri in items:
        if owned is not None and ro in ri.parents:
            raise UsageError(f"{option} {o}: holds the input {item}; the output folder is replaced as a whole "
                             "when written: choose a folder that holds no input")
        if owned is None and ri.parent == ro and ri.name in writes:
            raise UsageError(f"{option} {o}: would overwrite the input {item}; choose another folder")
    if owned is not None:
        foreign = foreign_entries(o, set(owned) | {STAGE_RECORD})
        if foreign:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise UsageError(f"{option} {o}: holds files this command does not write ({shown}); "
                             "choose a new or empty folder")
    # The output is built beside it, then renamed into place: its parent must be writable.
    check_writable(o.absolute().parent)
    if owned is None and o.exists():
        check_writable(o)
    return o


def check_output_file(out: str | Path, *, inputs: Iterable[str | Path | None], suffixes: Collection[str],
                      option: str = "-o") -> Path:
    """Check an output file: not an input, not a folder, one of ``suffixes``, parent writable."""
    o = Path(out)
    if o.is_dir():
        raise UsageError(f"{option} {o}: is a folder; expected a file name ending in {', '.join(sorted(suffixes))}")
    if o.suffix.lower() not in suffixes:
        raise UsageError(f"{option} {o}: expected a file name ending in {', '.join(sorted(suffixes))}")
    check_name_lengths(o, option=option)
    ro = _real(o)
    for item in inputs:
        if item is not None and _real(item) == ro:
            raise UsageError(f"{option} {o}: is the input {item}; choose another file name")
    check_writable(o.absolute().parent)
    return o


__all__ = ["STAGE_RECORD", "check_output_file", "check_output_folder"]


RUN_LOCK = ".plenocal-run.lock"
"""The lock file ``plenocal run`` holds in its output folder while it runs (its process id inside)."""


@contextlib.contextmanager
def folder_lock(out: str | Path, *, option: str = "-o") -> Iterator[Path]:
    """Hold an exclusive lock on the output folder ``out`` for the block (one writer at a time).

    The lock is an advisory ``flock`` on :data:`RUN_LOCK` inside ``out`` (created if needed), so it
    is released whenever the process ends, even when killed. A second holder is refused with one
    line naming the first one's process id. A folder created here and left empty (the run failed
    before writing anything) is removed again. Where ``fcntl`` does not exist (Windows) the block
    runs unlocked.
    """
    folder = Path(out)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / RUN_LOCK
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        fcntl = None  # type: ignore[assignment]
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                raise UsageError(f"{option} {folder}: in use by process {holder} (another plenocal run writes "
                                 "there); wait for it to end or choose another output folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        try:
            yield folder
        finally:
            if created and {p.name for p in folder.iterdir()} == {RUN_LOCK}:
                lock.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    folder.rmdir()
    finally:
        os.close(fd)
