"""Feature depths: object distance and virtual depth of the node each feature observes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from plenocal.errors import DataError
from plenocal.evaluate.coverage import feature_depths
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures
from plenocal.model.profile import depth_of_field


def test_a_node_on_a_focus_plane_has_that_planes_virtual_depth(r12a_camera, r12a_board):
    """Node 0 on the optical axis at each type's focus-plane distance: υ is that plane's υ (profile
    distances are along the axis from the MLA's centre: an untilted MLA makes the two agree)."""
    camera = r12a_camera.replace(mla=dataclasses.replace(r12a_camera.mla, rotation_xyz_rad=(0.0, 0.0, 0.0)))
    dof = depth_of_field(camera)
    poses = {i: Pose(np.eye(3), [0.0, 0.0, t.focus_object_mm]) for i, t in enumerate(dof.types)}
    n = len(poses)
    feats = BapFeatures(np.arange(n), np.zeros(n, int), np.zeros(n, int), np.zeros(n), np.zeros(n), np.zeros(n),
                        np.zeros(n, int))
    d = feature_depths(camera, poses, r12a_board, feats)
    np.testing.assert_allclose(d.object_mm, [t.focus_object_mm for t in dof.types], rtol=1e-12)
    np.testing.assert_allclose(d.virtual_depth, [t.focus_virtual_depth for t in dof.types], rtol=1e-9)
    assert d.virtual_depth[0] != pytest.approx(d.virtual_depth[1], rel=0.05)


def test_farther_nodes_have_smaller_virtual_depth_and_unlinked_features_are_refused(r12a_camera, r12a_board):
    poses = {0: Pose(np.eye(3), [-20.0, -10.0, 300.0]), 1: Pose(np.eye(3), [-20.0, -10.0, 600.0])}
    feats = BapFeatures([0, 1, 0], [0, 0, 0], [0, 0, 0], np.zeros(3), np.zeros(3), np.zeros(3), [12, 12, 30])
    d = feature_depths(r12a_camera, poses, r12a_board, feats)
    np.testing.assert_allclose(d.object_mm, [300.0, 600.0, 300.0])
    assert d.virtual_depth[1] < d.virtual_depth[0]
    with pytest.raises(DataError, match="linked"):
        feature_depths(r12a_camera, poses, r12a_board, BapFeatures([0], [0], [0], [0.0], [0.0], [0.0], [-1]))
    with pytest.raises(DataError, match=r"no pose for frame\(s\) \[7\]"):
        feature_depths(r12a_camera, poses, r12a_board, BapFeatures([7], [0], [0], [0.0], [0.0], [0.0], [0]))
