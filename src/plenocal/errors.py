"""The one exception hierarchy of plenocal.

Every error a user can cause (a missing file, a malformed config, too few white images...) is a
:class:`PlenocalError` whose message is one line naming the file or key and what to do. The CLI
prints that line and exits with code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path


class PlenocalError(Exception):
    """Base class of every expected, user-facing error."""


class InputFileError(PlenocalError):
    """A file is missing, unreadable or malformed.

    The message is ``"<path>: <what is wrong>"``.
    """

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class ModelError(PlenocalError):
    """A camera or its parameters are physically inconsistent (e.g. d <= 0, F <= 0)."""


class DataError(PlenocalError):
    """Inputs are readable but insufficient or contradictory (too few apertures, no corners...)."""
