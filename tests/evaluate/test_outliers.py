"""The kept/rejected split of an evaluation: calibration's χ² rule on residuals."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.evaluate.metrics import Residuals, compute_residuals, evaluate_observations
from plenocal.evaluate.outliers import chi2_thresholds, robust_scale, split_outliers
from plenocal.model.observations import BapFeatures, MicroImageCentres, Observations

MISLINKED_FRAME = 7
N_MISLINKED = 15


def _noisy(obs: Observations, *, sigma_uv: float = 0.3, sigma_rho: float = 0.05, rho_bias: float = 0.0, seed: int = 3):
    rng = np.random.default_rng(seed)
    b, m = obs.bap, obs.mic
    n = len(b)
    return Observations(
        BapFeatures(b.frame, b.k, b.l, b.u + rng.normal(0, sigma_uv, n), b.v + rng.normal(0, sigma_uv, n),
                    b.rho + rho_bias + rng.normal(0, sigma_rho, n), b.node, b.cluster),
        MicroImageCentres(m.k, m.l, m.u + rng.normal(0, 0.1, len(m)), m.v + rng.normal(0, 0.1, len(m))),
    )


def _mislink(obs: Observations, board, *, frame: int = MISLINKED_FRAME, n: int = N_MISLINKED) -> tuple[Observations, np.ndarray]:
    """The first ``n`` features of ``frame`` linked to the next node along the row (10 mm off)."""
    b = obs.bap
    rows = np.flatnonzero(b.frame == frame)[:n]
    node = b.node.copy()
    node[rows] = np.where(node[rows] % board.columns == board.columns - 1, node[rows] - 1, node[rows] + 1)
    return Observations(BapFeatures(b.frame, b.k, b.l, b.u, b.v, b.rho, node, b.cluster), obs.mic), rows


def test_thresholds_are_the_chi2_quantiles():
    t = chi2_thresholds(1e-4)
    # P(χ²₂ > x²) = exp(−x²/2) = 1e-4 → x = √(2 ln 1e4); χ²₁: the two-sided Gaussian 1e-4 point.
    assert t["uv"] == pytest.approx(np.sqrt(2 * np.log(1e4)), rel=1e-9)
    assert t["rho"] == pytest.approx(3.8906, abs=1e-4) and t["mic"] == t["uv"]
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        chi2_thresholds(0.0)


def test_robust_scale_ignores_a_few_gross_values_but_not_a_bias():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 0.3, 5000)
    assert robust_scale(np.concatenate([x, np.full(50, 80.0)])) == pytest.approx(0.3, rel=0.05)
    assert robust_scale(x + 1.0) > 1.0  # about zero: a biased term is not "tight"


def test_mislinked_features_are_rejected_and_kept_out_of_the_headline(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    clean = _noisy(r12a_synthetic)
    bad, rows = _mislink(clean, r12a_board)
    rep = evaluate_observations(r12a_camera, r12a_poses, r12a_board, bad)
    rej = rep.rejection
    assert rej is not None and rej.probability == 1e-4
    rejected_rows = {(f["frame"], f["k"], f["l"], f["node"]) for f in rej.features}
    mislinked = {(int(bad.bap.frame[i]), int(bad.bap.k[i]), int(bad.bap.l[i]), int(bad.bap.node[i])) for i in rows}
    assert mislinked <= rejected_rows and len(rejected_rows) <= N_MISLINKED + 2  # ≈ 1e-4 of 2880 Gaussian ones
    assert rej.per_frame[MISLINKED_FRAME] >= N_MISLINKED
    assert rej.counts["bap"] == len(rej.features) and rej.counts["uv"] >= N_MISLINKED
    # Headline: the noise (σ√2 per point); with the rejected ones, tens of times more.
    assert rep.overall.uv_px == pytest.approx(0.3 * np.sqrt(2), rel=0.05)
    assert rej.all_observations.uv_px > 5 * rep.overall.uv_px
    assert rep.overall.n_bap == rej.all_observations.n_bap - rej.counts["bap"]
    assert rep.per_frame[MISLINKED_FRAME].uv_px == pytest.approx(0.3 * np.sqrt(2), rel=0.2)
    js = rep.to_json()
    assert js["per_frame"][str(MISLINKED_FRAME)]["n_rejected"] == rej.per_frame[MISLINKED_FRAME]
    assert js["rejected"]["counts"] == rej.counts and js["rejected"]["suspended"] is None
    assert js["rejected"]["rmse_all_observations"]["uv_px"] == rej.all_observations.uv_px
    assert {f["reason"] for f in js["rejected"]["features"]} <= {"uv", "rho", "uv+rho"}


def test_no_rule_keeps_everything(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    bad, _ = _mislink(_noisy(r12a_synthetic), r12a_board)
    rep = evaluate_observations(r12a_camera, r12a_poses, r12a_board, bad, reject_probability=None)
    assert rep.rejection is not None and rep.rejection.counts == {"bap": 0, "uv": 0, "rho": 0, "mic": 0}
    assert rep.overall.uv_px == rep.rejection.all_observations.uv_px > 1.0


def test_a_biased_term_is_not_called_outliers(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    """Every ρ 0.3 px off (a wrong camera): the RMSE shows it, the rule rejects (almost) nothing."""
    res = compute_residuals(r12a_camera, r12a_poses, r12a_board, _noisy(r12a_synthetic, rho_bias=0.3))
    split = split_outliers(res)
    assert split.counts()["rho"] <= 2
    assert split.sigma_px["rho"] == pytest.approx(1.4826 * 0.3, rel=0.05)  # the bias is in σ̂


def test_the_rule_is_suspended_when_it_would_reject_too_many(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    b = r12a_synthetic.bap
    half = b.frame % 2 == 0  # half the frames mislinked: not outliers any more
    node = np.where(half, np.where(b.node % r12a_board.columns == 0, b.node + 1, b.node - 1), b.node)
    obs = _noisy(Observations(BapFeatures(b.frame, b.k, b.l, b.u, b.v, b.rho, node, b.cluster), r12a_synthetic.mic))
    res = compute_residuals(r12a_camera, r12a_poses, r12a_board, obs)
    assert split_outliers(res).n_rejected_bap > 0.3 * len(b)
    capped = split_outliers(res, max_rejected_fraction=0.2)
    assert capped.n_rejected_bap == 0 and "not outliers" in capped.suspended


def test_rounding_errors_of_a_noise_free_fit_are_not_outliers():
    """Residuals of 1e-10 px with one of 1e-7 px: 1000 σ̂, but far below any physical noise."""
    n = 200
    uv = np.full((n, 2), 1e-10)
    uv[0] = 1e-7
    res = Residuals(np.arange(n), np.zeros(n, np.int64), np.zeros(n, np.int64), uv, np.full(n, 1e-10),
                    np.zeros((0, 2)), np.zeros(0, np.int64))
    split = split_outliers(res)
    assert split.n_rejected_bap == 0 and split.sigma_px["uv"] == 1e-6
    scaled = Residuals(res.bap_index, res.frame, res.lens_type, uv * 1e6, res.rho * 1e6, res.mic_uv, res.mic_type)
    assert split_outliers(scaled).reason[0] == "uv"  # 0.1 px among 1e-4 px residuals is one


def test_frame_by_frame_sigma_lets_a_noisier_frame_keep_its_features(r12a_camera, r12a_poses, r12a_board, r12a_synthetic):
    """ρ noise 0.005 px in most frames and 0.04 px in frame 3 (far from the focus planes): against a
    pooled σ̂ frame 3's ρ are "outliers"; judged frame by frame they are not, and a gross one still is."""
    clean = _noisy(r12a_synthetic, sigma_rho=0.005)
    b = clean.bap
    rng = np.random.default_rng(5)
    far = b.frame == 3
    rho = b.rho + np.where(far, rng.normal(0, 0.04, len(b)), 0.0)
    rho[np.flatnonzero(b.frame == 5)[0]] += 1.0  # one gross ρ error elsewhere
    obs = Observations(BapFeatures(b.frame, b.k, b.l, b.u, b.v, rho, b.node, b.cluster), clean.mic)
    res = compute_residuals(r12a_camera, r12a_poses, r12a_board, obs)
    pooled = split_outliers(res)
    assert np.count_nonzero(~pooled.keep_bap & (res.frame == 3)) > 50
    per = split_outliers(res, per_frame=True)
    assert np.count_nonzero(~per.keep_bap & (res.frame == 3)) <= 2
    assert per.sigma_px_per_frame[3]["rho"] == pytest.approx(0.04, rel=0.15)  # 1.4826·median|e| = σ
    assert per.sigma_px_per_frame[0]["rho"] == per.sigma_px["rho"]  # never below the pooled σ̂
    assert not per.keep_bap[np.flatnonzero(res.frame == 5)[0]]
