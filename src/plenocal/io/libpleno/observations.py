"""libpleno observation files: ``bap*.csv``, ``center*.csv`` and ``linked-observations*.bin.gz``.

All three use MIA-space indices, which are plenocal's (k, l) unchanged, and ``cluster`` = the
checkerboard node id (reference §6.8, §10.3). Records are numpy structured arrays with the
exact binary layouts of the ``.bin.gz`` (little-endian, packed, no padding).
"""

from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from plenocal.errors import InputFileError
from plenocal.io._csv import integer_column, read_numeric_csv
from plenocal.io.atomic import atomic_write_bytes, atomic_write_text
from plenocal.model.observations import POSITIONS_TEMPLATE_FIT, BapFeatures, MicroImageCentres, Observations

CENTER_DTYPE = np.dtype([("k", "<i4"), ("l", "<i4"), ("u", "<f8"), ("v", "<f8")])
CORNER_DTYPE = np.dtype([("k", "<i4"), ("l", "<i4"), ("u", "<f8"), ("v", "<f8"), ("cluster", "<i4"), ("frame", "<i4")])
FEATURE_DTYPE = np.dtype(
    [("k", "<i4"), ("l", "<i4"), ("u", "<f8"), ("v", "<f8"), ("rho", "<f8"), ("cluster", "<i4"), ("frame", "<i4")]
)
assert (CENTER_DTYPE.itemsize, CORNER_DTYPE.itemsize, FEATURE_DTYPE.itemsize) == (24, 32, 40)

BAP_HEADER = ("k", "l", "u", "v", "rho", "cluster", "frame")
CENTER_HEADER = ("k", "l", "u", "v")
_COUNT = np.dtype("<u8")


def _records(path: Path, data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    out = np.zeros(data.shape[0], dtype=dtype)
    for j, name in enumerate(dtype.names or ()):
        if dtype[name].kind == "i":
            out[name] = integer_column(path, data, j, name)
        else:
            out[name] = data[:, j]
    return out


# --- CSV ---------------------------------------------------------------------------------
def read_bap_csv(path: str | Path) -> np.ndarray:
    """Read a ``bap*.csv`` (header ``k,l,u,v,rho,cluster,frame``) as :data:`FEATURE_DTYPE` records."""
    p = Path(path)
    return _records(p, read_numeric_csv(p, BAP_HEADER), FEATURE_DTYPE)


def read_center_csv(path: str | Path) -> np.ndarray:
    """Read a ``center*.csv`` (header ``k,l,u,v``) as :data:`CENTER_DTYPE` records."""
    p = Path(path)
    return _records(p, read_numeric_csv(p, CENTER_HEADER), CENTER_DTYPE)


def _csv(records: np.ndarray, header: tuple[str, ...]) -> str:
    if records.size == 0:
        return ",".join(header) + "\n"
    cells = []
    for name in header:
        col = records[name]
        cells.append(col.astype(np.int64).astype(str) if col.dtype.kind == "i" else np.char.mod("%.17g", col))
    rows = cells[0]
    for c in cells[1:]:
        rows = np.char.add(np.char.add(rows, ","), c)
    return ",".join(header) + "\n" + "\n".join(rows.tolist()) + "\n"


def write_bap_csv(path: str | Path, features: np.ndarray) -> Path:
    """Write :data:`FEATURE_DTYPE` records as a libpleno BAP CSV (17 significant digits), atomically."""
    return atomic_write_text(path, _csv(np.asarray(features, dtype=FEATURE_DTYPE), BAP_HEADER))


def write_center_csv(path: str | Path, centers: np.ndarray) -> Path:
    """Write :data:`CENTER_DTYPE` records as a libpleno centre CSV, atomically."""
    return atomic_write_text(path, _csv(np.asarray(centers, dtype=CENTER_DTYPE), CENTER_HEADER))


# --- linked-observations*.bin.gz ---------------------------------------------------------
@dataclass(frozen=True, eq=False)
class LinkedObservations:
    """The three lists of a ``linked-observations*.bin.gz`` as structured arrays."""

    centers: np.ndarray
    corners: np.ndarray
    features: np.ndarray

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LinkedObservations):
            return NotImplemented
        return all(
            a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in ((self.centers, other.centers), (self.corners, other.corners), (self.features, other.features))
        )


def read_linked_observations(path: str | Path) -> LinkedObservations:
    """Read a gzip ``linked-observations*.bin.gz`` (reference §10.3).

    Layout: for ``centers``, ``corners``, ``features`` in that order, a little-endian uint64
    count then the packed records (24, 32, 40 bytes). Parsed with ``np.frombuffer``.

    Raises
    ------
    InputFileError
        Missing file, not gzip, truncated stream or list, or trailing bytes.
    """
    p = Path(path)
    if not p.is_file():
        raise InputFileError(p, "file does not exist")
    try:
        raw = gzip.decompress(p.read_bytes())
    except EOFError:
        raise InputFileError(p, "truncated gzip stream (the file ends early)") from None
    except (OSError, zlib.error) as exc:
        raise InputFileError(p, f"not a gzip file ({exc})") from None
    lists = []
    offset = 0
    for name, dtype in (("centers", CENTER_DTYPE), ("corners", CORNER_DTYPE), ("features", FEATURE_DTYPE)):
        if len(raw) - offset < 8:
            raise InputFileError(
                p, f"truncated: list '{name}' needs an 8-byte count at byte {offset}, {len(raw) - offset} bytes left"
            )
        n = int(np.frombuffer(raw, dtype=_COUNT, count=1, offset=offset)[0])
        offset += 8
        size = n * dtype.itemsize
        if size > len(raw) - offset:
            raise InputFileError(
                p,
                f"truncated: list '{name}' declares {n} records ({size} bytes), only {len(raw) - offset} bytes left",
            )
        records = np.frombuffer(raw, dtype=dtype, count=n, offset=offset).copy()
        for field in dtype.names or ():
            if dtype[field].kind == "f" and not np.all(np.isfinite(records[field])):
                i = int(np.flatnonzero(~np.isfinite(records[field]))[0])
                raise InputFileError(p, f"list '{name}' record {i} has {field} = {float(records[field][i])!r}: every value "
                                        "must be a finite number")
        lists.append(records)
        offset += size
    if offset != len(raw):
        raise InputFileError(p, f"{len(raw) - offset} unexpected bytes after the 'features' list")
    return LinkedObservations(*lists)


def linked_observations_bytes(doc: LinkedObservations) -> bytes:
    """The uncompressed binary stream of a :class:`LinkedObservations`."""
    buf = io.BytesIO()
    for arr, dtype in ((doc.centers, CENTER_DTYPE), (doc.corners, CORNER_DTYPE), (doc.features, FEATURE_DTYPE)):
        a = np.ascontiguousarray(arr, dtype=dtype)
        buf.write(np.array([a.size], dtype=_COUNT).tobytes())
        buf.write(a.tobytes())
    return buf.getvalue()


def write_linked_observations(path: str | Path, doc: LinkedObservations) -> Path:
    """Write a gzip ``linked-observations*.bin.gz``, atomically (deterministic: mtime 0)."""
    return atomic_write_bytes(path, gzip.compress(linked_observations_bytes(doc), mtime=0))


# --- plenocal Observations <-> libpleno records ------------------------------------------
def features_to_bap(features: np.ndarray) -> BapFeatures:
    """libpleno feature records -> :class:`BapFeatures` (``node`` = libpleno ``cluster``,
    plenocal ``cluster`` = −1: in linked observations the cluster is the node id)."""
    f = np.asarray(features, dtype=FEATURE_DTYPE)
    return BapFeatures(
        frame=f["frame"], k=f["k"], l=f["l"], u=f["u"], v=f["v"], rho=f["rho"], node=f["cluster"],
        cluster=np.full(f.size, -1, dtype=np.int32),
    )  # fmt: skip


def bap_to_features(bap: BapFeatures) -> np.ndarray:
    """:class:`BapFeatures` -> libpleno feature records (``cluster`` = node when linked, else
    the detector cluster id)."""
    out = np.zeros(len(bap), dtype=FEATURE_DTYPE)
    for name in ("k", "l", "u", "v", "rho", "frame"):
        out[name] = getattr(bap, name)
    out["cluster"] = np.where(bap.node >= 0, bap.node, bap.cluster)
    return out


def centers_to_mic(centers: np.ndarray) -> MicroImageCentres:
    c = np.asarray(centers, dtype=CENTER_DTYPE)
    return MicroImageCentres(k=c["k"], l=c["l"], u=c["u"], v=c["v"])


def mic_to_centers(mic: MicroImageCentres) -> np.ndarray:
    out = np.zeros(len(mic), dtype=CENTER_DTYPE)
    for name in ("k", "l", "u", "v"):
        out[name] = getattr(mic, name)
    return out


def observations_from_linked(doc: LinkedObservations) -> Observations:
    """Observations of a ``.bin.gz`` (``corners`` have no ρ and are not used): positions of
    libpleno's template fit."""
    return Observations(features_to_bap(doc.features), centers_to_mic(doc.centers), POSITIONS_TEMPLATE_FIT)


def linked_from_observations(obs: Observations) -> LinkedObservations:
    return LinkedObservations(
        centers=mic_to_centers(obs.mic), corners=np.zeros(0, dtype=CORNER_DTYPE), features=bap_to_features(obs.bap)
    )


def read_observations_csv(bap_path: str | Path, center_path: str | Path | None = None) -> Observations:
    """Observations from a libpleno BAP CSV and, optionally, a centre CSV (positions of libpleno's
    template fit)."""
    bap = features_to_bap(read_bap_csv(bap_path))
    mic = centers_to_mic(read_center_csv(center_path)) if center_path is not None else MicroImageCentres.empty()
    return Observations(bap, mic, POSITIONS_TEMPLATE_FIT)


def read_observations_bin(path: str | Path) -> Observations:
    """Observations from a ``linked-observations*.bin.gz``."""
    return observations_from_linked(read_linked_observations(path))


def _with_rho(obs: Observations) -> Observations:
    """The observations without single views (ρ NaN: a node seen in one micro-image), which
    libpleno's BAP features cannot hold (its ρ is always observed)."""
    has = obs.bap.has_rho
    return obs if has.all() else Observations(obs.bap.select(has), obs.mic, obs.positions)


def write_observations_bin(path: str | Path, obs: Observations) -> Path:
    """Write observations as a libpleno ``linked-observations*.bin.gz`` (single views left out)."""
    return write_linked_observations(path, linked_from_observations(_with_rho(obs)))


def write_observations_csv(bap_path: str | Path, center_path: str | Path, obs: Observations) -> tuple[Path, Path]:
    """Write observations as libpleno ``bap*.csv`` and ``center*.csv`` (single views left out)."""
    obs = _with_rho(obs)
    return write_bap_csv(bap_path, bap_to_features(obs.bap)), write_center_csv(center_path, mic_to_centers(obs.mic))
