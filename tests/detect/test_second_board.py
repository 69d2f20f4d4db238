"""A second checkerboard in view (issue 24): its corners are detected and clustered like the
declared board's, and none of them may be linked to a node of the declared board.

Render (small r12-a, f/4, 24 rays): the declared 4 × 3-corner board (3.5 mm squares, 2 mm white
border) and, abutting it on the right, a 3 × 2-corner board with the same squares and border,
rolled 8° against it — the same pattern, so only its extent and its placement tell it apart.
Measured: 18 clusters (12 of the declared board, 6 of the other); the frame is linked with the 12
right nodes, none of the other board's clusters linked.
"""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.extrinsics import initial_extrinsics
from plenocal.detect.pipeline import detect_frame
from plenocal.model.geometry import Pose, rodrigues
from plenocal.model.target import Checkerboard
from plenocal.model.white import internal_parameters
from plenocal.sim.groundtruth import FeatureOracle
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import render

DECLARED = Checkerboard(4, 3, 3.5, border_mm=2.0)
OTHER = Checkerboard(3, 2, 3.5, border_mm=2.0)


def pose_at(board: Checkerboard, centre_xy, *, z=330.0, tilt_deg=12.0, roll_deg=3.0) -> Pose:
    """cam_from_world with the board's centre at (x, y, z) mm, tilted about x, rolled about z."""
    R = rodrigues(np.radians(roll_deg) * np.array([0.0, 0.0, 1.0])) @ rodrigues(np.radians(tilt_deg) * np.array([1.0, 0.0, 0.0]))
    centre = np.array([(board.columns - 1) * board.square_mm / 2, (board.rows - 1) * board.square_mm / 2, 0.0])
    return Pose(R, np.array([*centre_xy, z]) - R @ centre)


@pytest.fixture(scope="module")
def two_boards():
    cam = preset("r12-a", small=True).camera
    white = render(cam, WhiteDiffuser(), f_number=4.0, rays=24, seed=5, image_id=99)
    declared, other = pose_at(DECLARED, (-7.0, 0.0)), pose_at(OTHER, (10.5, 1.0), roll_deg=-8.0)
    scene = Scene((CheckerboardPlate(DECLARED, declared), CheckerboardPlate(OTHER, other)), background=0.0)
    img = render(cam, scene, f_number=4.0, rays=24, seed=5, image_id=1)
    det = detect_frame(img, white, grid=cam.grid, omega=internal_parameters(cam), layout=cam.mla.types, frame=1)
    oracle = FeatureOracle(cam)
    return cam, det, oracle.board_features(DECLARED, declared, frame=1), oracle.board_features(OTHER, other, frame=1)


def _cluster_nodes(det, truth) -> dict[int, int]:
    """The truth node of each detected cluster (most of its features' micro-images), −1 for none."""
    key = {(int(k), int(l)): int(n) for k, l, n in zip(truth.k, truth.l, truth.node, strict=True)}
    f = det.features
    node = np.array([key.get((int(k), int(l)), -1) for k, l in zip(f.k, f.l, strict=True)])
    out = {}
    for c in np.unique(f.cluster):
        vals, cnt = np.unique(node[f.cluster == c], return_counts=True)
        out[int(c)] = int(vals[np.argmax(cnt)])
    return out


def test_the_second_board_is_seen_but_not_linked(two_boards):
    cam, det, truth, truth_other = two_boards
    declared_of, other_of = _cluster_nodes(det, truth), _cluster_nodes(det, truth_other)
    of_other = {c for c, n in other_of.items() if n >= 0 and declared_of[c] < 0}
    assert len(of_other) >= 4, "the premise: the other board's corners are detected and clustered"
    ext = initial_extrinsics(cam, det.features, DECLARED, max_rmse_fraction=0.1, views={1: det.view})
    rec = ext.frames[0]
    assert rec.ok, rec.reason
    linked = dict(zip(ext.bap.cluster.tolist(), ext.bap.node.tolist(), strict=True))
    assert not [c for c in of_other if linked.get(c, -1) >= 0], "a corner of the other board linked"
    # the declared board's clusters carry their own node (upright convention: node 0 top-left)
    assert all(linked[c] == n for c, n in declared_of.items() if n >= 0 and linked.get(c, -1) >= 0)
    assert sum(linked.get(c, -1) >= 0 for c, n in declared_of.items() if n >= 0) >= 0.8 * DECLARED.n_nodes
