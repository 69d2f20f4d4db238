"""σ with the errors of one target corner's observations correlated (solver.covariance).

Detected ρ all come from their cluster's virtual depth (paper eq:radiusfinal), so one frame's
observations of one corner share a ρ error. Counted as independent rows, σ comes out ~1.5x too
small on R12-A (and 2-3x on small crops); the clustered sandwich estimates the intra-cluster
correlation from the residuals and widens σ accordingly, and leaves σ alone when errors are
independent.
"""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.calibrate import CalibrationOptions, calibrate
from plenocal.calib.synthetic import perturbed_camera, synthetic_observations

FRAMES = (0, 2, 4, 7, 9, 12)


def _fit(camera, poses, board, *, per_cluster: bool, clustered: bool, seed: int = 5):
    sub = {f: poses[f] for f in FRAMES}
    obs, _ = synthetic_observations(camera, sub, board, seed=seed, rho_per_cluster=per_cluster)
    # Noise weights give ρ its full weight, where its shared errors matter most for σ; no jackknife
    # (this is about the Jacobian σ). The paper's lens: which real-lens terms the data choose
    # depends on σ, so the two fits would otherwise have different parameters.
    return calibrate(obs, perturbed_camera(camera, seed=seed), board,
                     options=CalibrationOptions(clustered_covariance=clustered, weighting="noise", frame_resampling=False,
                                                exit_pupil=False, depth_distortion=False))


@pytest.fixture(scope="module")
def shared(r12a_truth, r12a_poses, r12a_board):
    return {c: _fit(r12a_truth, r12a_poses, r12a_board, per_cluster=True, clustered=c) for c in (True, False)}


def test_shared_rho_errors_are_detected_and_widen_sigma(shared):
    on, off = shared[True], shared[False]
    assert on.intra_cluster_correlation["rho"] > 0.85
    assert on.intra_cluster_correlation["uv"] < 0.05
    assert off.intra_cluster_correlation == {}
    np.testing.assert_allclose(on.x, off.x)  # the estimate is the same, only σ changes
    i = on.layout.index
    for name in ("d_mm", "f1_mm", "F_mm"):
        assert on.std[i[name]] > 1.3 * off.std[i[name]], name


def test_independent_errors_leave_sigma_unchanged(r12a_truth, r12a_poses, r12a_board):
    on = _fit(r12a_truth, r12a_poses, r12a_board, per_cluster=False, clustered=True)
    off = _fit(r12a_truth, r12a_poses, r12a_board, per_cluster=False, clustered=False)
    assert on.intra_cluster_correlation["rho"] < 0.05
    i = on.layout.index
    for name in ("d_mm", "f1_mm", "F_mm", "u0_px"):
        assert on.std[i[name]] == pytest.approx(off.std[i[name]], rel=0.05), name
