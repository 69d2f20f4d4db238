"""Held-out evaluation: poses re-estimated with the intrinsics fixed (reference §9.1)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.synthetic import synthetic_observations
from plenocal.evaluate.holdout import evaluate_holdout
from plenocal.model.geometry import Pose


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
