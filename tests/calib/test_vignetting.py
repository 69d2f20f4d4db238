"""Pupil vignetting in the BAP (u, v) residuals (CalibrationOptions.pupil_vignetting).

Synthetic observations generated WITH the shift (``project_bap(..., pupil_vignetting=True)``):
the option recovers the truth within a few σ; the chief-ray model (option off) is biased by many σ.
"""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.calibrate import CalibrationOptions, calibrate
from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.residuals import MeasuredPupilRadii, Residuals
from plenocal.calib.synthetic import bap_features, perturbed_camera, synthetic_observations
from plenocal.model.observations import MicroImageCentres
from plenocal.model.pupil import centroid_offset, shifted_offset, unshifted_offset

FRAMES = (0, 2, 4, 7, 9, 12)
KEY = ("F_mm", "D_mm", "d_mm", "u0_px", "v0_px", "f1_mm", "f2_mm", "f3_mm")


def measured_radii(camera) -> MeasuredPupilRadii:
    """The shift's radii as white images of ``camera`` measure them: its radius law, uniform (the
    synthetic shift uses the law at the MLA origin everywhere)."""
    from plenocal.model.white import InternalParameters, radius_law

    m, q = radius_law(camera)
    omega = InternalParameters(m, q, camera.micro_image_pitch_mm, lambda_=camera.lambda_,
                               f_number=camera.main_lens.f_number, pixel_size_mm=camera.sensor.pixel_size_mm)
    return MeasuredPupilRadii(omega, camera.grid)


@pytest.fixture(scope="module")
def vignetted(r12a_truth, r12a_poses, r12a_board):
    poses = {f: r12a_poses[f] for f in FRAMES}
    noisy, _ = synthetic_observations(r12a_truth, poses, r12a_board, seed=21, pupil_vignetting=True)
    return poses, noisy


def test_shifted_offset_solves_the_fixed_point():
    """The root of e_o = e + γ_s·g(e_o) everywhere, beyond the discs' tangency too (g continued
    linearly there), and the explicit inverse gives e back."""
    rng = np.random.default_rng(0)
    en = rng.uniform(0, 12, 500)
    rb = np.full(500, 5.3)
    rho = rng.uniform(-3.5, 3.5, 500)
    eo = shifted_offset(en, rho, 5.5, rb)
    assert np.mean(eo > 5.5 + 5.3) > 0.05  # some beyond the tangency, where the old clamp sat
    gain = -rho / rb  # |γ| ≤ 0.66: below the saturation here (γ·max g′ ≤ 0.4)
    err = eo - en - gain * centroid_offset(eo, rb, 5.5, extend=True)
    assert np.max(np.abs(err)) < 1e-12
    np.testing.assert_allclose(unshifted_offset(eo, rho, 5.5, rb), en, rtol=0, atol=1e-12)


def test_residuals_match_the_model(r12a_camera, r12a_poses, r12a_board):
    poses = {f: r12a_poses[f] for f in FRAMES[:2]}
    bap = bap_features(r12a_camera, poses, r12a_board, pupil_vignetting=True)
    chief = bap_features(r12a_camera, poses, r12a_board)
    lay = ParameterLayout(r12a_camera, tuple(sorted(poses)))
    x = lay.pack(r12a_camera, poses)
    on = Residuals(lay, bap, MicroImageCentres.empty(), r12a_board, pupil_vignetting=True).residuals(x)
    off = Residuals(lay, bap, MicroImageCentres.empty(), r12a_board).residuals(x)
    assert np.max(np.abs(on)) < 1e-8  # exact model up to the fixed-point tolerance
    n = len(bap)
    shift = np.hypot(off[:n], off[n : 2 * n])
    # The shift is a real effect: ~1 px RMS, more than 1.5 px at the largest |ρ|.
    assert 0.5 < np.sqrt(np.mean(shift**2)) < 2.0 and shift.max() > 1.5
    assert len(chief) > 0


@pytest.mark.parametrize("radii", ["white images", "radius law"])
@pytest.mark.parametrize(("two_pitches", "loss"), [(False, "linear"), (True, "huber")])
def test_recovered_with_the_option_biased_without(vignetted, r12a_camera, r12a_board, two_pitches, loss, radii):
    """From the ±3 % / ±50 px perturbed start, with the paper's one pitch and plain least squares
    and with the defaults (two pitches, Huber loss). This start used to settle in a wrong minimum
    ("converged", uv σ 3.5 px, d 6 500σ off) on some machines: the residuals were not a smooth
    function of Θ (a fixed point clamped 1e-6 px inside the discs' tangency, where the textbook
    centroid formula had lost all digits: a 1e-9 mm change of f_3 moved predictions by 0.37 px).
    The model is now smooth and single-valued (plenocal.model.pupil); 160 starts of every
    combination reach the truth (benchmarks/vignetting_starts.py). With the shift's radii measured
    by white images (as ``plenocal calibrate`` has them from Ω) and from the camera's radius law."""
    poses, noisy = vignetted
    start = perturbed_camera(r12a_camera, seed=3)
    opts = {"two_pitches": two_pitches, "loss": loss, "frame_resampling": False}
    measured = measured_radii(r12a_camera) if radii == "white images" else None
    on = calibrate(noisy, start, r12a_board, options=CalibrationOptions(pupil_vignetting=True, **opts),
                   pupil_radii=measured)
    assert on.pupil == {"vignetting": True, "radii": "white images (Ω)" if measured else "camera radius law"}
    off = calibrate(noisy, start, r12a_board, options=CalibrationOptions(**opts))
    assert on.converged
    xt = on.layout.pack(r12a_camera, poses)
    idx = [on.layout.index[n] for n in KEY]
    z_on = (on.x[idx] - xt[idx]) / on.std[idx]
    z_off = (off.x[idx] - xt[idx]) / off.std[idx]
    assert np.all(np.abs(z_on) < 4), dict(zip(KEY, z_on.round(2), strict=True))
    assert np.max(np.abs(z_off)) > 20, dict(zip(KEY, z_off.round(2), strict=True))
    # Noise is recovered with the option; the chief-ray model leaves systematic error.
    assert on.sigma["uv"] == pytest.approx(0.3, rel=0.05)
    assert off.rmse["uv_px"] > 1.2 * on.rmse["uv_px"]


def test_same_calibration_for_any_thread_count(vignetted, r12a_camera, r12a_board):
    """The shift's kernels and the solver give the same bytes with 1 and 2 numba threads."""
    import numba

    _, noisy = vignetted
    start = perturbed_camera(r12a_camera, seed=3)
    opts = CalibrationOptions(pupil_vignetting=True, frame_resampling=False)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = calibrate(noisy, start, r12a_board, options=opts)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = calibrate(noisy, start, r12a_board, options=opts)
    finally:
        numba.set_num_threads(before)
    assert one.x.tobytes() == two.x.tobytes() and one.covariance.tobytes() == two.covariance.tobytes()


def test_unfocused_camera_has_no_shift_and_finite_residuals():
    """upc-s (f = d, R_b = |q|/s = 0.03 px): the shift's R_b → 0 limit is 0, not 0/0."""
    from plenocal.model.projection import pupil_shift, pupil_unshift
    from plenocal.sim.dataset import FrameSelection, plan_images
    from plenocal.sim.groundtruth import FeatureOracle
    from plenocal.sim.presets import preset

    p = preset("upc-s", small=True)
    cam = p.camera
    _, poses = plan_images(p, seed=1, frames=FrameSelection(), oracle=FeatureOracle(cam))
    frames = sorted(poses)[:2]
    bap = bap_features(cam, {f: poses[f] for f in frames}, p.plan.board)
    assert len(bap) > 20
    uv = bap.uv
    shifted = pupil_shift(cam, uv, bap.rho, bap.k, bap.l)
    np.testing.assert_array_equal(shifted, uv)
    mic = cam.grid.centres(bap.k, bap.l)
    np.testing.assert_array_equal(pupil_unshift(uv, bap.rho, mic, 5.0, np.full(len(bap), 0.0)), uv)
    lay = ParameterLayout(cam, tuple(frames))
    x = lay.pack(cam, {f: poses[f] for f in frames})
    on = Residuals(lay, bap, MicroImageCentres.empty(), p.plan.board, pupil_vignetting=True).residuals(x)
    assert np.all(np.isfinite(on)) and np.max(np.abs(on)) < 1e-8
