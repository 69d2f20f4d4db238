"""Linking cluster barycentres to board nodes without assuming the board's corners are seen.

Synthetic barycentres: the pinhole projection of the nodes of an 8 × 5 board (20 mm) through the
r12-b preset's barycentre pinhole (focal (D + d)/s ≈ 9540 px, 4080 × 3068 px), with 3 px of noise
(the PRISM r12-b barycentres are 3–5 px from the distortion-free pinhole).
"""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.extrinsics import pinhole_matrix, project_pinhole
from plenocal.calib.linking import SYMMETRIES, board_placements, board_sites, lattice_coordinates
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.target import Checkerboard
from plenocal.sim.presets import preset

NOISE_PX = 3.0


@pytest.fixture(scope="module")
def camera():
    return preset("r12-b").camera


@pytest.fixture(scope="module")
def board():
    return Checkerboard(8, 5, 20.0)


def board_pose(board: Checkerboard, *, z: float, tilt_deg: float = 0.0, tilt_axis_deg: float = 0.0,
               roll_deg: float = 0.0, centre_xy: tuple[float, float] = (0.0, 0.0)) -> Pose:
    """cam_from_world: the board's centre at (x, y, z) mm, tilted about an in-plane axis, then rolled."""
    a = np.radians(tilt_axis_deg)
    tilt = rodrigues(np.radians(tilt_deg) * np.array([np.cos(a), np.sin(a), 0.0]))
    R = rodrigues(np.radians(roll_deg) * np.array([0.0, 0.0, 1.0])) @ tilt
    centre_board = np.array([(board.columns - 1) * board.square_mm / 2, (board.rows - 1) * board.square_mm / 2, 0.0])
    return Pose(R, np.array([*centre_xy, z]) - R @ centre_board)


def barycentres(camera, board, pose, *, seed: int, drop=()) -> tuple[np.ndarray, np.ndarray]:
    """(true node of each barycentre, barycentres (C, 2)), nodes in ``drop`` removed, rows shuffled."""
    rng = np.random.default_rng(seed)
    nodes = np.setdiff1d(np.arange(board.n_nodes), np.asarray(drop, dtype=np.int64))
    uv = project_pinhole(camera, pose, board.node_points(nodes)) + rng.normal(0.0, NOISE_PX, (nodes.size, 2))
    order = rng.permutation(nodes.size)
    return nodes[order], uv[order]


def column(board, c):
    return np.arange(board.rows) * board.columns + c


POSES = {
    "fronto": dict(z=500.0),
    "tilted": dict(z=450.0, tilt_deg=35.0, tilt_axis_deg=20.0, roll_deg=8.0, centre_xy=(10.0, -5.0)),
    "steep": dict(z=600.0, tilt_deg=55.0, tilt_axis_deg=45.0, roll_deg=-20.0),
    "rolled": dict(z=650.0, tilt_deg=15.0, tilt_axis_deg=100.0, roll_deg=40.0),
}


# --- the lattice ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(POSES))
def test_lattice_coordinates_follow_the_board_axes(camera, board, name):
    """Every barycentre gets the lattice site of its node, up to a lattice symmetry and shift
    (the board's own axes even when a diagonal step is the shorter one, "steep")."""
    truth, uv = barycentres(camera, board, board_pose(board, **POSES[name]), seed=1)
    lat = lattice_coordinates(uv)
    assert lat.ok and lat.on_lattice.all()
    cr = np.stack([truth % board.columns, truth // board.columns], axis=-1)
    assert any(
        np.array_equal(lat.ij - lat.ij.min(axis=0), (cr @ T.T) - (cr @ T.T).min(axis=0)) for T in SYMMETRIES
    )
    assert sorted(lat.extent) == sorted((board.columns, board.rows))
    # The homography puts each site within noise of its barycentre.
    assert np.max(np.hypot(*(lat.sites_to_image(lat.ij.astype(float)) - uv).T)) < 5 * NOISE_PX


@pytest.mark.parametrize("name", sorted(POSES))
def test_lattice_axes_of_a_diagonally_cut_board(camera, board, name):
    """A triangle of nodes (a board cut diagonally): a sheared basis holds it on as few lines as
    the board's axes; with the camera matrix, the axes are those of a square grid."""
    row, col = np.divmod(np.arange(board.n_nodes), board.columns)
    truth, uv = barycentres(camera, board, board_pose(board, **POSES[name]), seed=17, drop=np.flatnonzero(col + 2 * row > 8))
    lat = lattice_coordinates(uv, camera_matrix=pinhole_matrix(camera))
    assert lat.ok and lat.on_lattice.all()
    cr = np.stack([truth % board.columns, truth // board.columns], axis=-1)
    assert any(
        np.array_equal(lat.ij - lat.ij.min(axis=0), (cr @ T.T) - (cr @ T.T).min(axis=0)) for T in SYMMETRIES
    )


def test_lattice_bridges_a_missing_column(camera, board):
    _, uv = barycentres(camera, board, board_pose(board, **POSES["tilted"]), seed=2, drop=column(board, 3))
    lat = lattice_coordinates(uv)
    assert lat.on_lattice.all() and sorted(lat.extent) == sorted((board.columns, board.rows))


def test_lattice_needs_two_directions():
    line = np.stack([np.arange(8) * 300.0, np.full(8, 1000.0)], axis=-1)
    lat = lattice_coordinates(line)
    assert not lat.ok and "along another step" in lat.reason
    assert not lattice_coordinates(line[:3]).ok


def test_board_placements_and_sites_round_trip(board):
    ij = np.array([[i, j] for i in range(5) for j in range(5)])  # a 5 × 5 patch of the 8 × 5 board
    nodes, sym, off = board_placements(ij, columns=board.columns, rows=board.rows)
    assert np.all((nodes >= 0).sum(axis=1) >= 1)
    # 8 symmetries × 4 column offsets × 1 row offset link all 25 points, each differently.
    full = np.all(nodes >= 0, axis=1)
    assert full.sum() == 32 and len({tuple(n) for n in nodes[full]}) == 32
    for p in range(len(nodes)):
        sites = board_sites(ij, int(sym[p]), off[p], columns=board.columns, rows=board.rows)
        on = nodes[p] >= 0
        np.testing.assert_array_equal(sites[nodes[p][on]], ij[on])
    # A complete 8 × 5 extent: only the symmetries that keep columns as columns link all.
    full = np.array([[i, j] for i in range(8) for j in range(5)])
    nodes, _, _ = board_placements(full, columns=8, rows=5, min_linked=30)
    assert np.all(nodes >= 0, axis=1).sum() == 4 and np.all((nodes >= 0).sum(axis=1) >= 30)
