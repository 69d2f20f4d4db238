"""Lattices of micro-lenses / micro-images and the micro-lens type layout.

One index pair (k, l) = (column, row) names a micro-lens and its micro-image (see
``docs/conventions.md``, "Micro-lens and micro-image lattices").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.errors import ModelError

SIN60 = float(np.sqrt(3.0) / 2.0)

LENS_KEY_BASE = np.int64(1) << 31
"""(k, l) → k·2³¹ + l (:func:`lens_keys`): distinct for any index pair below 2³¹ in magnitude."""


def lens_keys(k: ArrayLike, l: ArrayLike) -> NDArray[np.int64]:
    """One int64 key per micro-lens (k, l), to match lenses between sets with ``np.isin``,
    ``np.intersect1d`` or a sorted search."""
    return np.asarray(k, dtype=np.int64) * LENS_KEY_BASE + np.asarray(l, dtype=np.int64)


class LatticeKind(Enum):
    """Arrangement of the micro-lenses."""

    HEX_ROWS = "hexagonal-rows"
    """Hexagonal, rows aligned; even rows shifted by +½ pitch along u (Raytrix, Lytro)."""
    HEX_COLS = "hexagonal-columns"
    """Hexagonal, columns aligned; even columns shifted by +½ pitch along v."""
    ORTHOGONAL = "orthogonal"


@dataclass(frozen=True)
class Lattice:
    """The index layout of an array: ``width`` columns (k) × ``height`` rows (l)."""

    kind: LatticeKind
    width: int
    height: int

    def __post_init__(self) -> None:
        if self.width < 1 or self.height < 1:
            raise ModelError(f"lattice size must be >= 1x1, got {self.width}x{self.height}")

    @property
    def size(self) -> int:
        return self.width * self.height

    def positions(
        self, k: ArrayLike, l: ArrayLike, pitch: tuple[float, float]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Lattice positions g(k, l) (before rotation and offset), in the unit of ``pitch``.

        Parameters
        ----------
        k, l : array_like of int, same shape
            Column and row indices.
        pitch : (p0, p1)
            Spacing along the aligned direction and "diameter" across it.

        Returns
        -------
        x, y : ndarray
            Same shape as ``k``.
        """
        kk = np.asarray(k, dtype=np.float64)
        ll = np.asarray(l, dtype=np.float64)
        p0, p1 = float(pitch[0]), float(pitch[1])
        if self.kind is LatticeKind.HEX_ROWS:
            even = (np.asarray(l) % 2 == 0).astype(np.float64)
            return p0 * (kk + 0.5 * even), p1 * ll * SIN60
        if self.kind is LatticeKind.HEX_COLS:
            even = (np.asarray(k) % 2 == 0).astype(np.float64)
            return p0 * kk * SIN60, p1 * (ll + 0.5 * even)
        return p0 * kk, p1 * ll

    def all_indices(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Every (k, l) of the lattice, row-major (linear index i = l·width + k)."""
        ll, kk = np.divmod(np.arange(self.size, dtype=np.int64), self.width)
        return kk, ll

    def contains(self, k: ArrayLike, l: ArrayLike) -> NDArray[np.bool_]:
        kk, ll = np.asarray(k), np.asarray(l)
        return (kk >= 0) & (kk < self.width) & (ll >= 0) & (ll < self.height)

    def nearest_index(
        self, x: ArrayLike, y: ArrayLike, pitch: tuple[float, float]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Index of the lattice node nearest to lattice-frame positions (x, y) (unbounded)."""
        xx = np.asarray(x, dtype=np.float64)
        yy = np.asarray(y, dtype=np.float64)
        p0, p1 = float(pitch[0]), float(pitch[1])
        if self.kind is LatticeKind.ORTHOGONAL:
            return np.rint(xx / p0).astype(np.int64), np.rint(yy / p1).astype(np.int64)
        # Hexagonal: test the candidate rows (or columns) around the estimate.
        best_k = np.zeros(xx.shape, dtype=np.int64)
        best_l = np.zeros(xx.shape, dtype=np.int64)
        best_d = np.full(xx.shape, np.inf)
        if self.kind is LatticeKind.HEX_ROWS:
            l0 = np.floor(yy / (p1 * SIN60)).astype(np.int64)
            for dl in (0, 1):
                cand_l = l0 + dl
                shift = 0.5 * (cand_l % 2 == 0)
                cand_k = np.rint(xx / p0 - shift).astype(np.int64)
                gx, gy = self.positions(cand_k, cand_l, pitch)
                d = (gx - xx) ** 2 + (gy - yy) ** 2
                better = d < best_d
                best_k, best_l, best_d = (
                    np.where(better, cand_k, best_k),
                    np.where(better, cand_l, best_l),
                    np.where(better, d, best_d),
                )
        else:
            k0 = np.floor(xx / (p0 * SIN60)).astype(np.int64)
            for dk in (0, 1):
                cand_k = k0 + dk
                shift = 0.5 * (cand_k % 2 == 0)
                cand_l = np.rint(yy / p1 - shift).astype(np.int64)
                gx, gy = self.positions(cand_k, cand_l, pitch)
                d = (gx - xx) ** 2 + (gy - yy) ** 2
                better = d < best_d
                best_k, best_l, best_d = (
                    np.where(better, cand_k, best_k),
                    np.where(better, cand_l, best_l),
                    np.where(better, d, best_d),
                )
        return best_k, best_l


@dataclass(frozen=True)
class TypeLayout:
    """Periodic micro-lens type layout: ``type(k, l) = (k + row_shift[l % len]) % n_types``.

    ``n_types = 0`` means pinhole micro-lenses (the paper's NOUR baseline): every type is −1.
    """

    n_types: int
    row_shift: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if self.n_types < 0:
            raise ModelError(f"number of micro-lens types must be >= 0, got {self.n_types}")
        if len(self.row_shift) == 0:
            raise ModelError("type layout row_shift must not be empty")

    @classmethod
    def raytrix(cls, n_types: int) -> TypeLayout:
        """The libpleno/Raytrix layout ``((l mod (I−1)) + k) mod I`` (reference §2.3)."""
        if n_types <= 2:
            return cls(n_types, (0,))
        return cls(n_types, tuple(range(n_types - 1)))

    def type_of(self, k: ArrayLike, l: ArrayLike) -> NDArray[np.int64]:
        kk = np.asarray(k, dtype=np.int64)
        ll = np.asarray(l, dtype=np.int64)
        if self.n_types == 0:
            return np.full(np.broadcast(kk, ll).shape, -1, dtype=np.int64)
        shift = np.asarray(self.row_shift, dtype=np.int64)[ll % len(self.row_shift)]
        return (kk + shift) % self.n_types
