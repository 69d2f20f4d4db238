"""The robust stage's loose first round is a warm-up (``CalibrationOptions.warmup_iterations``).

Its end only sets the σ of the next Huber round, which re-solves to 1e-10. On the visible
real-optics set it crept for 372–475 of the solver's 500 iterations, so a machine's last bits
could turn "converged" into "not converged" and change which real-lens terms the data keep. Capped
and not counted, it may stop anywhere: the calibration still converges, to the same camera.
"""

from __future__ import annotations

import numpy as np

from plenocal.calib.calibrate import CalibrationOptions, calibrate
from plenocal.calib.synthetic import NoiseLevels, perturbed_camera, synthetic_observations

FRAMES = (0, 1, 3, 4, 6, 8, 9, 11)
NOISE = NoiseLevels(uv_px=0.2, rho_px=0.02, mic_px=0.06)
SAME_CAMERA_SIGMA = 0.01
"""Two solutions of one problem whose warm-ups stopped at different places agree to this fraction
of each parameter's σ (they are one least-squares minimum, reached from different starts)."""


def test_a_warm_up_stopped_at_its_budget_changes_nothing(r12a_truth, r12a_poses, r12a_board):
    poses = {f: r12a_poses[f] for f in FRAMES}
    noisy, _ = synthetic_observations(r12a_truth, poses, r12a_board, noise=NOISE, seed=5, rho_per_cluster=True)
    start = perturbed_camera(r12a_truth, relative=0.03, principal_point_px=30.0, seed=2)
    base = dict(frame_resampling=False, exit_pupil=False, depth_distortion=False)
    full = calibrate(noisy, start, r12a_board, options=CalibrationOptions(**base))
    cut = calibrate(noisy, start, r12a_board, options=CalibrationOptions(warmup_iterations=1, **base))
    assert full.converged and cut.converged
    warm = cut.stages["robust_0"]
    assert warm["warm_up"] and not warm["converged"] and warm["iterations"] == 1
    assert full.stages["robust_0"]["iterations"] > 1 and "warm_up" not in full.stages["robust_1"]
    names = list(full.layout.intrinsic_names)
    n = len(names)
    z = np.abs(cut.x[:n] - full.x[:n]) / full.std[:n]
    assert z.max() < SAME_CAMERA_SIGMA, dict(zip(names, np.round(z, 4), strict=True))


def test_exact_observations_converge_to_the_truth(r12a_truth, r12a_poses, r12a_board):
    """Noise-free observations: the MAD σ would be round-off (~1e-6 px) and the robust rounds
    chased it to their iteration cap; each term's σ is floored at ``MIN_TERM_SIGMA_PX``."""
    from plenocal.calib.calibrate import MIN_TERM_SIGMA_PX

    poses = {f: r12a_poses[f] for f in FRAMES}
    exact, _ = synthetic_observations(r12a_truth, poses, r12a_board, noise=NoiseLevels(uv_px=0.0, rho_px=0.0, mic_px=0.0),
                                      seed=5, rho_per_cluster=True)
    start = perturbed_camera(r12a_truth, relative=0.03, principal_point_px=30.0, seed=2)
    res = calibrate(exact, start, r12a_board, options=CalibrationOptions(frame_resampling=False, exit_pupil=False,
                                                                         depth_distortion=False))
    assert res.converged
    assert min(min(s["sigma"].values()) for k, s in res.stages.items() if k.startswith("robust")) >= MIN_TERM_SIGMA_PX
    xt = res.layout.pack(r12a_truth, poses)
    n = len(res.layout.intrinsic_names)
    scale = np.maximum(np.abs(xt[:n]), 1e-3)
    assert np.max(np.abs(res.x[:n] - xt[:n]) / scale) < 1e-6
