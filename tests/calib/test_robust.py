"""Rejection of whole clusters and frames (calib.robust) and the result checks (calib.plausibility)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.stats import binom, chi2

from plenocal.calib.calibrate import calibrate, robust_sigma
from plenocal.calib.plausibility import result_problems
from plenocal.calib.robust import (
    gross_threshold,
    inlier_group_rejection_probability,
    lower_median,
    reject_groups,
)
from plenocal.calib.synthetic import perturbed_camera
from plenocal.model.observations import BapFeatures, Observations


def test_lower_median_per_group():
    values = np.array([5.0, 1.0, 3.0, 10.0, 2.0, 7.0, 4.0])
    group = np.array([0, 0, 0, 1, 1, 2, 2])
    med, count = lower_median(values, group, 4)
    assert count.tolist() == [3, 2, 2, 0]
    assert med[:3].tolist() == [3.0, 2.0, 4.0] and np.isnan(med[3])


def test_inlier_group_rejection_probability_is_the_binomial_tail():
    t = gross_threshold(1e-3)
    assert chi2.sf(t, 2) == pytest.approx(1e-3)
    for n in (1, 2, 3, 8, 15):
        r = n // 2 + 1
        assert inlier_group_rejection_probability(n, t) == pytest.approx(binom.sf(r - 1, n, 1e-3), rel=1e-9)
    # and by simulation, for a group of 3 at a looser threshold
    rng = np.random.default_rng(0)
    z = rng.chisquare(2, size=(200_000, 3))
    t = gross_threshold(0.1)
    assert np.mean(np.sort(z, axis=1)[:, 1] > t) == pytest.approx(inlier_group_rejection_probability(3, t), rel=0.05)


def _residuals(rng, n_frames=6, n_nodes=10, per=8, sigma=0.1):
    frame = np.repeat(np.arange(n_frames), n_nodes * per)
    node = np.tile(np.repeat(np.arange(n_nodes), per), n_frames)
    e = rng.normal(0, sigma, size=(frame.size, 2))
    return frame, node, e


def test_a_shifted_cluster_is_rejected_as_a_unit_and_reported():
    rng = np.random.default_rng(1)
    frame, node, e = _residuals(rng)
    sel = (frame == 2) & (node == 4)
    e[sel] += [6.0, -3.0]  # a mislinked node: every feature off by the same few px
    e[sel][0] = 0.0
    e[5] = [9.0, 9.0]  # a single gross feature: not a group
    out = reject_groups(e[:, 0], e[:, 1], frame, node, sigma_uv=0.1)
    assert [(c["frame"], c["node"]) for c in out.clusters] == [(2, 4)] and out.frames == []
    assert not out.keep[sel].any() and out.keep[~sel].all()
    c = out.clusters[0]
    assert c["n_features"] == 8 and c["median_residual_sigma"] > 50
    assert c["median_offset_px"] == pytest.approx([6.0, -3.0], abs=0.2)
    assert "mislinked" in c["reason"] and c["inlier_rejection_probability"] < 1e-15


def test_a_frame_that_does_not_fit_is_rejected_as_a_unit():
    rng = np.random.default_rng(2)
    frame, node, e = _residuals(rng)
    rows = frame == 3
    e[rows] += rng.normal(0, 3.0, size=(int(rows.sum()), 2))  # every feature off, in every direction
    out = reject_groups(e[:, 0], e[:, 1], frame, node, sigma_uv=0.1)
    rejected = {c["frame"] for c in out.clusters} | {f["frame"] for f in out.frames}
    assert rejected == {3} and not out.keep[rows].any() and out.keep[~rows].all()


def test_inliers_and_model_mismatch_are_kept():
    """Clusters a few σ off (model mismatch on real data) are information, not gross errors."""
    rng = np.random.default_rng(3)
    frame, node, e = _residuals(rng, n_frames=16, n_nodes=45)
    key = frame * 45 + node
    e += rng.normal(0, 0.2, size=(key.max() + 1, 2))[key]  # per-cluster systematic offsets, 2 σ of the noise
    sigma_uv = robust_sigma(e.reshape(-1))  # as calibrate measures it: the noise level of all residuals
    out = reject_groups(e[:, 0], e[:, 1], frame, node, sigma_uv=sigma_uv)
    assert not out.any and out.keep.all()


def test_calibration_rejects_a_mislinked_cluster_and_keeps_the_estimate(r12a_calibration, r12a_camera, r12a_board,
                                                                        r12a_synthetic):
    noisy, _ = r12a_synthetic
    bap = noisy.bap
    cols = {k: v.copy() for k, v in bap.columns().items()}
    sel = (bap.frame == 5) & (bap.node == 12)
    other = (bap.frame == 5) & (bap.node == 13)
    cols["node"][sel], cols["node"][other] = 13, 12  # two neighbouring nodes' labels swapped
    bad = Observations(BapFeatures(**cols), noisy.mic)
    res = calibrate(bad, perturbed_camera(r12a_camera, seed=1), r12a_board)
    clusters = res.rejected_groups["clusters"]
    assert sorted((c["frame"], c["node"]) for c in clusters) == [(5, 12), (5, 13)]
    assert res.rejected["clusters"] == 2 and res.rejected["in_groups"] == sel.sum() + other.sum()
    assert res.report()["rejected_groups"]["clusters"][0]["reason"].startswith("mislinked cluster")
    clean = r12a_calibration
    n = clean.layout.n_intrinsics
    z = (res.x[:n] - clean.x[:n]) / clean.std[:n]
    assert np.all(np.abs(z) < 1), dict(zip(clean.layout.intrinsic_names, np.round(z, 2), strict=True))
    assert res.converged and set(res.report()["converged_stages"]) >= {"mla", "robust_0", "robust_groups", "final"}


def test_result_checks(r12a_calibration):
    res = r12a_calibration
    assert result_problems(res, nominal_focal_length_mm=50.0) == []
    assert result_problems(res, nominal_focal_length_mm=None) == []
    far = result_problems(res, nominal_focal_length_mm=100.0)
    assert len(far) == 1 and far[0].startswith("F = 49.") and "-50 % from the nominal 100 mm" in far[0]
    # not converged: any stage but a warm-up (the robust stage's loose first round)
    stages = {**res.stages, "robust_1": {**res.stages["robust_1"], "converged": False, "termination": "cap"}}
    bad = dataclasses.replace(res, stages=stages)
    assert not bad.converged and result_problems(bad, nominal_focal_length_mm=50.0) == ["not converged: stage robust_1 (cap)"]
    assert res.stages["robust_0"]["warm_up"]
    warm = {**res.stages, "robust_0": {**res.stages["robust_0"], "converged": False, "termination": "cap"}}
    assert dataclasses.replace(res, stages=warm).converged
    # one or two frames; a σ that could not be computed
    one = dataclasses.replace(res, poses={0: res.poses[0]})
    assert "calibrated from 1 frame(s)" in result_problems(one, nominal_focal_length_mm=50.0)[0]
    two = dataclasses.replace(res, poses={f: res.poses[f] for f in sorted(res.poses)[:2]})
    (why,) = result_problems(two, nominal_focal_length_mm=50.0)
    assert why.startswith("calibrated from 2 frame(s), need >= 3") and "frame resampling" in why
    cov = res.covariance.copy()
    i = res.layout.index["d_mm"]
    cov[i, i] = np.nan
    nan = dataclasses.replace(res, covariance=cov)
    assert any(p.startswith("no finite σ for d_mm") for p in result_problems(nan, nominal_focal_length_mm=50.0))


def test_result_checks_micro_lens_focal_length_ratio(r12a_calibration):
    res = r12a_calibration
    cam = res.camera
    tiny_d = cam.replace(mla=dataclasses.replace(cam.mla, translation_mm=(*cam.mla.translation_mm[:2],
                                                                         -(cam.sensor.distance_mm - 0.0003))))
    assert tiny_d.d_mm == pytest.approx(0.0003)
    problems = result_problems(dataclasses.replace(res, camera=tiny_d), nominal_focal_length_mm=50.0)
    assert any("f1 / d = " in p and "no plenoptic camera" in p for p in problems)


def test_radius_slope_against_the_white_images(r12a_calibration, r12a_truth):
    """The calibrated camera's m = ∓d(F − e)/(2(D − e)) against Ω's: the truth's Ω passes; an Ω
    whose m is 15 % off (what a 6 mm declaration of a 5 mm board does to the calibration's m) fails
    with a line naming the board and the pixel size; the slope's gradient is the finite difference's."""
    from plenocal.calib.plausibility import RADIUS_SLOPE_TOLERANCE, radius_slope, radius_slope_problem
    from plenocal.model.white import InternalParameters, radius_law

    res = r12a_calibration
    m_true, q_true = radius_law(r12a_truth)
    omega = InternalParameters(m_true, q_true, r12a_truth.micro_image_pitch_mm)
    assert radius_slope_problem(res, omega) is None
    assert result_problems(res, nominal_focal_length_mm=50.0, omega=omega) == []
    off = dataclasses.replace(omega, m_mm=m_true / 0.85)
    (problem,) = result_problems(res, nominal_focal_length_mm=50.0, omega=off)
    assert problem == radius_slope_problem(res, off)
    assert "-15 % from the" in problem and "target.square_mm" in problem and "pixel_size_mm" in problem
    inside = dataclasses.replace(omega, m_mm=m_true * (1 + 0.8 * RADIUS_SLOPE_TOLERANCE))
    assert radius_slope_problem(res, inside) is None
    m, g = radius_slope(res.layout, res.x)
    assert m == pytest.approx(radius_law(res.camera)[0], rel=1e-12)
    for name in ("F_mm", "D_mm", "d_mm"):
        i, h = res.layout.index[name], 1e-6 * abs(res.x[res.layout.index[name]])
        xp, xm = res.x.copy(), res.x.copy()
        xp[i] += h
        xm[i] -= h
        assert g[i] == pytest.approx((radius_slope(res.layout, xp)[0] - radius_slope(res.layout, xm)[0]) / (2 * h), rel=1e-6)
