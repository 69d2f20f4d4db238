"""Levenberg–Marquardt with the structured quasi-Newton step (solver.secant_update)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.residuals import Residuals
from plenocal.calib.solver import levenberg_marquardt, secant_update
from plenocal.calib.synthetic import perturbed_camera, synthetic_observations


def test_secant_update_meets_the_secant_condition():
    rng = np.random.default_rng(3)
    n = 8
    A = rng.normal(size=(n, n))
    H = A @ A.T + n * np.eye(n)
    S = 0.1 * (A + A.T)
    s = rng.normal(size=n)
    y = (H + 0.5 * np.eye(n)) @ s  # sᵀy > 0
    S1 = secant_update(S, H, s, y)
    np.testing.assert_allclose((H + S1) @ s, y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(S1, S1.T, atol=1e-14)
    assert secant_update(S, H, s, -y) is S  # no curvature along s: no update


@pytest.fixture(scope="module")
def mismatched(r12a_camera, r12a_poses, r12a_board):
    """Six frames generated with pupil vignetting and fitted without: residuals of model mismatch."""
    obs, _ = synthetic_observations(r12a_camera, r12a_poses, r12a_board, seed=4, pupil_vignetting=True)
    frames = tuple(sorted(r12a_poses))[:6]
    bap = obs.bap.select(np.isin(obs.bap.frame, frames))
    mic = obs.mic.select(np.arange(len(obs.mic)) % 4 == 0)
    layout = ParameterLayout(r12a_camera, frames, two_pitches=True)
    x0 = layout.pack(perturbed_camera(r12a_camera, seed=4), {f: r12a_poses[f] for f in frames})
    return Residuals(layout, bap, mic, r12a_board), x0


def test_quasi_newton_and_gauss_newton_reach_the_same_minimum(mismatched):
    res, x0 = mismatched
    sigma = {"uv": 1.0, "rho": 1.0, "mic": 1.0}
    x_gn, gn = levenberg_marquardt(res, x0, sigma=sigma, quasi_newton=False)
    x_qn, qn = levenberg_marquardt(res, x0, sigma=sigma)
    assert gn.converged and qn.converged and gn.quasi_newton_steps == 0
    assert abs(qn.cost_history[-1] - gn.cost_history[-1]) <= 1e-10 * gn.cost_history[-1]
    assert qn.iterations <= gn.iterations + 1
    n = res.layout.n_intrinsics
    scale = res.layout.scale[:n]
    assert np.max(np.abs(x_qn[:n] - x_gn[:n]) / scale) < 1e-3
