"""Depth against the board plane and the known displacements (:mod:`plenocal.evaluate.depth`), and
the PLY reader (:func:`plenocal.io.ply.read_ply`)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.evaluate.depth import displacement_errors, on_board, plane_errors
from plenocal.io.ply import read_ply, write_ply
from plenocal.model.geometry import Pose
from plenocal.model.target import Checkerboard

BOARD = Checkerboard(columns=9, rows=5, square_mm=10.0, border_mm=0.0)


def _points_on(pose: Pose, *, offset_mm: float, n: int = 2000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    xb = np.column_stack([rng.uniform(-20, 100, n), rng.uniform(-20, 60, n), np.full(n, offset_mm)])
    return xb @ pose.rotation.T + pose.translation


def test_points_on_a_tilted_board_are_found_and_their_distance_measured():
    pose = Pose.from_rotvec([0.3, -0.2, 0.05], [-40.0, -20.0, 400.0])
    pts = _points_on(pose, offset_mm=2.0)
    inside, dist = on_board(pts, pose, BOARD)
    local = (pts - pose.translation) @ pose.rotation
    expected = (local[:, 0] >= -10) & (local[:, 0] <= 90) & (local[:, 1] >= -10) & (local[:, 1] <= 50)
    np.testing.assert_array_equal(inside, expected)
    np.testing.assert_allclose(dist, 2.0, atol=1e-9)
    e = plane_errors(pts, pose, BOARD)
    assert e["n_points"] == int(expected.sum())
    assert e["median_signed_percent"] == pytest.approx(100 * 2.0 / np.median(pts[inside, 2]), rel=0.05)


def test_a_relative_frame_is_judged_over_its_linked_nodes_only():
    """A frame linked with relative node ids: only the points over its linked nodes' rows and
    columns (and the margin) count as on the board; all the nodes' extent is the default."""
    pose = Pose.from_rotvec([0.3, -0.2, 0.05], [-40.0, -20.0, 400.0])
    pts = _points_on(pose, offset_mm=2.0)
    every, _ = on_board(pts, pose, BOARD, node_extent=(0, 8, 0, 4))
    np.testing.assert_array_equal(every, on_board(pts, pose, BOARD)[0])
    inside, _ = on_board(pts, pose, BOARD, node_extent=(2, 5, 1, 3))
    local = (pts - pose.translation) @ pose.rotation
    expected = (local[:, 0] >= 10) & (local[:, 0] <= 60) & (local[:, 1] >= 0) & (local[:, 1] <= 40)
    np.testing.assert_array_equal(inside, expected)
    assert plane_errors(pts, pose, BOARD, node_extent=(2, 5, 1, 3))["n_points"] == int(expected.sum()) < int(every.sum())


def test_displacements_by_pair_and_sequence():
    depth = {100: 450.0, 101: 501.0, 102: 549.0, 200: 300.0}
    disp = {100: 0.0, 101: 50.0, 102: 100.0, 200: 0.0}
    seq = {100: 0, 101: 0, 102: 0, 200: 1}
    d = displacement_errors(depth, disp, seq)
    assert d["n_pairs"] == 3  # frame 200 is another sequence
    errs = {tuple(p["frames"]): p["error_percent"] for p in d["pairs"]}
    assert errs[(100, 101)] == pytest.approx(2.0) and errs[(101, 102)] == pytest.approx(-4.0)
    assert errs[(100, 102)] == pytest.approx(-1.0)
    assert [g["displacement_mm"] for g in d["by_displacement"]] == [50.0, 100.0]


def test_ply_round_trip(tmp_path):
    cols = {"x": np.array([1.5, -2.0], np.float32), "z": np.array([400.0, 401.0]), "grey": np.array([3, 250], np.uint8),
            "k": np.array([-1, 7], np.int32)}
    back = read_ply(write_ply(tmp_path / "a.ply", cols, comments=("units mm",)))
    assert list(back) == list(cols)
    for k, v in cols.items():
        np.testing.assert_array_equal(back[k], v)
    (tmp_path / "b.ply").write_bytes(b"ply\nformat ascii 1.0\nelement vertex 0\nend_header\n")
    with pytest.raises(ValueError, match="binary little-endian"):
        read_ply(tmp_path / "b.ply")


def test_board_coverage_counts_the_board_micro_images_with_a_point():
    """The small R12-A preset looking at a fronto-parallel board at 300 mm: the micro-images whose
    line of sight meets the printed board are found in the middle of the image, and the coverage is
    the fraction of them the point cloud's (k, l) name (others, off the board, do not count)."""
    from plenocal.depth.metric import points_from_virtual_depth
    from plenocal.depth.scaling import board_virtual_depths
    from plenocal.evaluate.depth import BOARD_MARGIN_SQUARES, board_coverage
    from plenocal.sim.presets import preset

    cam = preset("r12-a", small=True).camera
    board = Checkerboard(columns=3, rows=3, square_mm=2.5, border_mm=0.0)
    pose = Pose(np.eye(3), np.array([-2.5, -2.5, 300.0]))
    k, l = cam.grid.lattice.all_indices()
    seen, ups = board_virtual_depths(cam, k, l, pose, board, margin_squares=BOARD_MARGIN_SQUARES)
    assert 150 < seen.sum() < 0.6 * len(k)
    # the seen micro-images' points lie on the board, within its margin
    inside, dist = on_board(points_from_virtual_depth(cam, k[seen], l[seen], ups[seen]), pose, board)
    assert inside.mean() > 0.99 and np.max(np.abs(dist)) < 1e-6
    idx = np.flatnonzero(seen)
    half = idx[::2]
    extra = np.flatnonzero(~seen)[:50]  # points off the board do not count
    c = board_coverage(cam, pose, board, np.concatenate([k[half], k[extra]]), np.concatenate([l[half], l[extra]]))
    assert c["board_micro_images"] == int(seen.sum())
    assert c["board_coverage"] == pytest.approx(len(half) / len(idx))
    assert board_coverage(cam, pose, board, k[idx], l[idx])["board_coverage"] == 1.0
    assert board_coverage(cam, pose, board, k[:0], l[:0])["board_coverage"] == 0.0


def test_a_board_where_no_micro_image_measures_depth_has_no_board_depth():
    """A frame whose whole board lies where the virtual depth is not estimable (no board micro-image)
    gives no board depth for the displacements, and says why; a frame with board micro-images gives
    its median, one without points None."""
    from plenocal.evaluate.depth import NO_BOARD_DEPTH, measured_board_depth

    near = {"n_points": 109, "board_depth_mm": 356.8, "board_micro_images": 0, "board_coverage": 0.0}
    assert measured_board_depth(near) == (None, NO_BOARD_DEPTH) and "board_depth" not in near  # the record is not written
    assert measured_board_depth({"n_points": 5513, "board_depth_mm": 355.2, "board_micro_images": 10918}) == (355.2, None)
    assert measured_board_depth({"n_points": 40, "board_depth_mm": 300.0}) == (300.0, None)  # no (k, l) in the cloud: kept
    assert measured_board_depth({"n_points": 0}) == (None, None)
    depths = {f: d for f, d in ((200, 345.0), (201, None), (202, 365.0)) if d is not None}
    pairs = displacement_errors(depths, {200: 0.0, 201: 10.0, 202: 20.0}, {200: 0, 201: 0, 202: 0})["pairs"]
    assert [p["frames"] for p in pairs] == [[200, 202]]
