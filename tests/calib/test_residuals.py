"""Residuals of Θ against the model's projections; the grouped Jacobian against finite differences."""

from __future__ import annotations

import numpy as np

from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.residuals import Residuals
from plenocal.model.projection import micro_image_centres, project_bap


def test_residuals_match_model_projection(r12a_truth, r12a_poses, r12a_board, r12a_synthetic):
    r12a_camera = r12a_truth  # the camera that generated r12a_synthetic
    noisy, truth = r12a_synthetic
    lay = ParameterLayout(r12a_camera, tuple(sorted(r12a_poses)))
    res = Residuals(lay, noisy.bap, noisy.mic, r12a_board)
    x = lay.pack(r12a_camera, r12a_poses)
    # Zero on the noise-free observations.
    res_t = Residuals(lay, truth.bap, truth.mic, r12a_board)
    assert np.abs(res_t.residuals(x)).max() < 1e-8
    # Same as project_bap / micro_image_centres on a few rows.
    pred = res.predict(x)
    sl = res.term_slices()
    b = res.bap
    for i in (0, 1000, len(b) - 1):
        p_cam = r12a_poses[int(b.frame[i])].apply(r12a_board.node_points([b.node[i]]))
        ref = project_bap(r12a_camera, p_cam, [b.k[i]], [b.l[i]])[0]
        got = [pred[sl[n]][i] for n in ("u", "v", "rho")]
        np.testing.assert_allclose(got, ref, atol=1e-9)
    mic = micro_image_centres(r12a_camera, noisy.mic.k[:5], noisy.mic.l[:5])
    np.testing.assert_allclose(pred[sl["mic_u"]][:5], mic[:, 0], atol=1e-9)


def test_grouped_jacobian_matches_finite_differences(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    noisy, _ = r12a_synthetic
    lay = ParameterLayout(r12a_camera, tuple(sorted(r12a_poses)))
    res = Residuals(lay, noisy.bap, noisy.mic, r12a_board)
    x = lay.pack(r12a_camera, r12a_poses)
    J = res.jacobian(x)
    scale = lay.scale
    N = res.n_bap
    for j in [0, 3, 8, 10, 14, 15, 17, lay.index["pose[4].ry"], lay.index["pose[9].tz"]]:
        h = 1e-4 * scale[j]
        xp, xm = x.copy(), x.copy()
        xp[j] += h
        xm[j] -= h
        col = (res.residuals(xp) - res.residuals(xm)) / 2e-4
        if j < lay.n_intrinsics:
            ref = J.intrinsics[:, j]
        else:
            k = j - lay.n_intrinsics
            f, c = divmod(k, 6)
            ref = np.zeros(res.n_rows)
            rows = res.frame_index == f
            for t in range(res.n_terms_bap):
                ref[t * N : (t + 1) * N][rows] = J.poses[t][rows, c]
        assert np.abs(col - ref).max() <= 1e-6 * max(np.abs(col).max(), 1e-3), lay.names[j]
    # Structure: pose columns never touch MIC rows; F and the f_i do not touch MIC rows.
    assert np.all(J.intrinsics[3 * N :, lay.index["F_mm"]] == 0)
    assert np.all(J.intrinsics[3 * N :, lay.index["f1_mm"]] == 0)
