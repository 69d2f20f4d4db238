"""Detection and linking on plenocal's own renders of a board with a white border on a black
background: complete, cut by the image border, and turned by 180° (small r12-a, 24 rays)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.extrinsics import initial_extrinsics, project_pinhole
from plenocal.detect.pipeline import detect_frame
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.target import Checkerboard
from plenocal.model.white import internal_parameters
from plenocal.sim.groundtruth import FeatureOracle
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import render

BOARD = Checkerboard(5, 4, 4.0, border_mm=4.0)


def pose_at(centre_xy, *, z=330.0, tilt_deg=12.0, roll_deg=3.0) -> Pose:
    """cam_from_world with the board's centre at (x, y, z) mm, tilted about x, rolled about z."""
    R = rodrigues(np.radians(roll_deg) * np.array([0.0, 0.0, 1.0])) @ rodrigues(np.radians(tilt_deg) * np.array([1.0, 0.0, 0.0]))
    centre = np.array([(BOARD.columns - 1) * BOARD.square_mm / 2, (BOARD.rows - 1) * BOARD.square_mm / 2, 0.0])
    return Pose(R, np.array([*centre_xy, z]) - R @ centre)


POSES = {
    "complete": pose_at((0.5, 0.0)),
    "cut": pose_at((8.5, 0.0)),  # the last column beyond the image border
    "turned": pose_at((0.5, 0.0), roll_deg=183.0),
}


@pytest.fixture(scope="module")
def detected():
    cam = preset("r12-a", small=True).camera
    omega = internal_parameters(cam)
    N = 4.0
    white = render(cam, WhiteDiffuser(), f_number=N, rays=24, seed=5, image_id=99)
    oracle = FeatureOracle(cam)
    out = {}
    for i, (name, pose) in enumerate(POSES.items()):
        img = render(cam, Scene((CheckerboardPlate(BOARD, pose),), background=0.0), f_number=N, rays=24, seed=5, image_id=i)
        det = detect_frame(img, white, grid=cam.grid, omega=omega, layout=cam.mla.types, frame=i)
        out[name] = (i, pose, det, oracle.board_features(BOARD, pose, frame=i))
    return cam, out


def _cluster_truth(det, truth):
    """True node of each detected cluster: the node of most of its features (−1 if none match)."""
    key = {(int(k), int(l)): int(n) for k, l, n in zip(truth.k, truth.l, truth.node, strict=True)}
    f = det.features
    node = np.array([key.get((int(k), int(l)), -1) for k, l in zip(f.k, f.l, strict=True)])
    out = {}
    for c in np.unique(f.cluster):
        n = node[f.cluster == c]
        vals, cnt = np.unique(n, return_counts=True)
        out[int(c)] = int(vals[np.argmax(cnt)])
    return out


def _link(cam, frames, *, with_views=True):
    from plenocal.model.observations import BapFeatures

    bap = BapFeatures.concatenate([d.features for _, _, d, _ in frames])
    views = {i: d.view for i, _, d, _ in frames} if with_views else None
    return initial_extrinsics(cam, bap, BOARD, max_rmse_fraction=0.1, views=views)


def test_the_premises(detected):
    cam, out = detected
    _, pose, det, _ = out["cut"]
    u = project_pinhole(cam, pose, BOARD.node_points())[:, 0]
    last = np.arange(BOARD.rows) * BOARD.columns + BOARD.columns - 1
    assert np.all((u[last] < 0) | (u[last] > cam.sensor.width_px - 1)), "the last column is out of view"
    assert det.view is not None and np.isfinite(det.view.image).mean() > 0.9


@pytest.mark.parametrize("name", sorted(POSES))
def test_rendered_frames_link_with_the_right_node_ids(detected, name):
    """Every cluster that is a board corner gets its node (the 180° turn relabelled by the upright
    convention: node 0 top-left), none of a wrong one; the cut board is decided by the image."""
    cam, out = detected
    _i, _pose, det, truth = out[name]
    ext = _link(cam, [out[name]])
    rec = ext.frames[0]
    assert rec.ok, rec.reason
    assert ext.bap is not None
    linked = dict(zip(ext.bap.cluster.tolist(), ext.bap.node.tolist(), strict=True))
    true_of = _cluster_truth(det, truth)
    if name == "turned":
        true_of = {c: (BOARD.n_nodes - 1 - n if n >= 0 else -1) for c, n in true_of.items()}
    wrong = [c for c, n in linked.items() if n >= 0 and n != true_of[c]]
    assert not wrong
    assert sum(n >= 0 for n in linked.values()) >= 0.8 * len({n for n in true_of.values() if n >= 0})
    if name == "cut":
        assert "printed extent" in rec.note


def test_the_cut_board_is_ambiguous_without_the_image(detected):
    cam, out = detected
    ext = _link(cam, [out["cut"]], with_views=False)
    assert not ext.frames[0].ok and "ambiguous" in ext.frames[0].reason


def test_the_cut_board_links_with_relative_ids_as_a_calibration_frame(detected):
    """Without the image the cut board's placements stay undecided; as a calibration frame (free
    pose) it is linked, its ids one rigid motion of the grid from the truth for every cluster
    that is a board corner, and said to be relative."""
    from plenocal.calib.linking import grid_motion
    from plenocal.model.observations import BapFeatures

    cam, out = detected
    i, _pose, det, truth = out["cut"]
    ext = initial_extrinsics(cam, BapFeatures.concatenate([det.features]), BOARD, max_rmse_fraction=0.1,
                             relative_frames=(i,))
    rec = ext.frames[0]
    assert rec.ok and rec.relative_ids and not rec.image_decided and "node ids relative" in rec.note
    assert ext.bap is not None
    linked = dict(zip(ext.bap.cluster.tolist(), ext.bap.node.tolist(), strict=True))
    true_of = _cluster_truth(det, truth)
    pairs = np.array([(true_of[c], n) for c, n in linked.items() if n >= 0 and true_of[c] >= 0])
    assert len(pairs) >= 0.8 * len({n for n in true_of.values() if n >= 0})
    _, agree = grid_motion(pairs[:, 0], pairs[:, 1], columns=BOARD.columns)
    assert agree.all()
    assert not [c for c, n in linked.items() if n >= 0 and true_of[c] < 0]  # no spurious cluster linked


def test_frames_decided_by_the_image_need_fewer_nodes():
    from plenocal.cli.detect import LINK_MIN_CLUSTERS, nodes_needed

    assert nodes_needed(45, image_decided=False) == 27
    assert nodes_needed(45, image_decided=True) == LINK_MIN_CLUSTERS == 6
    assert nodes_needed(8, image_decided=False) == 6


def test_a_frame_without_a_pose_says_what_detection_saw():
    """A frame left with fewer than 4 clusters (near the MLA's conjugate plane, or beyond it) is
    refused with what its detection found: the reason's head is kept (the line for a dataset
    where no frame links groups frames by it)."""
    from plenocal.cli.detect import no_frame_linked, too_few_clusters_hint

    counts = {"class_corner": 931, "rejected_not_converged": 409, "rejected_photometric": 357, "corners": 54, "clusters_noise": 52}
    hint = too_few_clusters_hint(counts)
    assert "54 corners fitted in 931 corner-like micro-images" in hint and "409 fits did not converge" in hint
    assert "52 of them in no cluster" in hint and ":" not in hint
    frames = [{"linking": {"reason": "no features: " + hint}}, {"linking": {"reason": "no features: " + too_few_clusters_hint({})}}]
    assert "(in 2 frames: no features)" in no_frame_linked(Checkerboard(9, 5, 10.0), frames, 0)


def _keep_clusters(det, truth, nodes):
    """The frame's features of the clusters whose true node is in ``nodes`` (the others dropped, as
    near the MLA's conjugate plane, where most nodes are in one or two micro-images and form no
    cluster)."""
    true_of = _cluster_truth(det, truth)
    keep = np.isin(det.features.cluster, [c for c, n in true_of.items() if n in set(nodes)])
    return det.features.select(keep), true_of


def _link_features(cam, features, view):
    return initial_extrinsics(cam, features, BOARD, max_rmse_fraction=0.1, views=None if view is None else {int(features.frame[0]): view})


# Rows 0 and 2 only, columns 1–3 and 0, 1, 3: no basis of the clusters' own lattice is square (its
# step across is two rows), and a sheared one holds them on as few lines.
SPARSE_ROWS = (1, 2, 3, 10, 11, 13)


def test_clusters_two_rows_apart_are_linked_by_the_image(detected):
    """The rendered checker squares decide the lattice of nodes through clusters every other row
    (refused before: "ambiguous lattice axes"), and the right node ids are linked."""
    cam, out = detected
    _i, _pose, det, truth = out["complete"]
    features, true_of = _keep_clusters(det, truth, SPARSE_ROWS)
    assert len(np.unique(features.cluster)) == len(SPARSE_ROWS)
    without = _link_features(cam, features, None).frames[0]
    assert not without.ok and "ambiguous lattice axes" in without.reason
    ext = _link_features(cam, features, det.view)
    rec = ext.frames[0]
    assert rec.ok, rec.reason
    assert "the image decided the lattice axes" in rec.note
    linked = dict(zip(ext.bap.cluster.tolist(), ext.bap.node.tolist(), strict=True))
    assert {c: n for c, n in linked.items() if n >= 0} == {c: true_of[c] for c in linked}


def test_clusters_two_rows_apart_stay_refused_where_the_image_shows_nothing(detected):
    """The same clusters with a view that shows no pattern (uniform grey): refused, with the reason."""
    from plenocal.detect.view import SceneView

    cam, out = detected
    _i, _pose, det, truth = out["complete"]
    features, _ = _keep_clusters(det, truth, SPARSE_ROWS)
    flat = SceneView(np.full_like(det.view.image, 0.5), det.view.step_px)
    rec = _link_features(cam, features, flat).frames[0]
    assert not rec.ok and "ambiguous lattice axes" in rec.reason and "does not decide" in rec.reason
