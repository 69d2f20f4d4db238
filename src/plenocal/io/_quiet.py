"""Keep third-party libraries' own stderr output (libpng's "libpng error: ...", OpenCV's log lines)
away from the user: plenocal's CLI promises exactly one line per error (DESIGN §8).

Those libraries write to file descriptor 2 directly, from C, so :data:`sys.stderr` redirection
does not catch them; :func:`captured_stderr` redirects the descriptor itself around a call and
hands back what was written, for plenocal to fold into its own message.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

MAX_DETAIL_CHARS = 120
"""Longest third-party detail quoted in a plenocal message (characters)."""

_OPENCV_PREFIX = re.compile(r"^\[\s*[A-Z]+:[^\]]*\]\s*(?:global\s+)?\S+:\d+\s+\S+\s+")
"""OpenCV's log prefix: ``[ WARN:0@14.8] global grfmt_png.cpp:793 readFromStreamOrBuffer``."""


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Redirect file descriptor 2 into a temporary file for the block.

    Yields a list that, after the block, holds one string: everything written to descriptor 2
    (decoded as UTF-8, undecodable bytes replaced). Not for use from several threads at once.
    """
    captured: list[str] = []
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):  # stderr replaced or closed: nothing buffered to keep
        pass
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.append(tmp.read().decode("utf-8", errors="replace"))


def first_line(text: str) -> str:
    """The first non-empty line of ``text``, stripped and shortened (for quoting in a message)."""
    for line in text.splitlines():
        line = _OPENCV_PREFIX.sub("", line.strip())
        if line:
            return line if len(line) <= MAX_DETAIL_CHARS else line[: MAX_DETAIL_CHARS - 3] + "..."
    return ""


__all__ = ["captured_stderr", "first_line"]
