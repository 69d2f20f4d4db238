"""Grid fit: every centre indexed correctly, pitch/offset/rotation recovered, for every lattice kind."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.errors import DataError
from plenocal.model import Lattice, LatticeKind
from plenocal.model.camera import MicroImageGrid
from plenocal.precalib.grid import fit_grid

GRIDS = [
    # The reference's fitted R12-A grid (full scale).
    MicroImageGrid(Lattice(LatticeKind.HEX_ROWS, 176, 152), (23.312549752933641, 23.313498208116211), -5.5276960199817039e-07, (-13.208877150299378, 4.7991151107867527)),
    MicroImageGrid(Lattice(LatticeKind.HEX_COLS, 150, 170), (23.3, 23.31), 0.002, (5.0, -3.0)),
    MicroImageGrid(Lattice(LatticeKind.ORTHOGONAL, 176, 132), (23.3, 23.31), -0.001, (8.0, 7.0)),
]


@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: g.lattice.kind.value)
def test_fit_grid_indexes_every_centre_and_recovers_the_grid(grid):
    k, l = grid.lattice.all_indices()
    c = grid.centres(k, l)
    r = 11.5
    vis = (c[:, 0] - r >= 0) & (c[:, 0] + r <= 4079) & (c[:, 1] - r >= 0) & (c[:, 1] + r <= 3067)
    rng = np.random.default_rng(3)
    noise = 0.05
    uv = c[vis] + rng.normal(0, noise, (vis.sum(), 2))
    perm = rng.permutation(len(uv))
    fit = fit_grid(uv[perm], grid.lattice, (3068, 4080))
    assert len(fit.uv) == vis.sum()
    # Map each fitted centre back to its true index.
    truth = {tuple(np.round(p, 9)): (a, b) for p, a, b in zip(uv, k[vis], l[vis], strict=False)}
    wrong = sum(truth[tuple(np.round(p, 9))] != (a, b) for p, a, b in zip(fit.uv, fit.k, fit.l, strict=False))
    assert wrong == 0
    assert fit.rms_px == pytest.approx(noise * np.sqrt(2), rel=0.05)
    np.testing.assert_allclose(fit.grid.pitch_px, grid.pitch_px, atol=0.005)
    np.testing.assert_allclose(fit.grid.offset_px, grid.offset_px, atol=0.01)
    assert fit.grid.rotation_rad == pytest.approx(grid.rotation_rad, abs=1e-6)


def test_outliers_are_rejected_and_counted():
    grid = GRIDS[2]
    k, l = grid.lattice.all_indices()
    c = grid.centres(k, l)
    vis = (c[:, 0] > 12) & (c[:, 0] < 4067) & (c[:, 1] > 12) & (c[:, 1] < 3055)
    uv = c[vis].copy()
    uv[::500] += 4.0  # 4 px off: a wrong centre
    fit = fit_grid(uv, grid.lattice, (3068, 4080))
    assert fit.n_rejected == len(uv[::500])
    assert fit.rms_px < 1e-6


def test_too_few_centres():
    with pytest.raises(DataError, match="only 3 micro-image centres detected"):
        fit_grid(np.zeros((3, 2)), GRIDS[0].lattice, (100, 100))
