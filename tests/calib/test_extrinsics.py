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
