"""Held-out evaluation: poses re-estimated with the intrinsics fixed (reference §9.1)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.synthetic import synthetic_observations
from plenocal.evaluate.holdout import evaluate_holdout
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures, Observations


def test_holdout_rmse_matches_noise(r12a_camera, r12a_poses, r12a_board):
    # Three "new" frames: fixture poses moved by 5 mm.
    held = {100 + i: Pose(r12a_poses[f].rotation, r12a_poses[f].translation + np.array([5.0, -3.0, 5.0]))
            for i, f in enumerate((0, 4, 9))}
    noisy, _ = synthetic_observations(r12a_camera, held, r12a_board, seed=7)
    out = evaluate_holdout(r12a_camera, noisy, r12a_board)
    assert sorted(out.poses) == [100, 101, 102]
    for f, pose in out.poses.items():
        assert np.linalg.norm(pose.translation - held[f].translation) < 0.5
    o = out.evaluation.overall
    assert o.uv_px == pytest.approx(0.3 * np.sqrt(2), rel=0.05)
    assert o.rho_px == pytest.approx(0.05, rel=0.1)
    assert set(out.evaluation.per_type) == {0, 1, 2}
    assert set(out.evaluation.per_frame) == {100, 101, 102}
    assert out.solver.converged
    assert out.to_json()["frames_failed"] == []


def test_mislinked_held_out_features_are_rejected_and_do_not_pull_the_pose(r12a_camera, r12a_poses, r12a_board):
    """15 features of one held-out frame linked to the neighbouring node (10 mm off): rejected by
    the held-out rule, listed, out of the headline RMSE, and the frame's pose re-fitted without them."""
    held = {100 + i: Pose(r12a_poses[f].rotation, r12a_poses[f].translation + np.array([5.0, -3.0, 5.0]))
            for i, f in enumerate((0, 4, 9))}
    noisy, _ = synthetic_observations(r12a_camera, held, r12a_board, seed=7)
    b = noisy.bap
    rows = np.flatnonzero(b.frame == 101)[:15]
    node = b.node.copy()
    node[rows] = np.where(node[rows] % r12a_board.columns == 0, node[rows] + 1, node[rows] - 1)
    bad = Observations(BapFeatures(b.frame, b.k, b.l, b.u, b.v, b.rho, node, b.cluster), noisy.mic)
    clean = evaluate_holdout(r12a_camera, noisy, r12a_board)
    out = evaluate_holdout(r12a_camera, bad, r12a_board)
    rej = out.evaluation.rejection
    assert rej is not None and rej.per_frame.get(101, 0) >= 15 and rej.counts["bap"] <= 15 + 2
    assert {(f["frame"], f["k"], f["l"]) for f in rej.features} >= {(101, int(b.k[i]), int(b.l[i])) for i in rows}
    assert out.evaluation.overall.uv_px == pytest.approx(0.3 * np.sqrt(2), rel=0.05)
    assert rej.all_observations.uv_px > 3 * out.evaluation.overall.uv_px
    assert out.rounds >= 2  # re-fitted after the rejection
    # The re-fitted pose is as good as with the clean features (to a small fraction of a mm).
    assert np.linalg.norm(out.poses[101].translation - clean.poses[101].translation) < 0.05
    assert "held-out rule" in out.to_json()["rejected"]["rule"]
    # Without the rule, the mislinked features pull the pose and the RMSE.
    plain = evaluate_holdout(r12a_camera, bad, r12a_board, reject_probability=None)
    assert np.linalg.norm(plain.poses[101].translation - clean.poses[101].translation) > 0.1
    assert plain.evaluation.overall.uv_px > 3 * out.evaluation.overall.uv_px
