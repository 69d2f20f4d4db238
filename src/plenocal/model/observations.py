"""Observations: BAP features and micro-image centres, as columnar numpy arrays.

A BAP feature is ``(frame, k, l, u, v, rho, node)``; a micro-image centre (MIC) is
``(k, l, u, v)`` (``docs/conventions.md``, "Observations"). ``node`` is the checkerboard node id,
−1 while a cluster is not yet linked to the target; ``cluster`` is the detector's cluster id
(−1 when unknown). ``rho`` is NaN for a *single view*: a linked node fitted in one micro-image
only (near the MLA's conjugate plane), which has no virtual depth of its own and so no observed
blur radius; it enters calibration by its (u, v) alone (:attr:`BapFeatures.has_rho`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.errors import DataError

POSITIONS_CHIEF_RAY = "chief-ray"
"""(u, v) where the chief ray through the micro-lens centre meets the sensor: the paper's model
(plenocal's ``detect`` by default, simulated ground truth)."""
POSITIONS_AS_SEEN = "as-seen"
"""(u, v) where plenocal's corner estimator sees the corner (``detect --no-pupil-vignetting``):
displaced towards the micro-image border by the pupil vignetting, as the shift of
:mod:`plenocal.model.pupil` models it."""
POSITIONS_TEMPLATE_FIT = "template-fit"
"""(u, v) of libpleno/COMPOTE's affine corner-template fit (imported): apparent positions of
another estimator, which the first-order pupil-vignetting shift does not describe (on the real
R12-A observations, with the radii the white images measure, it raises the least-squares cost by
17 %; docs/model.md)."""
POSITIONS = (POSITIONS_CHIEF_RAY, POSITIONS_AS_SEEN, POSITIONS_TEMPLATE_FIT)
"""What a BAP feature's (u, v) can be (:attr:`Observations.positions`)."""

BAP_COLUMNS = ("frame", "k", "l", "u", "v", "rho", "node", "cluster")
MIC_COLUMNS = ("k", "l", "u", "v")
_INT_COLUMNS = {"frame", "k", "l", "node", "cluster"}


def _col(name: str, values: ArrayLike | None, n: int | None) -> NDArray:
    dtype = np.int32 if name in _INT_COLUMNS else np.float64
    if values is None:
        assert n is not None
        return np.full(n, -1, dtype=dtype)
    return np.ascontiguousarray(np.asarray(values).reshape(-1), dtype=dtype)


@dataclass(frozen=True, eq=False)
class BapFeatures:
    """N BAP features, one array per column (shape (N,))."""

    frame: NDArray[np.int32]
    k: NDArray[np.int32]
    l: NDArray[np.int32]
    u: NDArray[np.float64]
    v: NDArray[np.float64]
    rho: NDArray[np.float64]
    node: NDArray[np.int32] = field(default=None)  # type: ignore[assignment]
    cluster: NDArray[np.int32] = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        n = np.asarray(self.frame).size
        for name in BAP_COLUMNS:
            object.__setattr__(self, name, _col(name, getattr(self, name), n))
            if getattr(self, name).shape != (n,):
                raise DataError(f"BAP column '{name}' has {getattr(self, name).size} rows, expected {n}")

    def __len__(self) -> int:
        return int(self.frame.size)

    @classmethod
    def empty(cls) -> BapFeatures:
        z = np.zeros(0)
        return cls(z, z, z, z, z, z, z, z)

    @property
    def uv(self) -> NDArray[np.float64]:
        return np.stack([self.u, self.v], axis=-1)

    @property
    def has_rho(self) -> NDArray[np.bool_]:
        """(N,) True where ρ was observed (finite); False for single views (ρ NaN: one micro-image, no υ)."""
        return np.isfinite(self.rho)

    def select(self, mask: ArrayLike) -> BapFeatures:
        m = np.asarray(mask)
        return BapFeatures(**{c: getattr(self, c)[m] for c in BAP_COLUMNS})

    def columns(self) -> dict[str, NDArray]:
        return {c: getattr(self, c) for c in BAP_COLUMNS}

    @classmethod
    def concatenate(cls, parts: list[BapFeatures]) -> BapFeatures:
        if not parts:
            return cls.empty()
        return cls(**{c: np.concatenate([getattr(p, c) for p in parts]) for c in BAP_COLUMNS})


@dataclass(frozen=True, eq=False)
class MicroImageCentres:
    """M observed micro-image centres (shape (M,) each)."""

    k: NDArray[np.int32]
    l: NDArray[np.int32]
    u: NDArray[np.float64]
    v: NDArray[np.float64]

    def __post_init__(self) -> None:
        n = np.asarray(self.k).size
        for name in MIC_COLUMNS:
            object.__setattr__(self, name, _col(name, getattr(self, name), n))
            if getattr(self, name).shape != (n,):
                raise DataError(f"MIC column '{name}' has {getattr(self, name).size} rows, expected {n}")

    def __len__(self) -> int:
        return int(self.k.size)

    @classmethod
    def empty(cls) -> MicroImageCentres:
        z = np.zeros(0)
        return cls(z, z, z, z)

    @property
    def uv(self) -> NDArray[np.float64]:
        return np.stack([self.u, self.v], axis=-1)

    def select(self, mask: ArrayLike) -> MicroImageCentres:
        m = np.asarray(mask)
        return MicroImageCentres(**{c: getattr(self, c)[m] for c in MIC_COLUMNS})

    def columns(self) -> dict[str, NDArray]:
        return {c: getattr(self, c) for c in MIC_COLUMNS}


@dataclass(frozen=True, eq=False)
class Observations:
    """Everything the calibration consumes: BAP features and micro-image centres.

    ``positions`` says what the features' (u, v) are (one of :data:`POSITIONS`): chief-ray
    positions (the default, and what files without the record are taken to hold), as seen by
    plenocal's estimator, or libpleno's template fit. ``relative_frames``: the frames whose node
    ids are the board's only up to a whole-square shift and a turn in its plane (calibration and
    evaluation frames no image could place on the board, :attr:`plenocal.calib.extrinsics.Linking.relative_ids`):
    only their linked nodes' rows and columns are known to lie on the printed board
    (:meth:`node_extent`).
    """

    bap: BapFeatures
    mic: MicroImageCentres
    positions: str = POSITIONS_CHIEF_RAY
    relative_frames: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise DataError(f"positions must be one of {list(POSITIONS)}, got {self.positions!r}")

    @property
    def frames(self) -> NDArray[np.int32]:
        return np.unique(self.bap.frame)

    def node_extent(self, frame: int, *, columns: int) -> tuple[int, int, int, int] | None:
        """(first column, last column, first row, last row) of ``frame``'s linked nodes (node id =
        row·columns + column), or None when it has none."""
        nodes = self.bap.node[(self.bap.frame == frame) & (self.bap.node >= 0)]
        if not len(nodes):
            return None
        row, col = np.divmod(nodes.astype(np.int64), columns)
        return int(col.min()), int(col.max()), int(row.min()), int(row.max())
