"""Validated access to plenocal's own JSON files (``docs/formats.md``).

Every problem becomes one :class:`InputFileError` line: ``"<path>: key 'a.b' must be ..., got ..."``.
Plain JSON numbers only (booleans and strings are rejected); libpleno's string numbers are
handled by :mod:`plenocal.io.libpleno`, not here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plenocal.errors import InputFileError
from plenocal.io.atomic import atomic_write_text

_MISSING: Any = object()
MAX_INTEGER = 2**31 - 1
"""Largest integer a plenocal file holds by default (frame ids, counts, indices: int32)."""


def load_json(path: str | Path) -> Any:
    """Parse a JSON file; one-line :class:`InputFileError` on a missing, unreadable or bad file."""
    p = Path(path)
    if not p.exists():
        raise InputFileError(p, "file does not exist")
    if p.is_dir():
        raise InputFileError(p, "expected a file, got a folder")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputFileError(p, "not a UTF-8 text file") from None
    except OSError as exc:
        raise InputFileError(p, f"cannot read ({exc.strerror})") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputFileError(p, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise InputFileError(p, "JSON nested too deeply (not a plenocal or libpleno file)") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits, NaN or Infinity
        raise InputFileError(p, f"malformed JSON: {str(exc).splitlines()[0][:100]}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (write a finite number or null)")


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


class FieldsBase:
    """One JSON object of a file, with its dotted key prefix: access and one-line errors shared by
    plenocal's :class:`Fields` and libpleno's ``LpFields`` (which differ in number parsing)."""

    def __init__(self, path: Path, doc: Any, prefix: str = "") -> None:
        self.path = path
        self.prefix = prefix
        if not isinstance(doc, dict):
            where = f"key '{prefix}'" if prefix else "top level"
            raise InputFileError(path, f"{where} must be a JSON object, got {type(doc).__name__}")
        self.doc: dict[str, Any] = doc

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def error(self, name: str, problem: str) -> InputFileError:
        return InputFileError(self.path, f"key '{self.key(name)}' {problem}")

    def raw(self, name: str, default: Any = _MISSING) -> Any:
        if name not in self.doc:
            if default is _MISSING:
                raise InputFileError(self.path, f"missing key '{self.key(name)}'")
            return default
        return self.doc[name]


class Fields(FieldsBase):
    """Typed, validated reads from one JSON object of a file.

    Parameters
    ----------
    path : Path
        The file (named in every error message).
    doc : Any
        The JSON value; must be an object.
    prefix : str
        Dotted key of ``doc`` inside the file ("" at top level).
    """

    def has(self, name: str) -> bool:
        return name in self.doc and self.doc[name] is not None

    def sub(self, name: str) -> Fields:
        return Fields(self.path, self.raw(name), self.key(name))

    def number(self, name: str, default: Any = _MISSING, *, positive: bool = False,
               minimum: float | None = None, maximum: float | None = None) -> float:
        """A finite number; ``positive``: > 0; ``minimum``/``maximum``: inclusive bounds."""
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return value
        return self._as_number(name, value, positive=positive, minimum=minimum, maximum=maximum)

    def _as_number(self, name: str, value: Any, *, positive: bool = False,
                   minimum: float | None = None, maximum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(name, f"must be a number, got {_short(value)}")
        try:
            x = float(value)
        except OverflowError:
            raise self.error(name, f"must be finite, got an integer of {len(str(value))} digits") from None
        if not math.isfinite(x):
            raise self.error(name, f"must be finite, got {value!r}")
        if positive and x <= 0.0:
            raise self.error(name, f"must be > 0, got {value!r}")
        if minimum is not None and x < minimum:
            raise self.error(name, f"must be >= {minimum:g}, got {_short(value)}")
        if maximum is not None and x > maximum:
            raise self.error(name, f"must be <= {maximum:g}, got {_short(value)}")
        return x

    def optional_number(self, name: str) -> float | None:
        return None if self.raw(name, None) is None else self.number(name)

    def integer(self, name: str, default: Any = _MISSING, *, minimum: int | None = None,
                maximum: int = MAX_INTEGER) -> int:
        """An integer within [``minimum``, ``maximum``] (default: any that fits int32... int64)."""
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            if not (isinstance(value, float) and value.is_integer()):
                raise self.error(name, f"must be an integer, got {_short(value)}")
        i = int(value)
        if minimum is not None and i < minimum:
            raise self.error(name, f"must be >= {minimum}, got {_short(i)}")
        if i > maximum:
            raise self.error(name, f"must be <= {maximum}, got {_short(i)}")
        return i

    def string(self, name: str, default: Any = _MISSING, *, choices: Sequence[str] | None = None) -> str:
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            raise self.error(name, f"must be a string, got {_short(value)}")
        if choices is not None and value not in choices:
            raise self.error(name, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def numbers(self, name: str, n: int | None = None, default: Any = _MISSING, *,
                maximum_abs: float | None = None, positive: bool = False) -> tuple[float, ...]:
        """A list of finite numbers (``n`` of them if given), each within ±``maximum_abs``."""
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list):
            raise self.error(name, f"must be a list of numbers, got {_short(value)}")
        if n is not None and len(value) != n:
            raise self.error(name, f"must have {n} numbers, got {len(value)}")
        lo = None if maximum_abs is None else -maximum_abs
        return tuple(self._as_number(f"{name}[{i}]", v, minimum=lo, maximum=maximum_abs, positive=positive)
                     for i, v in enumerate(value))

    def integers(self, name: str, default: Any = _MISSING) -> tuple[int, ...]:
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.error(name, f"must be a list of integers, got {_short(value)}")
        if any(abs(v) > MAX_INTEGER for v in value):
            raise self.error(name, f"must hold integers within ±{MAX_INTEGER}, got {_short(value)}")
        return tuple(value)

    def matrix(self, name: str, shape: tuple[int, int]) -> np.ndarray:
        """A row-major nested list -> array of ``shape``."""
        value = self.raw(name)
        ok = (
            isinstance(value, list)
            and len(value) == shape[0]
            and all(isinstance(r, list) and len(r) == shape[1] for r in value)
        )
        if not ok:
            raise self.error(name, f"must be a {shape[0]}x{shape[1]} nested list of numbers")
        out = np.empty(shape)
        for i, row in enumerate(value):
            for j, v in enumerate(row):
                out[i, j] = self._as_number(f"{name}[{i}][{j}]", v)
        return out

    def dict_or_none(self, name: str) -> dict[str, Any] | None:
        value = self.raw(name, None)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(name, f"must be a JSON object, got {type(value).__name__}")
        return value


def read_document(path: str | Path, fmt: str, *, max_version: int = 1) -> Fields:
    """Load a plenocal JSON file and check its ``format`` and ``version`` keys."""
    p = Path(path)
    f = Fields(p, load_json(p))
    found = f.raw("format", None)
    if found != fmt:
        raise InputFileError(p, f"key 'format' must be {fmt!r}, got {found!r}")
    version = f.integer("version")
    if not 1 <= version <= max_version:
        raise InputFileError(p, f"unsupported version {version} of {fmt} (this plenocal reads 1..{max_version})")
    return f


def write_document(path: str | Path, doc: dict[str, Any]) -> Path:
    """Write a JSON object atomically (UTF-8, 2-space indent, plain numbers, no NaN)."""
    text = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)
    return atomic_write_text(path, text + "\n")


def floats(values: Any) -> list[float]:
    """A flat list of Python floats (exact, for JSON)."""
    return [float(x) for x in np.asarray(values, dtype=np.float64).reshape(-1)]
