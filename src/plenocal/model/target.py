"""The calibration target: a planar checkerboard in the world frame (docs/conventions.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.errors import ModelError


@dataclass(frozen=True)
class Checkerboard:
    """A checkerboard with ``columns × rows`` inner corners (nodes) of side ``square_mm``.

    Node ``n = row · columns + col`` lies at ``(square_mm·col, square_mm·row, 0)`` in the world
    frame. The printed board has one extra square on every side (``columns + 1`` by ``rows + 1``
    squares); ``border_mm`` of white margin surrounds it.
    """

    columns: int
    rows: int
    square_mm: float
    border_mm: float = 0.0

    def __post_init__(self) -> None:
        if self.columns < 2 or self.rows < 2:
            raise ModelError(f"checkerboard needs >= 2x2 nodes, got {self.columns}x{self.rows}")
        if not self.square_mm > 0:
            raise ModelError(f"checkerboard square_mm must be > 0, got {self.square_mm}")

    @property
    def n_nodes(self) -> int:
        return self.columns * self.rows

    def covers(self, local_xy: ArrayLike, *, margin_squares: float,
               node_extent: tuple[int, int, int, int] | None = None) -> NDArray[np.bool_]:
        """Which board-frame points (N, ≥ 2: x, y first, mm) lie within the nodes' extent widened by
        ``margin_squares`` on every side; ``node_extent`` (first column, last column, first row,
        last row) takes those nodes' extent instead of all of them (a frame linked with relative
        node ids: only its linked nodes are known to lie on the printed board)."""
        xy = np.asarray(local_xy, dtype=np.float64)
        c0, c1, r0, r1 = node_extent if node_extent is not None else (0, self.columns - 1, 0, self.rows - 1)
        sq, m = self.square_mm, margin_squares * self.square_mm
        return (xy[:, 0] >= c0 * sq - m) & (xy[:, 0] <= c1 * sq + m) & (xy[:, 1] >= r0 * sq - m) & (xy[:, 1] <= r1 * sq + m)

    def node_points(self, nodes: ArrayLike | None = None) -> NDArray[np.float64]:
        """World coordinates of nodes, shape (N, 3) (all nodes when ``nodes`` is None)."""
        n = np.arange(self.n_nodes) if nodes is None else np.asarray(nodes, dtype=np.int64)
        row, col = np.divmod(n, self.columns)
        return np.stack(
            [self.square_mm * col, self.square_mm * row, np.zeros(n.shape)], axis=-1
        ).astype(np.float64)
