"""The CLI's promise on hostile input (DESIGN §8), checked by the hostile batteries.

Every case asserts: the exit code (2; 130 for Ctrl-C, 143 for SIGTERM), exactly one line on stderr
(file descriptor 2, so that OpenCV's and libpng's own lines would be seen), no traceback, nothing
written (the output folder absent or unchanged, no temporary left beside it) and every input file
byte-identical.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from plenocal.cli.main import main


def snapshot(paths: list[Path]) -> dict[str, str | None]:
    """SHA-256 of every file under each path (None for a missing path)."""
    out: dict[str, str | None] = {}
    for p in paths:
        p = Path(p)
        if not p.exists():
            out[str(p)] = None
            continue
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
        for f in files:
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".plenocal-" in p.name] if folder.is_dir() else []


def hostile(capfd, argv: list[str], *, inputs: list[Path], out: Path | None, match: str, code: int = 2) -> str:
    """Run ``plenocal argv`` and check the promise; returns the one stderr line."""
    capfd.readouterr()
    before = snapshot(inputs)
    out_before = snapshot([out]) if out is not None and out.exists() else None
    rc = main([str(a) for a in argv])
    cap = capfd.readouterr()
    lines = cap.err.splitlines()
    assert rc == code, (rc, cap.err)
    assert len(lines) == 1 and cap.err.endswith("\n"), cap.err
    assert "Traceback" not in cap.err + cap.out
    assert re.search(match, lines[0]), lines[0]
    assert snapshot(inputs) == before, "an input changed"
    if out is not None:
        if out_before is None:
            assert not out.exists(), f"{out} was written"
        else:
            assert snapshot([out]) == out_before, f"{out} changed"
        assert temporaries(out.parent) == []
    return lines[0]


