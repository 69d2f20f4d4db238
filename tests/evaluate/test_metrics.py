"""Reprojection residuals and RMSEs (reference §9.1) on synthetic and reference observations."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.errors import DataError
from plenocal.evaluate.metrics import compute_residuals, evaluate_observations, summarize
from plenocal.model.camera import MicroLensArray
from plenocal.model.lattice import TypeLayout
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations


def _with_noise(obs: Observations, sigma_uv: float, sigma_rho: float, sigma_mic: float, seed: int = 1):
    rng = np.random.default_rng(seed)
    b, m = obs.bap, obs.mic
    n_uv = rng.normal(0, sigma_uv, (len(b), 2))
    n_rho = rng.normal(0, sigma_rho, len(b))
    n_mic = rng.normal(0, sigma_mic, (len(m), 2))
    noisy = Observations(
        BapFeatures(b.frame, b.k, b.l, b.u + n_uv[:, 0], b.v + n_uv[:, 1], b.rho + n_rho, b.node, b.cluster),
        MicroImageCentres(m.k, m.l, m.u + n_mic[:, 0], m.v + n_mic[:, 1]),
    )
    return noisy, n_uv, n_rho, n_mic


def test_noise_free_observations_have_zero_rmse(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    report = evaluate_observations(r12a_camera, r12a_poses, r12a_board, r12a_synthetic)
    o = report.overall
    assert o.n_bap == 16 * 45 * 4 and o.n_mic == len(r12a_synthetic.mic)
    for value in (o.uv_px, o.rho_px, o.bap_px, o.mic_px, o.total_px):
        assert value is not None and value < 1e-9
    assert o.sum_squared_residuals < 1e-15
    assert sorted(report.per_frame) == list(range(16)) and sorted(report.per_type) == [0, 1, 2]
    assert report.skipped_no_pose == {} and report.skipped_unlinked == 0


def test_rmse_matches_injected_noise(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    noisy, n_uv, n_rho, n_mic = _with_noise(r12a_synthetic, 0.5, 0.1, 0.2)
    res = compute_residuals(r12a_camera, r12a_poses, r12a_board, noisy)
    np.testing.assert_allclose(res.uv, n_uv, atol=1e-9)
    np.testing.assert_allclose(res.rho, n_rho, atol=1e-9)
    report = summarize(res)
    o = report.overall
    n = len(n_rho)
    assert o.uv_px == pytest.approx(np.sqrt(np.sum(n_uv**2) / n), rel=1e-9)
    assert o.uv_px == pytest.approx(0.5 * np.sqrt(2), rel=0.03)  # sqrt(E|e|^2) = sigma * sqrt(2)
    assert o.rho_px == pytest.approx(np.sqrt(np.mean(n_rho**2)), rel=1e-9)
    assert o.rho_px == pytest.approx(0.1, rel=0.05)
    assert o.bap_px == pytest.approx(np.sqrt((np.sum(n_uv**2) + np.sum(n_rho**2)) / n), rel=1e-9)
    assert o.mic_px == pytest.approx(np.sqrt(np.sum(n_mic**2) / len(n_mic)), rel=1e-9)
    ssr = np.sum(n_uv**2) + np.sum(n_rho**2) + np.sum(n_mic**2)
    assert o.sum_squared_residuals == pytest.approx(ssr, rel=1e-9)
    assert o.total_px == pytest.approx(np.sqrt(ssr / (len(n_mic) + 2 * n)), rel=1e-9)
    # per frame and per type agree with a direct computation
    f = noisy.bap.frame
    sel = f == 7
    assert report.per_frame[7].n_bap == int(sel.sum())
    assert report.per_frame[7].uv_px == pytest.approx(np.sqrt(np.sum(n_uv[sel] ** 2) / sel.sum()), rel=1e-9)
    types = r12a_camera.mla.types.type_of(noisy.bap.k, noisy.bap.l)
    sel = types == 2
    assert report.per_type[2].rho_px == pytest.approx(np.sqrt(np.mean(n_rho[sel] ** 2)), rel=1e-9)
    mt = r12a_camera.mla.types.type_of(noisy.mic.k, noisy.mic.l)
    assert report.per_type[1].n_mic == int(np.sum(mt == 1))
    assert report.per_type[1].mic_px == pytest.approx(np.sqrt(np.sum(n_mic[mt == 1] ** 2) / np.sum(mt == 1)), rel=1e-9)
    js = report.to_json()
    assert js["rmse"]["uv_px"] == o.uv_px and js["n_bap"] == n and js["per_frame"]["7"]["n_mic"] == 0


def test_reference_worked_example(r12a_camera, r12a_poses, r12a_board):
    """Reference §13.1: residual (−0.259, +0.329) px and ρ residual −0.051 px."""
    obs = Observations(
        BapFeatures([15], [156], [69], [3628.126070], [1403.006881], [-3.554117], [26]),
        MicroImageCentres([156], [69], [3623.550], [1397.913]),
    )
    res = compute_residuals(r12a_camera, r12a_poses, r12a_board, obs)
    np.testing.assert_allclose(res.uv[0], [-0.259, 0.329], atol=1e-3)
    assert res.rho[0] == pytest.approx(-0.051, abs=1e-3)
    np.testing.assert_allclose(res.mic_uv[0], [3623.550 - 3623.355, 1397.913 - 1398.072], atol=1e-3)
    assert summarize(res).overall.uv_px == pytest.approx(0.42, abs=5e-3)


def test_skipped_features_are_reported(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    poses = {f: p for f, p in r12a_poses.items() if f not in (3, 9)}
    b = r12a_synthetic.bap
    node = b.node.copy()
    node[:10] = -1  # frame 0, unlinked
    obs = Observations(BapFeatures(b.frame, b.k, b.l, b.u, b.v, b.rho, node), r12a_synthetic.mic)
    report = evaluate_observations(r12a_camera, poses, r12a_board, obs)
    per_frame = 45 * 4
    assert report.skipped_no_pose == {3: per_frame, 9: per_frame}
    assert report.skipped_unlinked == 10
    assert report.overall.n_bap == 16 * per_frame - 2 * per_frame - 10
    assert 3 not in report.per_frame and report.per_frame[0].n_bap == per_frame - 10
    js = report.to_json()["skipped"]
    assert js == {"features_without_pose": 360, "frames_without_pose": {"3": 180, "9": 180}, "unlinked_features": 10}


def test_bad_observations_raise(r12a_camera, r12a_poses, r12a_board):
    obs = Observations(BapFeatures([0], [1], [1], [0.0], [0.0], [0.0], [45]), MicroImageCentres.empty())
    with pytest.raises(DataError, match="node 45 but the 9x5 board has 45 nodes"):
        compute_residuals(r12a_camera, r12a_poses, r12a_board, obs)
    obs = Observations(BapFeatures([0], [176], [1], [0.0], [0.0], [0.0], [4]), MicroImageCentres.empty())
    with pytest.raises(DataError, match=r"micro-lens \(176, 1\) lies outside the 176x152 lattice"):
        compute_residuals(r12a_camera, r12a_poses, r12a_board, obs)


def test_pinhole_camera_has_no_rho(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    m = r12a_camera.mla
    pinhole = r12a_camera.replace(
        mla=MicroLensArray(m.lattice, m.pitch_mm, m.rotation_xyz_rad, m.translation_mm, (), TypeLayout(0))
    )
    report = evaluate_observations(pinhole, r12a_poses, r12a_board, r12a_synthetic)
    assert report.overall.rho_px is None and report.overall.bap_px is None
    assert report.overall.uv_px < 1e-9  # (u, v) do not depend on the micro-lens focal lengths
    assert sorted(report.per_type) == [-1]


def test_single_views_count_in_uv_and_not_in_rho(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    """A single view (ρ NaN: a node fitted in one micro-image) counts in the (u, v) RMSE and is
    left out of ρ's, overall, per frame and per type; the outlier rule judges it by (u, v)."""
    from plenocal.evaluate.outliers import split_outliers

    noisy, n_uv, n_rho, _ = _with_noise(r12a_synthetic, 0.5, 0.1, 0.2)
    single = np.zeros(len(noisy.bap), dtype=bool)
    single[::4] = True
    cols = noisy.bap.columns()
    cols["rho"] = np.where(single, np.nan, noisy.bap.rho)
    obs = Observations(BapFeatures(**cols), noisy.mic)
    report = summarize(compute_residuals(r12a_camera, r12a_poses, r12a_board, obs))
    o = report.overall
    assert o.n_bap == len(single)
    assert o.uv_px == pytest.approx(np.sqrt(np.sum(n_uv**2) / len(single)), rel=1e-9)
    assert o.rho_px == pytest.approx(np.sqrt(np.mean(n_rho[~single] ** 2)), rel=1e-9)
    sel = (noisy.bap.frame == 7) & ~single
    assert report.per_frame[7].rho_px == pytest.approx(np.sqrt(np.mean(n_rho[sel] ** 2)), rel=1e-9)
    res = compute_residuals(r12a_camera, r12a_poses, r12a_board, obs)
    split = split_outliers(res)
    assert "rho" in split.sigma_px and split.sigma_px["rho"] == pytest.approx(0.1, rel=0.1)
    assert not np.any(split.reason[single[res.bap_index]] == "rho")
