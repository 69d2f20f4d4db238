"""A calibration frame linked with relative node ids (a whole-square shift of its labelling,
:func:`plenocal.calib.extrinsics.link_barycentres` with ``relative``) constrains the camera exactly
as its true labelling does: its free pose takes the shift."""

from __future__ import annotations

import numpy as np

from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.residuals import Residuals
from plenocal.calib.solver import levenberg_marquardt
from plenocal.calib.synthetic import perturbed_camera, synthetic_observations
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures


def test_a_frame_relabelled_by_a_shift_gives_the_same_intrinsics(r12a_truth, r12a_poses, r12a_board):
    """Six noisy frames; frame A's last column dropped (a partial view), then its ids shifted by one
    column (what a relative labelling may give). The same start (frame A's pose shifted to match):
    the same intrinsics, to the solver's tolerance, and A's pose moved by exactly one square."""
    board = r12a_board
    frames = tuple(sorted(r12a_poses))[:6]
    obs, _ = synthetic_observations(r12a_truth, {f: r12a_poses[f] for f in frames}, board, seed=11)
    a = frames[2]
    col = obs.bap.node % board.columns
    bap = obs.bap.select(~((obs.bap.frame == a) & (col == board.columns - 1)))
    mic = obs.mic.select(np.arange(len(obs.mic)) % 4 == 0)
    shifted_cols = bap.columns()
    shifted_cols["node"] = np.where(bap.frame == a, bap.node + 1, bap.node)
    shifted = BapFeatures(**shifted_cols)
    assert len(np.unique(bap.node[bap.frame == a])) >= 20  # the premise: a partial view of many nodes

    start = perturbed_camera(r12a_truth, seed=11)
    poses = {f: r12a_poses[f] for f in frames}
    step = np.array([board.square_mm, 0.0, 0.0])  # node n + 1 sits one square along +x from node n
    moved = dict(poses)
    moved[a] = Pose(poses[a].rotation, poses[a].translation - poses[a].rotation @ step)
    sigma = {"uv": 0.3, "rho": 0.05, "mic": 0.1}
    fits = []
    for features, start_poses in ((bap, poses), (shifted, moved)):
        layout = ParameterLayout(r12a_truth, frames, two_pitches=True)
        res = Residuals(layout, features, mic, board)
        x, report = levenberg_marquardt(res, layout.pack(start, start_poses), sigma=sigma)
        assert report.converged
        fits.append((layout, x))
    (layout, x_true), (_, x_rel) = fits
    n = layout.n_intrinsics
    assert np.max(np.abs(x_rel[:n] - x_true[:n]) / layout.scale[:n]) < 1e-4  # 1.4e-6 here: the solver's tolerance
    p_true, p_rel = layout.unpack_poses(x_true)[a], layout.unpack_poses(x_rel)[a]
    np.testing.assert_allclose(p_rel.rotation, p_true.rotation, atol=1e-9)
    np.testing.assert_allclose(p_rel.translation, p_true.translation - p_true.rotation @ step, atol=1e-6)
