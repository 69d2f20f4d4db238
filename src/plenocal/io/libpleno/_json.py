"""libpleno's JSON dialect (reference §10.1): numbers as strings, column-major matrices.

Reading accepts strings or bare numbers (as Boost ``property_tree`` does); writing always writes
strings, floats with ``repr`` (shortest exact) precision, matrices column by column.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from plenocal.errors import InputFileError
from plenocal.io._json import _MISSING, FieldsBase, load_json
from plenocal.io.atomic import atomic_write_text

Matrix = tuple[tuple[float, ...], ...]
"""A row-major matrix (``m[i][j]`` = M_ij) as nested tuples (hashable, exact equality)."""



def read_json(path: str | Path) -> dict[str, Any]:
    """Parse a libpleno JSON file; one-line :class:`InputFileError` on any problem."""
    p = Path(path)
    doc = load_json(p)
    if not isinstance(doc, dict):
        raise InputFileError(p, f"expected a JSON object at top level, got {type(doc).__name__}")
    return doc


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


class LpFields(FieldsBase):
    """Typed reads from one JSON object of a libpleno file (string or bare numbers).

    Shares :class:`plenocal.io._json.FieldsBase`' access and error messages with plenocal's reader; differs in that a key set
    to null still counts as present (libpleno never writes null) and in number parsing.
    """

    def has(self, name: str) -> bool:
        return name in self.doc

    def sub(self, name: str) -> LpFields:
        return LpFields(self.path, self.raw(name), self.key(name))

    def to_float(self, name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(name, f"must be a number, got {_short(value)}")
        try:
            x = float(value)
        except ValueError:
            raise self.error(name, f"must be a number, got {_short(value)}") from None
        if math.isnan(x):
            raise self.error(name, f"must be a number, got {_short(value)}")
        return x

    def number(self, name: str, default: Any = _MISSING) -> float:
        if default is not _MISSING and name not in self.doc:
            return default
        return self.to_float(name, self.raw(name))

    def optional_number(self, name: str) -> float | None:
        return self.number(name) if name in self.doc else None

    def integer(self, name: str, default: Any = _MISSING) -> int:
        if default is not _MISSING and name not in self.doc:
            return default
        x = self.to_float(name, self.raw(name))
        if not x.is_integer():
            raise self.error(name, f"must be an integer, got {_short(self.raw(name))}")
        return int(x)

    def optional_integer(self, name: str) -> int | None:
        return self.integer(name) if name in self.doc else None

    def boolean(self, name: str) -> bool | None:
        if name not in self.doc:
            return None
        v = self.doc[name]
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.lower() in ("true", "false", "1", "0"):
            return v.lower() in ("true", "1")
        if isinstance(v, int) and v in (0, 1):
            return bool(v)
        raise self.error(name, f"must be true or false, got {_short(v)}")

    def string(self, name: str) -> str:
        v = self.raw(name)
        if not isinstance(v, str):
            raise self.error(name, f"must be a string, got {_short(v)}")
        return v

    def flat(self, name: str, n: int | None = None, default: Any = _MISSING) -> tuple[float, ...]:
        """A flat list of numbers ``["a", "b", ...]``."""
        if default is not _MISSING and name not in self.doc:
            return default
        v = self.raw(name)
        if not isinstance(v, list):
            raise self.error(name, f"must be a list of numbers, got {_short(v)}")
        if n is not None and len(v) != n:
            raise self.error(name, f"must have {n} values, got {len(v)}")
        return tuple(self.to_float(f"{name}[{i}]", x) for i, x in enumerate(v))

    def matrix(self, name: str, shape: tuple[int, int], default: Any = _MISSING) -> Matrix:
        """A column-major matrix ``[[col0...], [col1...], ...]`` -> row-major nested tuples."""
        if default is not _MISSING and name not in self.doc:
            return default
        v = self.raw(name)
        rows, cols = shape
        ok = isinstance(v, list) and len(v) == cols and all(isinstance(c, list) and len(c) == rows for c in v)
        if not ok:
            got = (
                f"{len(v[0]) if v and isinstance(v[0], list) else '?'}x{len(v)}"
                if isinstance(v, list)
                else type(v).__name__
            )
            raise self.error(name, f"must be a {rows}x{cols} column-major matrix, got {got}")
        columns = [[self.to_float(f"{name}[{j}][{i}]", x) for i, x in enumerate(col)] for j, col in enumerate(v)]
        return tuple(tuple(columns[j][i] for j in range(cols)) for i in range(rows))

    def vector(self, name: str, n: int, default: Any = _MISSING) -> tuple[float, ...]:
        """A column vector ``[[x, y, ...]]``."""
        if default is not _MISSING and name not in self.doc:
            return default
        m = self.matrix(name, (n, 1))
        return tuple(r[0] for r in m)


# --- writing -----------------------------------------------------------------------------
def num(x: float | int) -> str:
    """A libpleno number: a string, ``repr`` precision for floats (exact on re-read)."""
    if isinstance(x, bool):
        raise TypeError("booleans are not numbers")
    if isinstance(x, int | np.integer):
        return str(int(x))
    return repr(float(x))


def flat_json(values: Any) -> list[str]:
    return [num(float(x)) for x in values]


def matrix_json(m: Any) -> list[list[str]]:
    """Row-major matrix -> libpleno column-major JSON."""
    a = np.asarray(m, dtype=np.float64)
    return [[num(float(a[i, j])) for i in range(a.shape[0])] for j in range(a.shape[1])]


def vector_json(v: Any) -> list[list[str]]:
    return [[num(float(x)) for x in v]]


def as_matrix(m: Any) -> Matrix:
    a = np.asarray(m, dtype=np.float64)
    return tuple(tuple(float(x) for x in row) for row in a)


def write_json(path: str | Path, doc: dict[str, Any]) -> Path:
    """Write a libpleno JSON file atomically (4-space indent, as libpleno's examples)."""
    return atomic_write_text(path, json.dumps(doc, indent=4, ensure_ascii=False, allow_nan=False) + "\n")
