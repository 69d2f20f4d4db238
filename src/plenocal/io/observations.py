"""plenocal's ``observations.npz`` <-> :class:`~plenocal.model.observations.Observations`, and the
CSV export (``bap.csv``, ``mic.csv``); ``docs/formats.md``.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from plenocal.errors import InputFileError
from plenocal.io.atomic import atomic_write_bytes, atomic_write_text
from plenocal.model.observations import (
    BAP_COLUMNS,
    MIC_COLUMNS,
    BapFeatures,
    MicroImageCentres,
    Observations,
)

_INT = ("frame", "k", "l", "node", "cluster")
BAP_CSV_HEADER = "frame,k,l,u,v,rho,node,cluster"
MIC_CSV_HEADER = "k,l,u,v"


def _arrays(obs: Observations) -> dict[str, np.ndarray]:
    out = {f"bap_{c}": getattr(obs.bap, c) for c in BAP_COLUMNS}
    out.update({f"mic_{c}": getattr(obs.mic, c) for c in MIC_COLUMNS})
    return out


def write_observations(path: str | Path, observations: Observations) -> Path:
    """Write observations as an uncompressed ``.npz`` (one 1-D array per column), atomically."""
    buf = io.BytesIO()
    np.savez(buf, **_arrays(observations))  # type: ignore[arg-type]
    return atomic_write_bytes(path, buf.getvalue())


def _column(p: Path, data: np.lib.npyio.NpzFile, name: str, n: int | None) -> np.ndarray:
    if name not in data.files:
        raise InputFileError(p, f"missing array '{name}'")
    try:
        a = data[name]
    except ValueError as exc:  # object arrays need pickle: refused
        raise InputFileError(p, f"array '{name}' cannot be read safely ({exc})") from None
    short = name.split("_", 1)[1]
    if a.ndim != 1:
        raise InputFileError(p, f"array '{name}' must be 1-D, got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise InputFileError(p, f"array '{name}' has {a.shape[0]} rows, expected {n} (as the other columns)")
    if short in _INT:
        if a.dtype.kind not in "iu":
            raise InputFileError(p, f"array '{name}' must be integers, got dtype {a.dtype}")
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise InputFileError(p, f"array '{name}' does not fit int32")
        return a.astype(np.int32)
    if a.dtype.kind not in "fiu":
        raise InputFileError(p, f"array '{name}' must be numbers, got dtype {a.dtype}")
    return a.astype(np.float64)


def read_observations(path: str | Path) -> Observations:
    """Read an ``observations.npz``.

    Raises
    ------
    InputFileError
        Missing file or array, wrong dtype, 2-D array, or columns of different lengths.
    """
    p = Path(path)
    if not p.is_file():
        raise InputFileError(p, "file does not exist")
    with open(p, "rb") as fh:
        if fh.read(4) != b"PK\x03\x04":
            raise InputFileError(p, "not a .npz archive (expected a zip of .npy arrays)")
    try:
        with np.load(p, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise InputFileError(p, "expected a .npz archive of arrays, got a single .npy array")
            n_bap = _column(p, data, "bap_frame", None).shape[0]
            bap = {c: _column(p, data, f"bap_{c}", n_bap) for c in BAP_COLUMNS}
            n_mic = _column(p, data, "mic_k", None).shape[0]
            mic = {c: _column(p, data, f"mic_{c}", n_mic) for c in MIC_COLUMNS}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise InputFileError(p, f"not a readable .npz archive ({exc})") from None
    return Observations(BapFeatures(**bap), MicroImageCentres(**mic))


def _csv_text(header: str, columns: list[np.ndarray], ints: list[bool]) -> str:
    n = columns[0].shape[0] if columns else 0
    if n == 0:
        return header + "\n"
    cells = [
        c.astype(np.int64).astype(str) if is_int else np.char.mod("%.17g", c.astype(np.float64))
        for c, is_int in zip(columns, ints, strict=True)
    ]
    rows = cells[0]
    for c in cells[1:]:
        rows = np.char.add(np.char.add(rows, ","), c)
    return header + "\n" + "\n".join(rows.tolist()) + "\n"


def export_observations_csv(folder: str | Path, observations: Observations) -> tuple[Path, Path]:
    """Write ``bap.csv`` and ``mic.csv`` (17 significant digits) into ``folder``, atomically.

    Returns
    -------
    (bap_path, mic_path)
    """
    d = Path(folder)
    b, m = observations.bap, observations.mic
    bap_text = _csv_text(
        BAP_CSV_HEADER,
        [getattr(b, c) for c in BAP_CSV_HEADER.split(",")],
        [c in _INT for c in BAP_CSV_HEADER.split(",")],
    )
    mic_text = _csv_text(MIC_CSV_HEADER, [getattr(m, c) for c in MIC_COLUMNS], [True, True, False, False])
    return atomic_write_text(d / "bap.csv", bap_text), atomic_write_text(d / "mic.csv", mic_text)


__all__ = ["export_observations_csv", "read_observations", "write_observations"]
