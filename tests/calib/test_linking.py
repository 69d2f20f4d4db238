"""Linking cluster barycentres to board nodes without assuming the board's corners are seen.

Synthetic barycentres: the pinhole projection of the nodes of an 8 × 5 board (20 mm) through the
r12-b preset's barycentre pinhole (focal (D + d)/s ≈ 9540 px, 4080 × 3068 px), with 3 px of noise
(the PRISM r12-b barycentres are 3–5 px from the distortion-free pinhole).
"""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.extrinsics import initial_extrinsics, link_barycentres, pinhole_matrix, project_pinhole
from plenocal.calib.linking import SYMMETRIES, board_placements, board_sites, grid_motion, lattice_coordinates
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.observations import BapFeatures
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


# --- linking -------------------------------------------------------------------------------------


def assert_links(camera, board, truth, uv, **kw):
    link = link_barycentres(camera, board, uv, **kw)
    assert link.ok, link.reason
    np.testing.assert_array_equal(link.node, truth)
    return link


@pytest.mark.parametrize("name", sorted(POSES))
def test_complete_board(camera, board, name):
    truth, uv = barycentres(camera, board, board_pose(board, **POSES[name]), seed=3)
    link = assert_links(camera, board, truth, uv)
    # 180° relabelling fits as well; the upright convention decided, and says so.
    assert "upright convention" in link.note
    assert link.pose is not None and link.pose.rotation[:, 2] @ link.pose.translation > 0


@pytest.mark.parametrize("name", sorted(POSES))
def test_two_row_board(camera, name):
    """A board two nodes high (the demo's 4 × 2): no node has neighbours both ways along both
    steps, and the lattice's perspective is undetermined (affine fit, fewest-lines basis)."""
    board = Checkerboard(4, 2, 20.0)
    truth, uv = barycentres(camera, board, board_pose(board, **POSES[name]), seed=18)
    assert_links(camera, board, truth, uv, min_linked_nodes=6)


@pytest.mark.parametrize("drop", [[3, 4], [0, 7], [0, 1], [0, 3]])
@pytest.mark.parametrize("name", ["fronto", "rolled"])
def test_partial_two_row_board(camera, name, drop):
    """Six of the demo's 4 × 2 nodes: a sheared basis holds them on as few lines as the board's
    axes (or fewer), and the lattice is two lines thick; its steps in the image plane tell the
    square one (the demo lost 3 of 16 calibration frames this way)."""
    board = Checkerboard(4, 2, 20.0)
    truth, uv = barycentres(camera, board, board_pose(board, **POSES[name]), seed=18, drop=drop)
    assert_links(camera, board, truth, uv)


def test_thin_lattice_too_foreshortened_to_tell_its_axes_is_reported(camera):
    """Seen at 55° (POSES["steep"]) the square grid's steps are no longer square in the image
    plane: the ambiguity is reported, not guessed."""
    board = Checkerboard(4, 2, 20.0)
    _, uv = barycentres(camera, board, board_pose(board, **POSES["steep"]), seed=18, drop=[0, 1])
    link = link_barycentres(camera, board, uv)
    assert not link.ok and "ambiguous lattice axes" in link.reason and np.all(link.node == -1)


@pytest.mark.parametrize("corner", [0, 7, 32, 39])
def test_missing_corner_node(camera, board, corner):
    truth, uv = barycentres(camera, board, board_pose(board, **POSES["tilted"]), seed=4, drop=[corner])
    assert_links(camera, board, truth, uv)


def test_missing_interior_column_and_nodes(camera, board):
    drop = [*column(board, 4), 9, 22, 30]
    truth, uv = barycentres(camera, board, board_pose(board, **POSES["steep"]), seed=5, drop=drop)
    assert_links(camera, board, truth, uv)


def test_partial_board_cut_obliquely_by_the_image_border(camera, board):
    """Column 7 partly beyond the image border and nodes missing inside; rows 0 and 1 still span
    the board, so the labelling is pinned."""
    pose = board_pose(board, z=430.0, tilt_deg=12.0, tilt_axis_deg=30.0, roll_deg=-6.0, centre_xy=(25.0, 12.0))
    uv_all = project_pinhole(camera, pose, board.node_points())
    outside = np.flatnonzero((uv_all[:, 0] > camera.sensor.width_px) | (uv_all[:, 1] > camera.sensor.height_px))
    np.testing.assert_array_equal(outside, [23, 31, 39])  # the premise: column 7 partly out
    truth, uv = barycentres(camera, board, pose, seed=6, drop=[*outside, 10, 27])
    assert_links(camera, board, truth, uv)


def cut_board_pose(board, centre_x_mm):
    """A board whose column 7 is beyond the right image border (centre_x ≈ 28 mm at 420 mm)."""
    return board_pose(board, z=420.0, tilt_deg=10.0, tilt_axis_deg=80.0, roll_deg=3.0, centre_xy=(centre_x_mm, 0.0))


def test_partial_board_cut_by_the_image_edge(camera, board):
    """Column 7 beyond the right image border, nodes missing inside. The barycentres are those of
    a board whose column 0 was not detected, shifted by a column: reported as ambiguous; linked
    when absent edge lines count as evidence (the shifted labelling leaves a column undetected
    well inside the image)."""
    pose = cut_board_pose(board, 28.0)
    u_all = project_pinhole(camera, pose, board.node_points())[:, 0]
    outside = np.flatnonzero(u_all > camera.sensor.width_px)
    np.testing.assert_array_equal(outside, column(board, 7))  # the premise: column 7 out,
    u_left = project_pinhole(camera, pose, np.array([[-board.square_mm, 40.0, 0.0]]))[0, 0]
    assert u_left > 500  # and a column left of column 0 well inside the image
    truth, uv = barycentres(camera, board, pose, seed=6, drop=[*outside, 10, 27])
    link = link_barycentres(camera, board, uv)
    assert not link.ok and "ambiguous" in link.reason and "7 × 5" in link.reason and "2 offsets" in link.reason
    link = assert_links(camera, board, truth, uv, absent_edge_lines_are_evidence=True)
    assert "in view undetected" in link.note


def test_partial_board_pinned_by_a_cluster_beyond_its_edge(camera, board):
    """The board cut by the image border at the right, and a spurious cluster on the lattice one
    step left of column 0 (an outer corner of the squares): taking it in as column 0 would leave
    the rest of that column undetected in view, so column 0 is where the nodes start."""
    pose = cut_board_pose(board, 28.0)
    truth, uv = barycentres(camera, board, pose, seed=16, drop=column(board, 7))
    outer = project_pinhole(camera, pose, np.array([[-board.square_mm, 2 * board.square_mm, 0.0]]))
    assert_links(camera, board, np.r_[truth, -1], np.vstack([uv, outer]))


def test_missing_edge_column_in_view_is_ambiguous(camera, board):
    """The whole board in view but column 0 undetected: the 7 × 5 nodes fit columns 0–6 or 1–7
    with identical barycentres. Reported, not guessed, even when absent edge lines count."""
    _, uv = barycentres(camera, board, board_pose(board, z=550.0, tilt_deg=20.0, roll_deg=5.0), seed=7, drop=column(board, 0))
    for evidence in (False, True):
        link = link_barycentres(camera, board, uv, absent_edge_lines_are_evidence=evidence)
        assert not link.ok and "ambiguous" in link.reason and "7 × 5" in link.reason and "2 offsets" in link.reason
        assert np.all(link.node == -1) and link.pose is None


def test_edge_column_lost_near_the_image_border_is_ambiguous(camera, board):
    """Column 0 lost inside the image (e.g. at the focus plane) while column 7 is near the right
    border: the same barycentres as a board cut by the border. Reported by default; counting
    absent edge lines takes it for the cut board, one column off."""
    pose = cut_board_pose(board, 18.0)
    sq = board.square_mm
    u_out = project_pinhole(camera, pose, np.array([[8 * sq, r * sq, 0.0] for r in range(board.rows)]))[:, 0]
    u_in = project_pinhole(camera, pose, board.node_points(column(board, 0)))[:, 0]
    assert np.all(u_out > camera.sensor.width_px) and np.all(u_in > 500)  # the premise
    truth, uv = barycentres(camera, board, pose, seed=15, drop=column(board, 0))
    link = link_barycentres(camera, board, uv)
    assert not link.ok and "ambiguous" in link.reason
    shifted = link_barycentres(camera, board, uv, absent_edge_lines_are_evidence=True)
    np.testing.assert_array_equal(shifted.node, truth - 1)


def test_180_degree_symmetric_view(camera, board):
    """Head-on, the barycentres of the board and of the board turned by 180° in its plane are the
    same: the upright convention labels node 0 top-left in both (the second is unknowable)."""
    truth, uv = barycentres(camera, board, board_pose(board, z=500.0), seed=8)
    assert_links(camera, board, truth, uv)
    turned, uv_turned = barycentres(camera, board, board_pose(board, z=500.0, roll_deg=180.0), seed=8)
    link = link_barycentres(camera, board, uv_turned)
    np.testing.assert_array_equal(link.node, board.n_nodes - 1 - turned)
    assert "upright convention" in link.note


@pytest.mark.parametrize(("columns", "rows", "roll"), [(8, 5, 90.0), (8, 5, -85.0), (5, 5, 40.0)])
def test_rolled_symmetric_view_is_ambiguous(camera, columns, rows, roll):
    """Rolled so that no labelling is clearly the upright one: reported, not linked."""
    board = Checkerboard(columns, rows, 20.0)
    _, uv = barycentres(camera, board, board_pose(board, z=500.0, tilt_deg=10.0, roll_deg=roll), seed=9)
    link = link_barycentres(camera, board, uv)
    assert not link.ok and "ambiguous" in link.reason and "|roll|" in link.reason
    assert np.all(link.node == -1)


def test_spurious_clusters_are_not_linked(camera, board):
    """Off-lattice clusters (between nodes, outside the board) and one on the lattice beyond the
    board (an outer corner of the squares) stay unlinked; every node keeps its id."""
    pose = board_pose(board, **POSES["tilted"])
    truth, uv = barycentres(camera, board, pose, seed=10)
    sq = board.square_mm
    spurious_world = np.array([
        [0.5 * sq, 0.5 * sq, 0.0],  # a square's centre
        [3.4 * sq, 2.0 * sq, 0.0],  # 0.4 of a step from node 19
        [9.5 * sq, -1.5 * sq, 0.0],  # off the board
        [-sq, 2 * sq, 0.0],  # on the lattice, one step left of node 16
    ])
    uv_all = np.vstack([uv, project_pinhole(camera, pose, spurious_world)])
    link = assert_links(camera, board, np.r_[truth, [-1, -1, -1, -1]], uv_all)
    assert np.all(link.node[-4:] == -1)


def test_too_few_nodes_are_reported(camera, board):
    plus = [1, 8, 9, 10, 17]  # a lattice, but 5 points leave PnP nothing to check the labels with
    _, uv = barycentres(camera, board, board_pose(board, z=500.0), seed=11, drop=np.setdiff1d(np.arange(40), plus))
    link = link_barycentres(camera, board, uv)
    assert not link.ok and "only 5 barycentres" in link.reason
    _, uv = barycentres(camera, board, board_pose(board, z=500.0), seed=11, drop=np.arange(8, 40))  # row 0 only
    link = link_barycentres(camera, board, uv)
    assert not link.ok and "along another step" in link.reason


# --- through initial_extrinsics ------------------------------------------------------------------


def features(frames: dict[int, tuple[np.ndarray, np.ndarray]], *, per_cluster: int = 5, seed: int = 0) -> BapFeatures:
    """Detector-like features: ``per_cluster`` around each barycentre (zero-mean offsets), cluster
    ids unrelated to nodes, node −1."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list[np.ndarray]] = {c: [] for c in ("frame", "k", "l", "u", "v", "rho", "node", "cluster")}
    for f, (_, uv) in frames.items():
        n = len(uv)
        off = rng.normal(0.0, 20.0, (n, per_cluster, 2))
        off -= off.mean(axis=1, keepdims=True)
        pts = (uv[:, None, :] + off).reshape(-1, 2)
        cols["frame"].append(np.full(len(pts), f))
        cols["k"].append(np.zeros(len(pts), dtype=int))
        cols["l"].append(np.zeros(len(pts), dtype=int))
        cols["u"].append(pts[:, 0])
        cols["v"].append(pts[:, 1])
        cols["rho"].append(np.full(len(pts), 3.0))
        cols["node"].append(np.full(len(pts), -1))
        cols["cluster"].append(np.repeat(rng.permutation(1000)[:n] + 17, per_cluster))
    return BapFeatures(**{c: np.concatenate(v) for c, v in cols.items()})


def test_initial_extrinsics_reports_unlinkable_frames(camera, board):
    frames = {
        0: barycentres(camera, board, board_pose(board, **POSES["tilted"]), seed=12, drop=[0, 13]),
        1: barycentres(camera, board, board_pose(board, z=550.0, tilt_deg=20.0), seed=13, drop=column(board, 0)),
        2: barycentres(camera, board, board_pose(board, **POSES["steep"]), seed=14, drop=column(board, 5)),
    }
    bap = features(frames)
    ext = initial_extrinsics(camera, bap, board)
    assert sorted(ext.poses) == [0, 2]
    doc = ext.to_dict()
    rec = {r["frame"]: r for r in doc["frames"]}
    assert rec[1]["ok"] is False and "ambiguous" in rec[1]["reason"]
    assert "upright convention" in rec[0]["note"]
    assert ext.bap is not None
    # Linked frames: each feature's node is its cluster's true node; the ambiguous frame: none.
    for f, (truth, _) in frames.items():
        got = ext.bap.node[ext.bap.frame == f].reshape(-1, 5)[:, 0]
        np.testing.assert_array_equal(got, truth if f != 1 else -1)


# --- the board's printed extent in the image -------------------------------------------------------


class BoardView:
    """The scene through the barycentre pinhole: the board's squares (black 0.05, white 1 relative
    to the white), a white border ``border_mm`` wide, a black background, ``noise`` per sample;
    NaN outside the image and where the board's x is outside ``lit_board_x`` (mm). Stands in for
    :class:`plenocal.detect.view.SceneView`."""

    def __init__(self, camera, board, pose, *, border_mm=20.0, noise=0.03, lit_board_x=None, seed=0):
        self.Kinv = np.linalg.inv(pinhole_matrix(camera))
        self.board, self.pose, self.border = board, pose, border_mm
        self.size = (camera.sensor.width_px, camera.sensor.height_px)
        self.noise, self.lit_x, self.rng = noise, lit_board_x, np.random.default_rng(seed)

    def covers(self, uv):
        """Where the board's plate (squares and border) is seen."""
        x, y, lam = self._board_xy(uv)
        s, C, Rw, b = self.board.square_mm, self.board.columns, self.board.rows, self.border
        return (lam > 0) & (x >= -s - b) & (x < C * s + b) & (y >= -s - b) & (y < Rw * s + b)

    def _board_xy(self, uv):
        uv = np.asarray(uv, dtype=np.float64)
        d = np.einsum("ij,...j->...i", self.Kinv, np.concatenate([uv, np.ones((*uv.shape[:-1], 1))], axis=-1))
        R, t = self.pose.rotation, self.pose.translation
        lam = (R[:, 2] @ t) / (d @ R[:, 2])
        xw = np.einsum("ji,...j->...i", R, lam[..., None] * d - t)
        return xw[..., 0], xw[..., 1], lam

    def sample(self, uv):
        uv = np.asarray(uv, dtype=np.float64)
        d = np.einsum("ij,...j->...i", self.Kinv, np.concatenate([uv, np.ones((*uv.shape[:-1], 1))], axis=-1))
        R, t = self.pose.rotation, self.pose.translation
        lam = (R[:, 2] @ t) / (d @ R[:, 2])
        xw = np.einsum("ji,...j->...i", R, lam[..., None] * d - t)
        s, C, Rw = self.board.square_mm, self.board.columns, self.board.rows
        x, y = xw[..., 0], xw[..., 1]
        pattern = (x >= -s) & (x < C * s) & (y >= -s) & (y < Rw * s)
        border = (x >= -s - self.border) & (x < C * s + self.border) & (y >= -s - self.border) & (y < Rw * s + self.border)
        black = (np.floor(x / s) + np.floor(y / s)) % 2 == 0
        val = np.where(pattern, np.where(black, 0.05, 1.0), np.where(border, 1.0, 0.0))
        val = val + self.rng.normal(0.0, self.noise, val.shape)
        W, H = self.size
        out = (uv[..., 0] < 0) | (uv[..., 0] > W - 1) | (uv[..., 1] < 0) | (uv[..., 1] > H - 1) | (lam <= 0)
        if self.lit_x is not None:
            out |= (x < self.lit_x[0]) | (x > self.lit_x[1])
        return np.where(out, np.nan, val)


def test_missing_edge_column_in_view_is_decided_by_the_image(camera, board):
    """Column 0 undetected although the whole board is in view: from the barycentres alone the
    7 × 5 nodes fit columns 0–6 or 1–7; the image shows checker squares where column 0's squares
    are and the border beyond them, so the nodes are columns 1–7."""
    pose = board_pose(board, z=550.0, tilt_deg=20.0, roll_deg=5.0)
    truth, uv = barycentres(camera, board, pose, seed=7, drop=column(board, 0))
    link = assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose))
    assert "printed extent" in link.note


def test_partial_board_cut_by_the_image_edge_is_decided_by_the_image(camera, board):
    """Column 7 beyond the right image border (the barycentres of a board whose column 0 was
    lost, shifted): the border and background left of column 0's squares decide."""
    pose = cut_board_pose(board, 28.0)
    truth, uv = barycentres(camera, board, pose, seed=6, drop=[*column(board, 7), 10, 27])
    assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose))


def test_edge_column_lost_near_the_image_border_is_decided_by_the_image(camera, board):
    """Column 0 lost inside the image while column 7 is near the right border: counting absent
    edge lines takes it for the cut board one column off; the image does not."""
    pose = cut_board_pose(board, 18.0)
    truth, uv = barycentres(camera, board, pose, seed=15, drop=column(board, 0))
    assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose))
    assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose, border_mm=0.0), absent_edge_lines_are_evidence=True)


def test_spurious_clusters_where_the_pattern_meets_the_border_are_left_off(camera, board):
    """A column lost at the board's edge and clusters on the lattice one step beyond the other
    edges (the L-junctions where the outer squares meet the white border): the image puts the
    pattern where it is and leaves them off the board."""
    pose = board_pose(board, **POSES["tilted"])
    truth, uv = barycentres(camera, board, pose, seed=10, drop=column(board, 7))
    sq = board.square_mm
    beyond = project_pinhole(camera, pose, np.array([[-sq, 2 * sq, 0.0], [3 * sq, -sq, 0.0], [5 * sq, 5 * sq, 0.0]]))
    link = assert_links(camera, board, np.r_[truth, -1, -1, -1], np.vstack([uv, beyond]), view=BoardView(camera, board, pose))
    assert np.all(link.node[-3:] == -1)


def test_unseen_edge_stays_ambiguous_where_the_image_is_dark(camera, board):
    """The same missing column 0, but the image is unlit beyond column 0's line and beyond the
    squares right of column 7 (outside an image circle): the two placements differ only there,
    the image cannot tell, and the frame is reported."""
    pose = board_pose(board, z=550.0, tilt_deg=20.0, roll_deg=5.0)
    _, uv = barycentres(camera, board, pose, seed=7, drop=column(board, 0))
    sq = board.square_mm
    link = link_barycentres(camera, board, uv, view=BoardView(camera, board, pose, lit_board_x=(0.0, board.columns * sq)))
    assert not link.ok and "ambiguous" in link.reason and "2 offsets" in link.reason


def test_180_degree_symmetric_view_with_the_image(camera, board):
    """The image does not tell a board from its 180° turn when its pattern is the same both ways
    round; the upright convention still decides, as without the image."""
    truth, uv = barycentres(camera, board, board_pose(board, z=500.0), seed=8)
    link = assert_links(camera, board, truth, uv, view=BoardView(camera, board, board_pose(board, z=500.0)))
    assert "upright convention" in link.note


@pytest.mark.parametrize("centre_x_mm", [100.0, 120.0, 140.0])
def test_partial_views_of_a_long_board_are_decided_by_the_image(camera, centre_x_mm):
    """6, 5 and 4 of a 9 × 5 board's columns in view (the rest beyond the image border): the
    barycentres fit several placements equally; the image leaves the right one, and says the
    image decided (plenocal detect then links the frame although it sees under 60 % of the
    nodes)."""
    board = Checkerboard(9, 5, 20.0)
    pose = board_pose(board, z=550.0, tilt_deg=15.0, tilt_axis_deg=80.0, roll_deg=2.0, centre_xy=(centre_x_mm, 0.0))
    uv_all = project_pinhole(camera, pose, board.node_points())
    inside = (uv_all[:, 0] >= 0) & (uv_all[:, 0] < camera.sensor.width_px) & (uv_all[:, 1] >= 0) & (uv_all[:, 1] < camera.sensor.height_px)
    truth, uv = barycentres(camera, board, pose, seed=3, drop=np.flatnonzero(~inside))
    assert 20 <= len(truth) <= 30
    assert not link_barycentres(camera, board, uv).ok
    link = link_barycentres(camera, board, uv, view=BoardView(camera, board, pose, lit_board_x=(-1e9, -1e9)))
    assert not link.ok and not link.image_decided  # no light, no decision
    link = assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose))
    assert link.image_decided


def test_an_unlit_view_decides_nothing(camera, board):
    """A view with no light anywhere: linking is what the barycentres say, and the image is not
    said to have decided."""
    pose = board_pose(board, **POSES["tilted"])
    truth, uv = barycentres(camera, board, pose, seed=3)
    link = assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose, lit_board_x=(1e9, 1e9)))
    assert not link.image_decided and "printed extent" not in link.note


def test_board_symmetric_nodes():
    from plenocal.calib.extrinsics import board_symmetric_nodes

    nodes = np.array([0, 1, 3, -1])
    images = board_symmetric_nodes(nodes, columns=4, rows=2)
    assert len(images) == 4
    np.testing.assert_array_equal(images[0], nodes)
    np.testing.assert_array_equal(images[1], [7, 6, 4, -1])  # 180°
    np.testing.assert_array_equal(images[2], [3, 2, 0, -1])  # columns mirrored
    assert len(board_symmetric_nodes(nodes, columns=3, rows=3)) == 8


def test_a_turned_placement_running_out_of_the_image_leaves_the_image_undecided(camera):
    """Closer (450 mm), the board's bottom ring is beyond the image: a placement turned by 90°
    that runs the 9 columns down out of view explains the visible cells as well. The upright
    convention still links the frame right, but the image is not said to have decided (so
    plenocal detect keeps its 60 %-of-the-nodes rule for it)."""
    board = Checkerboard(9, 5, 20.0)
    pose = board_pose(board, z=450.0, tilt_deg=15.0, tilt_axis_deg=80.0, roll_deg=2.0, centre_xy=(100.0, 0.0))
    uv_all = project_pinhole(camera, pose, board.node_points())
    inside = (uv_all[:, 0] >= 0) & (uv_all[:, 0] < camera.sensor.width_px) & (uv_all[:, 1] >= 0) & (uv_all[:, 1] < camera.sensor.height_px)
    truth, uv = barycentres(camera, board, pose, seed=3, drop=np.flatnonzero(~inside))
    link = assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose))
    assert not link.image_decided and "88°" in link.note


@pytest.mark.parametrize(("centre_xy", "roll_deg"), [((72.5, -50.0), 0.0), ((74.0, -49.0), 2.0)])
def test_a_board_corner_cut_by_two_image_edges_is_decided(camera, centre_xy, roll_deg):
    """A 9 × 5 board's nodes in columns 0–5 and rows 1–4, the image's top and right edges through
    the pattern (the telephoto set's frame 181): the image rules out every offset along the two
    edges it shows, but not the placements turned by 90° whose printed extent would lie beyond the
    image; those hold the 6 observed columns on the board's 5 rows, a line of detected corners
    off the board. The frame is said decided (plenocal detect links it with its 24 nodes)."""
    board = Checkerboard(9, 5, 20.0)
    pose = board_pose(board, z=450.0, tilt_deg=12.0, tilt_axis_deg=60.0, roll_deg=roll_deg, centre_xy=centre_xy)
    uv_all = project_pinhole(camera, pose, board.node_points())
    inside = (uv_all[:, 0] >= 0) & (uv_all[:, 0] < camera.sensor.width_px) & (uv_all[:, 1] >= 0) & (uv_all[:, 1] < camera.sensor.height_px)
    np.testing.assert_array_equal(np.flatnonzero(inside), [c + 9 * r for r in range(1, 5) for c in range(6)])  # the premise
    truth, uv = barycentres(camera, board, pose, seed=5, drop=np.flatnonzero(~inside))
    link = assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose))
    assert link.image_decided and "off the board" in link.note
    # Without the image nothing is decided (the offsets along the seen edges are open).
    assert not link_barycentres(camera, board, uv).ok


class TwoBoardView:
    """Two boards in the scene: the nearer one's plate (squares and border) hides the other."""

    def __init__(self, near: BoardView, far: BoardView):
        self.near, self.far = near, far

    def sample(self, uv):
        a, b = self.near.sample(uv), self.far.sample(uv)
        on_near = self.near.covers(uv)
        return np.where(on_near, a, b)


def test_a_second_board_in_view_is_left_unlinked(camera, board):
    """A second, smaller board (5 × 4 nodes, 15 mm, turned by 25°, farther) beside the 8 × 5 one,
    whose column 0 was not detected: its clusters are off the first board's lattice and stay
    unlinked, and the image still decides which edge of the first board is seen."""
    pose = board_pose(board, z=600.0, tilt_deg=10.0, roll_deg=3.0, centre_xy=(-40.0, 0.0))
    other = Checkerboard(5, 4, 15.0)
    pose2 = board_pose(other, z=750.0, tilt_deg=20.0, tilt_axis_deg=30.0, roll_deg=25.0, centre_xy=(150.0, 10.0))
    truth, uv = barycentres(camera, board, pose, seed=21, drop=column(board, 0))
    _, uv2 = barycentres(camera, other, pose2, seed=22)
    inside2 = (uv2[:, 0] > 0) & (uv2[:, 0] < camera.sensor.width_px) & (uv2[:, 1] > 0) & (uv2[:, 1] < camera.sensor.height_px)
    assert inside2.sum() >= 12  # the premise: the second board is in view
    view = TwoBoardView(BoardView(camera, board, pose), BoardView(camera, other, pose2, border_mm=10.0, seed=1))
    link = assert_links(camera, board, np.r_[truth, np.full(int(inside2.sum()), -1)], np.vstack([uv, uv2[inside2]]), view=view)
    assert "printed extent" in link.note


# --- lines of nodes unseen between the clusters (near the MLA's conjugate plane) ----------------


def sparse_rows_frame(camera):
    """A 9 × 5 board whose nodes formed clusters only on rows 0 and 2 (columns 4–6 and 0, 1, 4), as
    the full-scale r12-a board at 0.95 of the MLA's conjugate distance: the growth's nearest
    neighbour across is two rows away, so no basis of the barycentres' own lattice is square and
    a sheared one holds them on as few lines."""
    board = Checkerboard(9, 5, 20.0)
    pose = board_pose(board, z=520.0, tilt_deg=12.0, tilt_axis_deg=30.0, roll_deg=2.0, centre_xy=(5.0, 10.0))
    keep = np.array([4, 5, 6, 18, 19, 22])
    truth, uv = barycentres(camera, board, pose, seed=4, drop=np.setdiff1d(np.arange(board.n_nodes), keep))
    return board, pose, truth, uv


def test_nodes_two_rows_apart_leave_the_axes_ambiguous_without_the_image(camera):
    board, _pose, _truth, uv = sparse_rows_frame(camera)
    lat = lattice_coordinates(uv, camera_matrix=pinhole_matrix(camera))
    assert not lat.ok and "ambiguous lattice axes" in lat.reason
    # The square lattice of nodes through them, then their own lattice (fewest-lines, squarest basis).
    assert [a.index for a in lat.alternatives] == [2, 1, 1]
    assert lat.alternatives[0].square_error < 0.05 < 0.25 < min(a.square_error for a in lat.alternatives[1:])
    link = link_barycentres(camera, board, uv)
    assert not link.ok and "ambiguous lattice axes" in link.reason


def test_nodes_two_rows_apart_are_linked_by_the_image(camera):
    """The checker squares inside the clusters' hull alternate on the board's lattice of nodes, not
    on the barycentres' lattice (two squares per cell) nor a sheared one: the image takes the
    lattice holding the clusters every other row, then decides the placement as for any partial
    view, and the right nodes are linked."""
    board, pose, truth, uv = sparse_rows_frame(camera)
    link = assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose))
    assert "the image decided the lattice axes" in link.note and "index 2" in link.note
    assert link.image_decided


@pytest.mark.parametrize(("seed", "pose_kw"), [
    (4, dict(z=520.0, tilt_deg=12.0, tilt_axis_deg=30.0, roll_deg=8.0, centre_xy=(5.0, 10.0))),
    (5, dict(z=560.0, tilt_deg=25.0, tilt_axis_deg=120.0, roll_deg=-6.0)),
])
def test_a_sheared_sub_lattice_is_replaced_by_the_square_one_the_image_shows(camera, seed, pose_kw):
    """Clusters on rows 0, 2 and 4 a column apart from row to row, and two on row 1 (the telephoto
    set's frame 8 at 348 mm: nodes 1, 2, 9, 12, 18, 21, 37, 39–41): the growth steps two rows and
    a column across, and that sheared lattice is the unique one holding its clusters on the fewest
    lines (5 × 3), though not square; taken as it was, the 9 × 5 board held it in 116 placements
    and the row-1 clusters were off it. The image shows the board's square lattice of nodes (the
    growth's of index 2), the row-1 clusters join it, and the printed extent places it."""
    board = Checkerboard(9, 5, 20.0)
    pose = board_pose(board, **pose_kw)
    keep = np.array([1, 2, 9, 12, 18, 21, 37, 39, 40, 41])
    truth, uv = barycentres(camera, board, pose, seed=seed, drop=np.setdiff1d(np.arange(board.n_nodes), keep))
    lat = lattice_coordinates(uv, camera_matrix=pinhole_matrix(camera))
    assert lat.ok and lat.on_lattice.sum() == 8 and lat.alternatives  # the premise: sheared, two left off
    assert not link_barycentres(camera, board, uv).ok
    link = assert_links(camera, board, truth, uv, view=BoardView(camera, board, pose))
    assert "index 2" in link.note and link.image_decided


def test_a_lattice_the_barycentres_decided_stays_where_the_image_cannot_choose(camera):
    """The same sheared clusters in a view with nothing to see: the image chooses no lattice, and
    the frame is what the barycentres alone make of it (ambiguous here), not refused for the axes."""
    board = Checkerboard(9, 5, 20.0)
    keep = np.array([1, 2, 9, 12, 18, 21, 37, 39, 40, 41])
    pose = board_pose(board, z=520.0, tilt_deg=12.0, tilt_axis_deg=30.0, roll_deg=8.0, centre_xy=(5.0, 10.0))
    _, uv = barycentres(camera, board, pose, seed=4, drop=np.setdiff1d(np.arange(board.n_nodes), keep))
    link = link_barycentres(camera, board, uv, view=FlatView())
    assert not link.ok and "ambiguous labelling" in link.reason and "lattice axes" not in link.reason


class FlatView:
    """A featureless grey scene with noise: nothing for the image to decide."""

    def __init__(self, *, level=0.5, noise=0.03, seed=0):
        self.level, self.noise, self.rng = level, noise, np.random.default_rng(seed)

    def sample(self, uv):
        shape = np.asarray(uv).shape[:-1]
        return self.level + self.rng.normal(0.0, self.noise, shape)


@pytest.mark.parametrize("case", ["flat", "unlit"])
def test_axes_the_image_cannot_decide_are_refused(camera, case):
    board, pose, _truth, uv = sparse_rows_frame(camera)
    view = FlatView() if case == "flat" else BoardView(camera, board, pose, lit_board_x=(-1e9, -1e9))
    link = link_barycentres(camera, board, uv, view=view)
    assert not link.ok and np.all(link.node == -1)
    assert "ambiguous lattice axes" in link.reason
    assert ("does not decide" if case == "flat" else "cannot decide") in link.reason


class TallChecksView(BoardView):
    """Checks two squares tall (a pattern that is not the board's): the clusters' own lattice,
    whose step across is two rows, is the one whose cells alternate."""

    def sample(self, uv):
        x, y, lam = self._board_xy(uv)
        s = self.board.square_mm
        val = np.where((np.floor(x / s) + np.floor(y / (2 * s))) % 2 == 0, 0.05, 1.0) + self.rng.normal(0.0, self.noise, x.shape)
        W, H = self.size
        uv = np.asarray(uv, dtype=np.float64)
        out = (uv[..., 0] < 0) | (uv[..., 0] > W - 1) | (uv[..., 1] < 0) | (uv[..., 1] > H - 1) | (lam <= 0)
        return np.where(out, np.nan, val)


def test_axes_the_image_shows_not_square_are_refused(camera):
    """The image fits a lattice best that is not the board's square one: refused, not linked on it."""
    board, pose, _truth, uv = sparse_rows_frame(camera)
    link = link_barycentres(camera, board, uv, view=TallChecksView(camera, board, pose))
    assert not link.ok and np.all(link.node == -1)
    assert "not square" in link.reason


def test_an_ambiguous_calibration_frame_is_linked_with_relative_ids(camera, board):
    """A calibration frame's pose is free, so a labelling undecided between whole-square shifts
    (column 0 undetected) or turns (rolled 90°) is linked, by one rigid motion of the board's grid
    from the truth, and said to be relative; refused without ``relative``."""
    cases = {
        "shift": (board, board_pose(board, z=550.0, tilt_deg=20.0, roll_deg=5.0), column(board, 0), "2 offsets"),
        "turn": (board, board_pose(board, z=500.0, tilt_deg=10.0, roll_deg=90.0), [], "|roll|"),
    }
    for name, (b, pose, drop, why) in cases.items():
        truth, uv = barycentres(camera, b, pose, seed=7, drop=drop)
        assert not link_barycentres(camera, b, uv).ok
        link = link_barycentres(camera, b, uv, relative=True)
        assert link.ok and link.relative_ids and not link.image_decided, name
        assert "node ids relative" in link.note and why in link.note, name
        motion, agree = grid_motion(truth, link.node, columns=b.columns)
        assert agree.all() and np.all(link.node >= 0), (name, motion)
        err = project_pinhole(camera, link.pose, b.node_points(link.node)) - uv
        assert np.sqrt(np.mean(np.sum(err**2, axis=1))) < 2.0 * NOISE_PX, name


def test_a_few_nodes_ambiguous_view_stays_refused(camera, board):
    """Relative ids need half the board's nodes (a lattice of a few clusters can be a wrong one):
    three columns of eight, whose place in the board is unknown, stay refused."""
    pose = board_pose(board, z=550.0, tilt_deg=20.0, roll_deg=5.0)
    _, uv = barycentres(camera, board, pose, seed=7, drop=np.concatenate([column(board, c) for c in (0, 1, 2, 3, 4)]))
    link = link_barycentres(camera, board, uv, relative=True)
    assert not link.ok and "ambiguous" in link.reason and not link.relative_ids


def test_a_decided_frame_is_not_relative(camera, board):
    """``relative`` changes nothing where the labelling is decided: the same ids, not relative."""
    truth, uv = barycentres(camera, board, board_pose(board, **POSES["tilted"]), seed=3)
    link = assert_links(camera, board, truth, uv, relative=True)
    assert not link.relative_ids and "node ids relative" not in link.note


def test_grid_motion_names_the_turn_and_shift():
    """The 180° turn of a 9 × 5 grid is (180°, 8, 4); one id off that motion is the one it does
    not take; the truth itself is (0, 0, 0)."""
    truth = np.arange(45)
    turned = 44 - truth
    motion, agree = grid_motion(truth, turned, columns=9)
    assert motion == (180, 8, 4) and agree.all()
    turned[5] = 0
    motion, agree = grid_motion(truth, turned, columns=9)
    assert motion == (180, 8, 4) and np.flatnonzero(~agree).tolist() == [5]
    assert grid_motion(truth, truth + 1, columns=9)[0] == (0, 1, 0)
