"""Point clouds as binary little-endian PLY files (numpy only, written atomically).

One ``vertex`` element whose properties are the columns given, in order: ``float`` (float32),
``double``, ``uchar`` or ``int`` per the column's dtype. Readers: plyfile, Open3D, MeshLab,
CloudCompare.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from plenocal.io.atomic import atomic_write_bytes

_PLY_TYPES = {np.dtype("<f4"): "float", np.dtype("<f8"): "double", np.dtype("u1"): "uchar", np.dtype("<i4"): "int"}


def ply_bytes(columns: Mapping[str, ArrayLike], *, comments: tuple[str, ...] = ()) -> bytes:
    """The bytes of a binary little-endian PLY file with one vertex per row of ``columns``.

    Parameters
    ----------
    columns : mapping name -> (N,) array; float32, float64, uint8 or int32 (others are refused).
    comments : header comment lines (no line breaks).
    """
    arrays = {}
    n = None
    for name, col in columns.items():
        a = np.asarray(col)
        dt = a.dtype.newbyteorder("<") if a.dtype.kind in "fi" else a.dtype
        if dt not in _PLY_TYPES:
            raise ValueError(f"PLY column {name!r}: dtype {a.dtype} not in float32/float64/uint8/int32")
        if a.ndim != 1 or (n is not None and a.shape[0] != n):
            raise ValueError(f"PLY column {name!r}: shape {a.shape}, expected ({n if n is not None else 'N'},)")
        n = a.shape[0]
        arrays[name] = a.astype(dt, copy=False)
    n = n or 0
    record = np.empty(n, dtype=[(k, v.dtype) for k, v in arrays.items()])
    for k, v in arrays.items():
        record[k] = v
    header = ["ply", "format binary_little_endian 1.0"]
    header += [f"comment {c}" for c in comments]
    header.append(f"element vertex {n}")
    header += [f"property {_PLY_TYPES[v.dtype]} {k}" for k, v in arrays.items()]
    header.append("end_header")
    return ("\n".join(header) + "\n").encode("ascii") + record.tobytes()


def write_ply(path: str | Path, columns: Mapping[str, ArrayLike], *, comments: tuple[str, ...] = ()) -> Path:
    """Write :func:`ply_bytes` to ``path`` atomically. Returns the path."""
    return atomic_write_bytes(path, ply_bytes(columns, comments=comments))


_NUMPY_TYPES = {"float": "<f4", "double": "<f8", "uchar": "u1", "int": "<i4"}


def read_ply(path: str | Path) -> dict[str, np.ndarray]:
    """The vertex columns of a binary little-endian PLY file as :func:`ply_bytes` writes it.

    Raises
    ------
    ValueError
        Not such a file (ASCII or big-endian PLY, other elements, unknown property types).
    """
    data = Path(path).read_bytes()
    end = data.find(b"end_header\n")
    if not data.startswith(b"ply\n") or end < 0:
        raise ValueError("not a PLY file (no 'ply' magic or no end_header)")
    lines = data[:end].decode("ascii", errors="replace").splitlines()
    if "format binary_little_endian 1.0" not in lines:
        raise ValueError("not a binary little-endian PLY file")
    n, fields = None, []
    for line in lines:
        parts = line.split()
        if parts[:2] == ["element", "vertex"]:
            n = int(parts[2])
        elif parts[:1] == ["element"]:
            raise ValueError(f"unexpected element {parts[1]!r} (only 'vertex')")
        elif parts[:1] == ["property"]:
            if len(parts) != 3 or parts[1] not in _NUMPY_TYPES:
                raise ValueError(f"unsupported property line {line!r}")
            fields.append((parts[2], _NUMPY_TYPES[parts[1]]))
    if n is None:
        raise ValueError("no vertex element")
    record = np.frombuffer(data, dtype=np.dtype(fields), count=n, offset=end + len(b"end_header\n"))
    return {name: np.array(record[name]) for name, _ in fields}
