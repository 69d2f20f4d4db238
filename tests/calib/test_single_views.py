"""Single views (a node fitted in one micro-image, ρ NaN) enter Θ by their (u, v) alone (issue 24)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.residuals import Residuals
from plenocal.calib.solver import levenberg_marquardt
from plenocal.model.observations import BapFeatures, Observations

SIGMA = {"uv": 0.3, "rho": 0.05, "mic": 0.1}  # the fixture's noise (px)


def _single_views(bap: BapFeatures, every: int) -> tuple[BapFeatures, np.ndarray]:
    """``bap`` with the ρ of every ``every``-th feature NaN, and that mask."""
    single = np.zeros(len(bap), dtype=bool)
    single[::every] = True
    cols = bap.columns()
    cols["rho"] = np.where(single, np.nan, bap.rho)
    return BapFeatures(**cols), single


def test_single_view_rows_are_zero_and_the_rest_unchanged(r12a_truth, r12a_poses, r12a_board, r12a_synthetic):
    noisy, _ = r12a_synthetic
    lay = ParameterLayout(r12a_truth, tuple(sorted(r12a_poses)))
    x = lay.pack(r12a_truth, r12a_poses)
    bap, single = _single_views(noisy.bap, 7)
    res_all = Residuals(lay, noisy.bap, noisy.mic, r12a_board)
    res = Residuals(lay, bap, noisy.mic, r12a_board)
    rho = res.term_slices()["rho"]
    gone = np.zeros(res.n_rows, dtype=bool)
    gone[rho] = ~res.rho_observed
    assert gone.sum() == single.sum() > 0
    np.testing.assert_array_equal(res.observed_rows, (~gone).astype(float))
    e, e_all = res.residuals(x), res_all.residuals(x)
    assert np.all(e[gone] == 0.0)
    np.testing.assert_array_equal(e[~gone], e_all[~gone])
    for method in ("analytic", "fd"):
        J, J_all = res.jacobian(x, method=method), res_all.jacobian(x, method=method)
        assert np.all(J.intrinsics[gone] == 0.0) and np.all(J.poses[2][~res.rho_observed] == 0.0)
        np.testing.assert_array_equal(J.intrinsics[~gone], J_all.intrinsics[~gone])
        np.testing.assert_array_equal(J.poses[:2], J_all.poses[:2])


def test_a_single_views_rho_does_not_move_the_solution(r12a_truth, r12a_poses, r12a_board, r12a_synthetic):
    """The solution with single views is a stationary point of the problem whose ρ of those
    features are whatever the solution predicts: their ρ carried nothing into it."""
    noisy, _ = r12a_synthetic
    frames = tuple(sorted(r12a_poses))[:6]
    keep = np.isin(noisy.bap.frame, frames)
    lay = ParameterLayout(r12a_truth, frames)
    bap, single = _single_views(noisy.bap.select(keep), 3)
    res = Residuals(lay, bap, noisy.mic, r12a_board)
    x0 = lay.pack(r12a_truth, {f: r12a_poses[f] for f in frames})
    x, rep = levenberg_marquardt(res, x0, sigma=SIGMA, ftol=1e-12)
    assert rep.converged
    predicted = np.empty(len(bap))
    predicted[res.order] = res.predict(x)[res.term_slices()["rho"]]
    cols = bap.columns()
    cols["rho"] = np.where(single, predicted, bap.rho)
    res_filled = Residuals(lay, BapFeatures(**cols), noisy.mic, r12a_board)
    x2, _ = levenberg_marquardt(res_filled, x, sigma=SIGMA, ftol=1e-12)
    moved = np.abs(x2 - x) / lay.scale
    assert moved.max() < 1e-5, lay.names[int(np.argmax(moved))]
    # ... while dropping their (u, v) too moves it: the views do carry information
    res_without = Residuals(lay, bap.select(~single), noisy.mic, r12a_board)
    x3, _ = levenberg_marquardt(res_without, x, sigma=SIGMA, ftol=1e-12)
    assert (np.abs(x3 - x) / lay.scale).max() > 1e-3


@pytest.fixture(scope="module")
def calibrated_with_single_views(r12a_camera, r12a_board, r12a_synthetic):
    from plenocal.calib.calibrate import calibrate
    from plenocal.calib.synthetic import perturbed_camera

    noisy, _ = r12a_synthetic
    bap, single = _single_views(noisy.bap, 5)
    obs = Observations(bap, noisy.mic, noisy.positions)
    return calibrate(obs, perturbed_camera(r12a_camera, seed=1), r12a_board), single


def test_calibration_keeps_single_views_and_stays_right(calibrated_with_single_views, r12a_truth, r12a_calibration):
    result, single = calibrated_with_single_views
    assert result.solver.converged
    # every single view that calibration did not reject is kept (it has no ρ row to reject it by)
    kept_single = int(np.count_nonzero(~result.kept_bap.has_rho))
    assert kept_single >= 0.99 * single.sum() - result.rejected.get("uv", 0)
    # ρ's RMSE is over the features that have a ρ: the noise (0.05 px), not diluted by zeros
    assert result.rmse["rho_px"] == pytest.approx(r12a_calibration.rmse["rho_px"], rel=0.1)
    assert 0.04 < result.rmse["rho_px"] < 0.06
    # the intrinsics agree with the calibration that has every ρ, within its σ
    sd = np.sqrt(np.diag(r12a_calibration.covariance))
    ref_lay, lay = r12a_calibration.layout, result.layout
    for name in ("F_mm", "D_mm", "d_mm", "f1_mm", "f2_mm", "f3_mm"):
        got, want = result.x[lay.index[name]], r12a_calibration.x[ref_lay.index[name]]
        assert abs(got - want) < 3 * sd[ref_lay.index[name]], name
