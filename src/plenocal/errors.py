"""The one exception hierarchy of plenocal.

Every error a user can cause (a missing file, a malformed config, too few white images...) is a
:class:`PlenocalError` whose message is one line naming the file or key and what to do. The CLI
prints that line and exits with code 2 (130 after Ctrl-C, 143 after SIGTERM); anything else is a bug
and keeps its traceback.
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


class UsageError(PlenocalError):
    """A command-line argument or option is invalid (unknown choice, out of range, output path
    that would overwrite or mix with an input...). The message names the option."""


class ResultError(PlenocalError):
    """A stage computed a result that must not be written as it is: not converged, or not
    physically plausible (d <= 0, F far from the nominal focal length...). The message says which
    check failed and how to write the result anyway, marked, when the stage has such an option."""
