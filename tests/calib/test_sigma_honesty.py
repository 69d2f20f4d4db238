"""σ honesty over many seeds (slow: ~4 s per seed; run with `pytest -m slow`)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.calibrate import calibrate
from plenocal.calib.synthetic import perturbed_camera, synthetic_observations

KEY = ("F_mm", "D_mm", "d_mm", "f1_mm", "f2_mm", "f3_mm", "u0_px", "v0_px")


def _spread_over_sigma(camera, poses, board, first_seed, **noise):
    """Spread of the KEY estimates over 40 seeds / their mean reported σ."""
    est, sds = [], []
    for seed in range(first_seed, first_seed + 40):
        o, _ = synthetic_observations(camera, poses, board, seed=seed, **noise)
        r = calibrate(o, perturbed_camera(camera, seed=seed), board)
        assert r.converged
        idx = [r.layout.index[n] for n in KEY]
        est.append(r.x[idx])
        sds.append(r.std[idx])
    return np.array(est).std(axis=0, ddof=1) / np.array(sds).mean(axis=0)


@pytest.mark.slow
def test_sigma_honesty_40_seeds(r12a_truth, r12a_poses, r12a_board):
    ratio = _spread_over_sigma(r12a_truth, r12a_poses, r12a_board, 1000)
    assert np.all((ratio > 0.7) & (ratio < 1.4)), dict(zip(KEY, ratio.round(3), strict=True))


@pytest.mark.slow
def test_sigma_honesty_with_shared_rho_errors_40_seeds(r12a_truth, r12a_poses, r12a_board):
    """ρ errors shared per (frame, node), as detection produces them: the clustered covariance
    (the default) stays honest."""
    ratio = _spread_over_sigma(r12a_truth, r12a_poses, r12a_board, 2000, rho_per_cluster=True)
    assert np.all((ratio > 0.7) & (ratio < 1.4)), dict(zip(KEY, ratio.round(3), strict=True))
