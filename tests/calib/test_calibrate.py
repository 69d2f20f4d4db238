"""Joint calibration on synthetic R12-A observations: recovery, convergence, robustness."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.calibrate import CalibrationOptions, calibrate
from plenocal.calib.residuals import Residuals
from plenocal.calib.solver import levenberg_marquardt
from plenocal.calib.synthetic import add_gross_outliers, perturbed_camera, synthetic_observations

KEY = ("F_mm", "D_mm", "d_mm", "u0_px", "v0_px", "f1_mm", "f2_mm", "f3_mm")


def test_recovers_truth_within_3_sigma(r12a_calibration, r12a_camera, r12a_poses):
    res = r12a_calibration
    assert res.converged
    xt = res.layout.pack(r12a_camera, r12a_poses)
    z = (res.x[: res.layout.n_intrinsics] - xt[: res.layout.n_intrinsics]) / res.std[: res.layout.n_intrinsics]
    bad = {n: round(float(v), 2) for n, v in zip(res.layout.intrinsic_names, z, strict=True) if abs(v) > 3}
    assert not bad
    # Noise levels are recovered (0.3, 0.05, 0.1 px).
    assert res.sigma["uv"] == pytest.approx(0.3, rel=0.03)
    assert res.sigma["rho"] == pytest.approx(0.05, rel=0.03)
    assert res.sigma["mic"] == pytest.approx(0.1, rel=0.03)
    # Reported σ have the right order (paper-scale problem): F to a few 1e-2 mm.
    p = {q.name: q for q in res.parameters()}
    assert 0.005 < p["F_mm"].std < 0.2
    assert p["sensor_distance_mm"].std > 0


def test_converged_one_more_iteration_is_negligible(r12a_calibration, r12a_board, r12a_synthetic):
    res = r12a_calibration
    _noisy, _ = r12a_synthetic
    r_obj = Residuals(res.layout, res.kept_bap, res.kept_mic, r12a_board)
    sig = {k: v for k, v in res.sigma.items()}
    weights = None if res.options.weighting == "noise" else {k: 1.0 for k in sig}  # the cost calibration minimised
    _, rep0 = levenberg_marquardt(r_obj, res.x, sigma=sig, ftol=0.0, max_iterations=0, term_weights=weights)
    _x1, rep1 = levenberg_marquardt(r_obj, res.x, sigma=sig, ftol=0.0, max_iterations=1, term_weights=weights)
    c0 = rep1.cost_history[0]
    c1 = rep1.cost_history[-1]
    assert (c0 - c1) / c0 < 1e-10
    assert rep0.predicted_relative_decrease < 1e-10


def test_report_has_required_fields(r12a_calibration):
    rep = r12a_calibration.report()
    for k in ("uv_px", "rho_px", "mic_px"):
        assert np.isfinite(rep["rmse"][k])
    assert rep["rmse"]["uv_px"] == pytest.approx(0.3 * np.sqrt(2), rel=0.05)
    assert rep["n_bap"] > 17000 and rep["n_mic"] > 26000
    assert rep["converged"] is True and rep["iterations"] >= 1
    assert set(rep["parameters"]["F_mm"]) >= {"value", "std"}
    names = rep["correlation"]["names"]
    m = np.array(rep["correlation"]["matrix"])
    assert m.shape == (len(names), len(names)) and np.allclose(np.diag(m), 1)
    assert "F_mm" in r12a_calibration.parameter_table()


def test_gross_outliers_do_not_drag_the_solution(r12a_calibration, r12a_camera, r12a_board, r12a_synthetic):
    noisy, _ = r12a_synthetic
    bad, rows = add_gross_outliers(noisy, fraction=0.03, seed=5)
    res = calibrate(bad, perturbed_camera(r12a_camera, seed=1), r12a_board)
    clean = r12a_calibration
    idx = [res.layout.index[n] for n in KEY]
    z = (res.x[idx] - clean.x[idx]) / clean.std[idx]
    assert np.all(np.abs(z) < 3), dict(zip(KEY, np.round(z, 2), strict=True))
    # Nearly all outliers are rejected, and reported.
    assert res.rejected["uv"] >= 0.95 * rows.size
    assert res.rejected["bap"] < rows.size + 50
    assert len(res.rejected_features) == res.rejected["bap"]


def test_linear_loss_is_plain_least_squares(r12a_camera, r12a_board, r12a_synthetic):
    noisy, _ = r12a_synthetic
    res = calibrate(noisy, perturbed_camera(r12a_camera, seed=2), r12a_board,
                    options=CalibrationOptions(loss="linear"))
    assert res.converged and res.rejected["bap"] == 0 and res.n_bap == len(noisy.bap)


@pytest.mark.parametrize("freeze", [("tilt", "pitch", "distortion")])
def test_ablation_and_pinhole_run(r12a_camera, r12a_board, r12a_synthetic, freeze):
    noisy, _ = r12a_synthetic
    start = perturbed_camera(r12a_camera, seed=3)
    res = calibrate(noisy, start, r12a_board, options=CalibrationOptions(freeze=freeze))
    assert res.converged
    for n in ("theta_x_rad", "pitch0_mm", "pitch1_mm", "q1"):
        assert res.x[res.layout.index[n]] == res.layout.pack_intrinsics(start)[res.layout.index[n]]
    # NOUR with the unweighted Θ walks F to 0 from this start (without ρ nothing pins the depth
    # scale but the noise-weighted centres); with noise weights it converges.
    nour = calibrate(noisy, start, r12a_board, options=CalibrationOptions(pinhole_micro_lenses=True, weighting="noise"))
    assert nour.camera.n_types == 0 and np.isnan(nour.rmse["rho_px"])
    assert nour.layout.n_intrinsics == 17  # 15 + two pitches
    assert nour.rmse["uv_px"] < 0.6


def test_few_iterations_per_stage(r12a_calibration):
    """Gauss–Newton-first steps: the narrow valleys (F–D, u0–tx, d–f_i) are crossed in a few
    iterations, not crept along (the budget behind the ≤ 2 s calibration of R12-A-sized data)."""
    res = r12a_calibration
    assert res.solver.iterations <= 6
    robust = [v["iterations"] for k, v in res.stages.items() if k.startswith("robust")]
    assert len(robust) == 2 and sum(robust) <= 20
    assert all(v["termination"] == "predicted relative decrease < ftol" for k, v in res.stages.items() if k.startswith("robust"))


def test_unweighted_theta_from_a_start_whose_poses_are_far_off(r12a_truth, r12a_poses, r12a_board):
    """Seed 5027's perturbed start leaves (u, v) residuals of ~25 px: unweighted from there the
    first stage ran down F → 0 (500 iterations, "not converged"); the noise-weighted warm start
    keeps the geometry and the unweighted Θ converges to the truth."""
    noisy, _ = synthetic_observations(r12a_truth, r12a_poses, r12a_board, seed=5027)
    res = calibrate(noisy, perturbed_camera(r12a_truth, seed=5027), r12a_board,
                    options=CalibrationOptions(frame_resampling=False))
    assert res.converged and res.options.weighting == "none"
    p = {q.name: q for q in res.parameters()}
    F = r12a_truth.main_lens.focal_length_mm
    assert abs(p["F_mm"].value - F) < 3 * p["F_mm"].std
