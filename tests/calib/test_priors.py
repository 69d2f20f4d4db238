"""Gaussian priors on intrinsics (``--prior F_mm=50±2``): parsing, the focus distance, and their
effect on the estimate and its σ on synthetic R12-A observations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plenocal.calib.calibrate import CalibrationOptions, calibrate
from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.priors import FOCUS_DISTANCE, Prior, check_priors, quantity
from plenocal.calib.synthetic import perturbed_camera
from plenocal.errors import UsageError


@pytest.mark.parametrize("text, expected", [
    ("F_mm=50±2", Prior("F_mm", 50.0, 2.0)),
    ("F=50+-2", Prior("F_mm", 50.0, 2.0)),
    (" focus_distance_mm = 1000 +/- 50 ", Prior(FOCUS_DISTANCE, 1000.0, 50.0)),
    ("d_mm=0.32±1e-3", Prior("d_mm", 0.32, 1e-3)),
])
def test_parse(text, expected):
    assert Prior.parse(text) == expected


@pytest.mark.parametrize("text", ["F_mm=50", "F_mm=50±0", "F_mm=50±-1", "F_mm=abc±2", "=50±2", "F_mm=nan±2"])
def test_parse_refuses(text):
    with pytest.raises(UsageError, match="--prior"):
        Prior.parse(text)


def test_check_refuses_unknown_duplicate_and_frozen(r12a_camera):
    lay = ParameterLayout(r12a_camera, (0,), two_pitches=True)
    check_priors(lay, [Prior("F_mm", 50, 2), Prior(FOCUS_DISTANCE, 1000, 50)])
    with pytest.raises(UsageError, match="unknown quantity"):
        check_priors(lay, [Prior("G_mm", 50, 2)])
    with pytest.raises(UsageError, match="twice"):
        check_priors(lay, [Prior("F_mm", 50, 2), Prior("F_mm", 51, 2)])
    with pytest.raises(UsageError, match="frozen"):
        check_priors(lay.with_frozen({"F_mm"}), [Prior("F_mm", 50, 2)])


def test_focus_distance_inverts_the_papers_initialisation(r12a_camera):
    """h from the model gives back H = D + 2d through eq:focusdist (Perwass 2010 eq. 17)."""
    lay = ParameterLayout(r12a_camera, (), two_pitches=True)
    x = lay.pack(r12a_camera, {})
    h, g = quantity(lay, x, FOCUS_DISTANCE)
    F, D, d = r12a_camera.main_lens.focal_length_mm, r12a_camera.D_mm, r12a_camera.d_mm
    H = abs(h / 2 * (1 - math.sqrt(1 - 4 * F / h)))
    assert H == pytest.approx(D + 2 * d, rel=1e-12)
    # Gradient against central differences.
    for name in ("F_mm", "D_mm", "d_mm"):
        i = lay.index[name]
        e = 1e-6 * abs(x[i])
        xp, xm = x.copy(), x.copy()
        xp[i] += e
        xm[i] -= e
        fd = (quantity(lay, xp, FOCUS_DISTANCE)[0] - quantity(lay, xm, FOCUS_DISTANCE)[0]) / (2 * e)
        assert g[i] == pytest.approx(fd, rel=1e-6)


def _calibrate(r12a_camera, r12a_board, r12a_synthetic, priors):
    noisy, _ = r12a_synthetic
    # The paper's thin lens: what a prior does, not which main-lens model the data choose (a prior
    # that fights the data would otherwise be absorbed by the exit pupil).
    opt = CalibrationOptions(priors=tuple(priors), frame_resampling=False, exit_pupil=False, depth_distortion=False)
    return calibrate(noisy, perturbed_camera(r12a_camera, seed=1), r12a_board, options=opt)


def test_vague_prior_changes_nothing(r12a_camera, r12a_board, r12a_synthetic, r12a_calibration):
    res = _calibrate(r12a_camera, r12a_board, r12a_synthetic, [Prior("F_mm", 40.0, 1e4)])
    ref = {p.name: p for p in r12a_calibration.parameters()}
    for p in res.parameters():
        assert p.value == pytest.approx(ref[p.name].value, abs=1e-3 * max(ref[p.name].std, 1e-12))
        assert p.std == pytest.approx(ref[p.name].std, rel=1e-3)
    (summary,) = res.report()["priors"]
    assert summary["name"] == "F_mm" and summary["mean"] == 40.0


def test_tight_prior_pins_and_its_sigma_combines(r12a_camera, r12a_board, r12a_synthetic, r12a_calibration):
    """A prior of σ_p ≪ the data's σ holds F at its mean (and the rest moves along F's valleys);
    a prior of σ_p equal to the data's σ, centred on the truth, gives σ ≈ σ_data/√2."""
    ref = {p.name: p for p in r12a_calibration.parameters()}
    F_true = r12a_camera.main_lens.focal_length_mm
    s_data = ref["F_mm"].std
    mean = F_true * 1.01  # 1 % off: tens of the data's σ
    res = _calibrate(r12a_camera, r12a_board, r12a_synthetic, [Prior("F_mm", mean, s_data / 100)])
    p = {q.name: q for q in res.parameters()}
    assert res.converged
    assert abs(p["F_mm"].value - mean) < 3 * s_data / 100
    assert p["F_mm"].std < s_data / 50
    res2 = _calibrate(r12a_camera, r12a_board, r12a_synthetic, [Prior("F_mm", ref["F_mm"].value, s_data)])
    p2 = {q.name: q for q in res2.parameters()}
    assert p2["F_mm"].std == pytest.approx(s_data / np.sqrt(2), rel=0.2)
    assert abs(p2["F_mm"].value - ref["F_mm"].value) < 0.1 * s_data


def test_prior_conflict_is_flagged(r12a_camera, r12a_board, r12a_synthetic, r12a_calibration):
    """A prior 30 of its σ away from what the data say, but not tight enough to win, is reported."""
    ref = {p.name: p for p in r12a_calibration.parameters()}
    s_data = ref["F_mm"].std
    res = _calibrate(r12a_camera, r12a_board, r12a_synthetic, [Prior("F_mm", ref["F_mm"].value + 30 * s_data, s_data)])
    warnings = [w for w in res.uncertainty_warnings() if w.startswith("prior F_mm=")]
    assert len(warnings) == 1 and "conflicts with the data" in warnings[0]
    (summary,) = res.report()["priors"]
    assert abs(summary["offset_in_prior_sigma"]) > 3 and summary["conflicts_with_data"] is True


def test_focus_distance_prior(r12a_camera, r12a_board, r12a_synthetic, r12a_calibration):
    lay = r12a_calibration.layout
    h_ref, g = quantity(lay, r12a_calibration.x, FOCUS_DISTANCE)
    s_h = float(np.sqrt(g @ r12a_calibration.covariance @ g))
    res = _calibrate(r12a_camera, r12a_board, r12a_synthetic, [Prior(FOCUS_DISTANCE, h_ref, s_h / 10)])
    (summary,) = res.report()["priors"]
    assert summary["value"] == pytest.approx(h_ref, abs=3 * s_h / 10)
    assert summary["value_std"] < s_h / 5
    assert "prior focus_distance_mm=" in res.parameter_table()


def test_a_prior_that_wins_is_judged_against_the_data_alone(r12a_camera, r12a_board, r12a_synthetic, r12a_calibration):
    """``F_mm=45±1e-6`` on data that put F at 49.7: the calibration sits on the prior's mean (its
    offset in the prior's σ says nothing), but the data-only re-solve puts F where the prior-free
    calibration does, so the conflict is flagged, with how far the prior pulled the other
    intrinsics; the calibration's checks refuse it. A prior the data agree with is not flagged."""
    from plenocal.calib.plausibility import result_problems

    ref = {p.name: p for p in r12a_calibration.parameters()}
    res = _calibrate(r12a_camera, r12a_board, r12a_synthetic, [Prior("F_mm", 45.0, 1e-6)])
    (summary,) = res.report()["priors"]
    assert abs(summary["offset_in_prior_sigma"]) < 3
    data = summary["data_only"]
    # The re-solve keeps the observations the prior-pulled robust stage kept (46 rejected instead of 6
    # here), so it lands near, not on, the prior-free calibration.
    assert data["value"] == pytest.approx(ref["F_mm"].value, abs=3 * ref["F_mm"].std)
    assert summary["conflicts_with_data"] is True and summary["conflict_sigma"] > 20
    assert abs(summary["moved_in_data_sigma"]["d_mm"]) > 10
    problems = result_problems(res, nominal_focal_length_mm=50.0)
    assert len(problems) == 1 and problems[0].startswith("prior F_mm=45±1e-06 conflicts with the data: without it")
    agree = _calibrate(r12a_camera, r12a_board, r12a_synthetic, [Prior("F_mm", ref["F_mm"].value, 0.5)])
    (ok,) = agree.report()["priors"]
    assert ok["conflicts_with_data"] is False and ok["conflict_sigma"] < 1
    assert result_problems(agree, nominal_focal_length_mm=50.0) == []


def test_a_prior_on_the_exit_pupil_puts_it_in_and_is_judged_with_the_images_systematic(
        r12a_camera, r12a_board, r12a_synthetic, r12a_calibration):
    """Thin-lens data leave e out by themselves (r12a_calibration); a user's prior on exit_pupil_mm
    (``--lens``, ``--prior``) says the lens has one: e is in, recorded as the user's, and the prior
    is judged against the data with the images' known systematic on e (IMAGE_SYSTEMATIC, 10 mm)
    added — a pupil 12 mm off, 12 of its σ and far beyond the data's ~1 mm σ, is no conflict; one
    60 mm off is."""
    from plenocal.calib.calibrate import prior_terms
    from plenocal.calib.priors import IMAGE_SYSTEMATIC

    assert not r12a_calibration.model_selection["exit_pupil"]["kept"]
    assert prior_terms(CalibrationOptions(priors=(Prior("exit_pupil_mm", 5.0, 1.0),))) == {"exit_pupil"}
    assert prior_terms(CalibrationOptions(priors=(Prior("exit_pupil_mm", 5.0, 1.0),), exit_pupil=False)) == set()
    assert prior_terms(CalibrationOptions(priors=(Prior("F_mm", 50.0, 1.0),))) == set()
    noisy, _ = r12a_synthetic
    start = perturbed_camera(r12a_camera, seed=1)
    for mean, conflict in ((12.0, False), (60.0, True)):
        opt = CalibrationOptions(priors=(Prior("exit_pupil_mm", mean, 1.0),), frame_resampling=False, depth_distortion=False)
        res = calibrate(noisy, start, r12a_board, options=opt)
        assert res.layout.exit_pupil and res.model_selection["exit_pupil"] == {"kept": True, "reason": "the user's prior on its parameter"}
        (q,) = [p for p in res.report()["priors"] if p["name"] == "exit_pupil_mm" and p["origin"] == "option"]
        s_data = max(q["data_only"]["std"], q["data_only"]["std_frames"] or 0.0)
        assert s_data < 3.0 and abs(q["data_only"]["value"]) < 3 * s_data  # the data alone: e ≈ 0
        expected = abs(q["data_only"]["value"] - mean) / math.hypot(s_data, IMAGE_SYSTEMATIC["exit_pupil_mm"], 1.0)
        assert q["conflict_sigma"] == pytest.approx(expected, rel=1e-6)
        assert q["conflicts_with_data"] is conflict
