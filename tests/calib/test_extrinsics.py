"""Initial extrinsics: PnP on barycentres, cluster linking, failure reporting."""

from __future__ import annotations

import numpy as np

from plenocal.calib.extrinsics import initial_extrinsics, plenoptic_poses
from plenocal.model.observations import BapFeatures


def test_linked_barycentre_pnp_close_to_truth(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    noisy, _ = r12a_synthetic
    ext = initial_extrinsics(r12a_camera, noisy.bap, r12a_board)
    assert not ext.failed and set(ext.poses) == set(r12a_poses)
    for f, pose in ext.poses.items():
        # Barycentres are biased (truncated micro-lens sets): a few mm and < 2.5°.
        assert np.linalg.norm(pose.translation - r12a_poses[f].translation) < 0.05 * r12a_poses[f].translation[2]
        dR = pose.rotation.T @ r12a_poses[f].rotation
        assert np.degrees(np.arccos(np.clip((np.trace(dR) - 1) / 2, -1, 1))) < 2.5
    # The plenoptic (triangulated) poses are much closer with the true camera.
    pp = plenoptic_poses(r12a_camera, noisy.bap, r12a_board, ext.poses)
    for f, pose in pp.items():
        assert np.linalg.norm(pose.translation - r12a_poses[f].translation) < 2.0


def test_clusters_are_linked_to_nodes(r12a_camera, r12a_board, r12a_synthetic):
    """Unknown node ids (detector clusters only), including strongly tilted frames."""
    noisy, _ = r12a_synthetic
    cols = noisy.bap.columns()
    cols["node"] = np.full(len(noisy.bap), -1)
    cols["cluster"] = (noisy.bap.node * 7 + 3) % 1000
    ext = initial_extrinsics(r12a_camera, BapFeatures(**cols), r12a_board)
    assert not ext.failed
    np.testing.assert_array_equal(ext.bap.node, noisy.bap.node)


def test_failing_frame_is_reported_not_fatal(r12a_camera, r12a_board, r12a_synthetic):
    noisy, _ = r12a_synthetic
    cols = noisy.bap.columns()
    bad = cols["frame"] == 3
    cols["u"] = np.where(bad, np.random.default_rng(0).uniform(0, 4000, bad.size), cols["u"])
    cols["v"] = np.where(bad, np.random.default_rng(1).uniform(0, 3000, bad.size), cols["v"])
    ext = initial_extrinsics(r12a_camera, BapFeatures(**cols), r12a_board)
    assert [f.frame for f in ext.failed] == [3]
    assert 3 not in ext.poses and len(ext.poses) == 15
    assert ext.failed[0].reason


def test_pnp_poses_points_too_close_together_for_sqpnp(r12a_camera):
    """Seven board nodes 5 mm apart that span ~70 px of a ~10 000 px focal length (a partial view's
    lone corners): OpenCV's SQPnP refuses them with an assertion (its normalised points' variance),
    which a detection run raised as a traceback. The planar solver poses them exactly; four
    collinear points have no pose, and no exception either."""
    from plenocal.calib.extrinsics import pinhole_matrix, solve_pnp
    from plenocal.model.geometry import Pose, rodrigues

    K = pinhole_matrix(r12a_camera)
    nodes = np.array([[0, 0, 0], [0, 5, 0], [5, 0, 0], [5, 5, 0], [10, 0, 0], [10, 5, 0], [15, 5, 0]], dtype=float)
    truth = Pose(rodrigues([0.3, -0.2, 0.1]), np.array([-3.0, 2.0, 5.0 * K[0, 0] / 23.0]))
    cam = truth.apply(nodes)
    uv = cam[:, :2] / cam[:, 2:] * K[0, 0] + K[:2, 2]
    assert np.ptp(uv, axis=0).max() < 80.0
    pose = solve_pnp(r12a_camera, nodes, uv)
    assert pose is not None
    assert np.allclose(pose.translation, truth.translation, rtol=1e-6)
    assert np.allclose(pose.rotation, truth.rotation, atol=1e-6)
    line = np.array([[0, 0, 0], [5, 0, 0], [10, 0, 0], [15, 0, 0]], dtype=float)
    assert solve_pnp(r12a_camera, line, uv[[0, 2, 4, 4]] + np.array([[0, 0], [0, 0], [0, 0], [1e-3, 0]])) is None
