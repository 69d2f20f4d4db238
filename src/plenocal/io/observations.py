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
from plenocal.model.lattice import Lattice
from plenocal.model.observations import (
    BAP_COLUMNS,
    MIC_COLUMNS,
    POSITIONS,
    POSITIONS_CHIEF_RAY,
    BapFeatures,
    MicroImageCentres,
    Observations,
)

_INT = ("frame", "k", "l", "node", "cluster")
SENSOR_MARGIN_FRACTION = 0.1
"""(u, v) up to this fraction of the sensor's width (height) beyond its edge are accepted: the
centres of border micro-images, and chief-ray positions, lie partly off the sensor."""
BAP_CSV_HEADER = "frame,k,l,u,v,rho,node,cluster"
MIC_CSV_HEADER = "k,l,u,v"


def _arrays(obs: Observations) -> dict[str, np.ndarray]:
    out = {f"bap_{c}": getattr(obs.bap, c) for c in BAP_COLUMNS}
    out.update({f"mic_{c}": getattr(obs.mic, c) for c in MIC_COLUMNS})
    out["positions"] = np.array(obs.positions)
    if obs.relative_frames:
        out["relative_frames"] = np.array(sorted(obs.relative_frames), dtype=np.int32)
    return out


def _positions(p: Path, data: np.lib.npyio.NpzFile) -> str:
    """The record of what the features' (u, v) are; chief-ray in files written before it existed."""
    if "positions" not in data.files:
        return POSITIONS_CHIEF_RAY
    a = data["positions"]
    value = str(a[()]) if a.dtype.kind == "U" and a.ndim == 0 else None
    if value not in POSITIONS:
        raise InputFileError(p, f"'positions' must be one of {list(POSITIONS)}, got {value or a!r}")
    return value


def _relative_frames(p: Path, data: np.lib.npyio.NpzFile) -> tuple[int, ...]:
    """The frames linked with relative node ids (:attr:`Observations.relative_frames`); none in
    files written before the record."""
    if "relative_frames" not in data.files:
        return ()
    a = data["relative_frames"]
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise InputFileError(p, f"array 'relative_frames' must be 1-D integers, got shape {a.shape}, dtype {a.dtype}")
    return tuple(int(f) for f in a)


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
            positions = _positions(p, data)
            relative = _relative_frames(p, data)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise InputFileError(p, f"not a readable .npz archive ({str(exc).splitlines()[0][:100]})") from None
    obs = Observations(BapFeatures(**bap), MicroImageCentres(**mic), positions, relative)
    validate_observations(obs, p)
    return obs


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _duplicates(columns: list[np.ndarray]) -> np.ndarray:
    """Boolean mask of the rows whose key (the tuple of ``columns``) appeared in an earlier row."""
    n = columns[0].shape[0]
    if n == 0:
        return np.zeros(0, dtype=bool)
    key = np.stack([c.astype(np.int64) for c in columns], axis=1)
    order = np.lexsort(key.T[::-1])
    same = np.all(key[order][1:] == key[order][:-1], axis=1)
    dup = np.zeros(n, dtype=bool)
    dup[order[1:][same]] = True
    return dup


def validate_observations(
    obs: Observations,
    where: str | Path,
    *,
    lattice: Lattice | None = None,
    image_size: tuple[int, int] | None = None,
    n_nodes: int | None = None,
) -> None:
    """Check observations at a boundary; one-line :class:`InputFileError` naming the first bad row.

    Always: finite u, v, ρ (BAP) and u, v (MIC); frame, k, l >= 0; node, cluster >= −1; no
    feature twice (same frame, micro-lens and node, or same cluster while unlinked); no
    micro-image centre twice. With ``lattice``: every (k, l) on it. With ``image_size``
    (width, height): every (u, v) on the sensor (pixel centres at integers, so within
    [−0.5, width − 0.5] × [−0.5, height − 0.5]), give or take :data:`SENSOR_MARGIN_FRACTION`.
    With ``n_nodes``: node < n_nodes.

    Parameters
    ----------
    obs : Observations
    where : str or Path
        The file named in messages.
    lattice : Lattice, optional
    image_size : (int, int), optional
    n_nodes : int, optional
    """
    p = Path(where)
    b, m = obs.bap, obs.mic
    for name, col in (("u", b.u), ("v", b.v), ("rho", b.rho)):
        # ρ may be NaN (a single view: a node fitted in one micro-image, no υ), never ±inf
        bad = np.isinf(col) if name == "rho" else ~np.isfinite(col)
        if bad.any():
            i = _first_bad(bad)
            raise InputFileError(p, f"BAP feature {i} has {name} = {float(col[i])!r} ({int(bad.sum())} non-finite "
                                    f"values in '{name}'): every u, v must be a finite number, rho finite or NaN "
                                    "(a node seen in one micro-image)")
    for name, col in (("u", m.u), ("v", m.v)):
        bad = ~np.isfinite(col)
        if bad.any():
            i = _first_bad(bad)
            raise InputFileError(p, f"micro-image centre {i} has {name} = {float(col[i])!r} ({int(bad.sum())} non-finite "
                                    f"values): every u, v must be a finite number")
    for what, table, names, low in (("BAP feature", b, ("frame", "k", "l"), 0), ("BAP feature", b, ("node", "cluster"), -1),
                                    ("micro-image centre", m, ("k", "l"), 0)):
        for name in names:
            col = getattr(table, name)
            bad = col < low
            if bad.any():
                i = _first_bad(bad)
                raise InputFileError(p, f"{what} {i} has {name} = {int(col[i])}, expected >= {low}")
    if lattice is not None:
        for what, table in (("BAP feature", b), ("micro-image centre", m)):
            bad = (table.k >= lattice.width) | (table.l >= lattice.height)
            if bad.any():
                i = _first_bad(bad)
                raise InputFileError(
                    p, f"{what} {i} has micro-lens (k, l) = ({int(table.k[i])}, {int(table.l[i])}), off the "
                       f"{lattice.width} x {lattice.height} micro-lens array ({int(bad.sum())} such rows): "
                       "observations of another camera, or corrupted indices")
    if image_size is not None:
        w, h = image_size
        mu, mv = SENSOR_MARGIN_FRACTION * w, SENSOR_MARGIN_FRACTION * h
        for what, table in (("BAP feature", b), ("micro-image centre", m)):
            bad = (table.u < -0.5 - mu) | (table.u > w - 0.5 + mu) | (table.v < -0.5 - mv) | (table.v > h - 0.5 + mv)
            if bad.any():
                i = _first_bad(bad)
                raise InputFileError(
                    p, f"{what} {i} at (u, v) = ({table.u[i]:.6g}, {table.v[i]:.6g}) px lies far off the {w} x {h} px "
                       f"sensor ({int(bad.sum())} such rows): observations of another camera, or corrupted")
    if n_nodes is not None:
        bad = b.node >= n_nodes
        if bad.any():
            i = _first_bad(bad)
            raise InputFileError(p, f"BAP feature {i} has node {int(b.node[i])}; the target has {n_nodes} nodes "
                                    f"(0..{n_nodes - 1})")
    linked = b.node >= 0
    dup = np.zeros(len(b), dtype=bool)
    if linked.any():
        dup[linked] = _duplicates([b.frame[linked], b.k[linked], b.l[linked], b.node[linked]])
    loose = ~linked & (b.cluster >= 0)
    if loose.any():
        dup[loose] = _duplicates([b.frame[loose], b.k[loose], b.l[loose], b.cluster[loose]])
    if dup.any():
        i = _first_bad(dup)
        raise InputFileError(
            p, f"BAP feature {i} repeats an earlier one (frame {int(b.frame[i])}, micro-lens ({int(b.k[i])}, "
               f"{int(b.l[i])}), node {int(b.node[i])}; {int(dup.sum())} repeated rows): each node is seen once per "
               "micro-image; remove the duplicates")
    dup_m = _duplicates([m.k, m.l])
    if dup_m.any():
        i = _first_bad(dup_m)
        raise InputFileError(
            p, f"micro-image centre {i} repeats micro-lens ({int(m.k[i])}, {int(m.l[i])}) ({int(dup_m.sum())} "
               "repeated rows): one centre per micro-lens; remove the duplicates")


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


__all__ = ["export_observations_csv", "read_observations", "validate_observations", "write_observations"]
