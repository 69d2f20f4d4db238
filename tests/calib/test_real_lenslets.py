"""What the thin-lenslet model makes of real micro-lenses' departures (docs/model.md, "Real
micro-lenses"): the two that move d and f_i are directions the observations cannot see."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plenocal.calib.calibrate import DEFAULT_RHO_FORM, CalibrationOptions, calibrate
from plenocal.calib.synthetic import NoiseLevels, synthetic_observations
from plenocal.io import read_camera_file, read_manifest, read_poses
from plenocal.model.camera import Distortion, MainLens, RhoForm
from plenocal.model.observations import BapFeatures, Observations
from plenocal.model.white import internal_parameters
from plenocal.sim.optics.spots import displaced_features

DATA = Path(__file__).resolve().parents[1] / "data" / "r12a"


@pytest.fixture(scope="module")
def setup():
    cam = read_camera_file(DATA / "camera.json").camera
    cam = cam.replace(distortion=Distortion(), main_lens=MainLens(cam.main_lens.focal_length_mm, 4.0), mia=None,
                      rho_form=RhoForm(DEFAULT_RHO_FORM))
    poses = {f: p for f, p in read_poses(DATA / "poses.json").items() if f < 8}
    board = read_manifest(DATA / "manifest.json").target
    _, clean = synthetic_observations(cam, poses, board, noise=NoiseLevels(0.0, 0.0, 0.0))
    return cam, board, clean


def _calibrate(cam, board, bap, mic):
    r = calibrate(Observations(bap, mic), cam, board, options=CalibrationOptions(frame_resampling=False, loss="linear"))
    c = r.camera
    rel = {"F": c.main_lens.focal_length_mm / cam.main_lens.focal_length_mm - 1, "D": c.D_mm / cam.D_mm - 1,
           "d": c.d_mm / cam.d_mm - 1,
           "f": np.array(c.mla.focal_lengths_mm) / np.array(cam.mla.focal_lengths_mm) - 1}
    return rel, r.rmse


def test_a_uniform_disparity_scale_is_absorbed_by_d_and_f(setup):
    """Every (u, v) scaled about its lens's axis by 1 + β0 (β0 = −1.25 %, the R12-A caps' constant
    term), ρ re-derived from the scaled disparities as detection does: the thin model takes it as
    d and f_i × (1 + β0) (within a tenth of β0) and leaves < 0.003 px of it in the (u, v) residuals,
    against the displacement’s own 0.09 px RMS (measured: d −1.29 %, 0.0006 px left) and detection's 0.1–0.2 px noise."""
    cam, board, clean = setup
    beta0 = -0.0125
    moved = displaced_features(cam, clean.bap, beta0, beta0)
    shift = np.hypot(moved.u - clean.bap.u, moved.v - clean.bap.v)
    assert np.sqrt(np.mean(shift**2)) > 0.05
    rel, rmse = _calibrate(cam, board, moved, clean.mic)
    assert rel["d"] == pytest.approx(beta0, abs=0.1 * abs(beta0))
    np.testing.assert_allclose(rel["f"], beta0, atol=0.1 * abs(beta0))
    assert rmse["uv_px"] < 0.003


def test_an_offset_of_the_whites_q_prime_moves_f_alone(setup):
    """Ω's q'_i 4 % high (the caps' whites: clear aperture, aberration, oblique incidence) enter ρ
    as a constant per type: f_i comes out 4 % short, nothing else moves, nothing is left."""
    cam, board, clean = setup
    b = clean.bap
    omega = internal_parameters(cam)
    types = cam.mla.types.type_of(b.k, b.l)
    q_prime_px = np.asarray(omega.q_prime_mm)[types] / cam.sensor.pixel_size_mm
    moved = BapFeatures(frame=b.frame, k=b.k, l=b.l, u=b.u, v=b.v, rho=b.rho + 0.04 * q_prime_px, node=b.node, cluster=b.cluster)
    rel, rmse = _calibrate(cam, board, moved, clean.mic)
    np.testing.assert_allclose(rel["f"], 1 / 1.04 - 1, atol=2e-4)
    assert abs(rel["d"]) < 1e-4 and abs(rel["F"]) < 1e-4 and abs(rel["D"]) < 1e-4
    assert rmse["rho_px"] < 1e-4
