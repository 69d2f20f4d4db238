"""Vectorised reading of numeric CSV files with a fixed header."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from plenocal.errors import InputFileError


def read_numeric_csv(path: str | Path, header: Sequence[str]) -> np.ndarray:
    """Read a comma-separated numeric table whose first line is exactly ``header``.

    Parameters
    ----------
    path : str or Path
    header : sequence of str
        Expected column names (surrounding spaces are ignored).

    Returns
    -------
    ndarray, shape (N, len(header)), float64

    Raises
    ------
    InputFileError
        Missing file, wrong header (expected vs actual), non-numeric or non-finite (nan, inf) cell,
        or wrong column count.
    """
    p = Path(path)
    if not p.is_file():
        raise InputFileError(p, "file does not exist")
    try:
        with open(p, encoding="utf-8") as fh:
            first = fh.readline()
    except UnicodeDecodeError:
        raise InputFileError(p, "not a UTF-8 text file") from None
    found = [c.strip() for c in first.strip().split(",")]
    if found != list(header):
        raise InputFileError(p, f"wrong CSV header: expected '{','.join(header)}', got '{first.strip()}'")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="loadtxt: input contained no data")
            data = np.loadtxt(p, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2, encoding="utf-8")
    except ValueError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else "bad row"
        raise InputFileError(p, f"malformed CSV: {msg}") from None
    if data.size == 0:
        return np.zeros((0, len(header)))
    if data.shape[1] != len(header):
        raise InputFileError(p, f"expected {len(header)} columns, got {data.shape[1]}")
    bad = ~np.isfinite(data)
    if bad.any():
        row, col = (int(x[0]) for x in np.nonzero(bad))
        raise InputFileError(
            p, f"column '{header[col]}' holds {float(data[row, col])!r} on data row {row + 1} (line {row + 2}); "
               f"{int(bad.sum())} non-finite cells: every value must be a finite number")
    return data


def integer_column(path: Path, data: np.ndarray, j: int, name: str) -> np.ndarray:
    """Column ``j`` as int32, checking every value is an integer."""
    col = data[:, j]
    if not np.all(np.isfinite(col)) or np.any(col != np.round(col)):
        bad = int(np.flatnonzero(~np.isfinite(col) | (col != np.round(col)))[0])
        raise InputFileError(path, f"column '{name}' must hold integers, got {float(col[bad])!r} on data row {bad + 1}")
    return col.astype(np.int32)
