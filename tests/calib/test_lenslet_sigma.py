"""Refractive micro-lenses: the white images' blur-disc trend, the decision, the systematic σ of the
paraxial d and f_i, and how report and verdict carry them."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.lenslets import (
    LENSLET_D_SYSTEMATIC,
    LENSLET_F_SYSTEMATIC,
    lenslet_record,
    lenslet_systematics,
    refractive_lenslets,
)
from plenocal.model.white import LensletFieldTrend
from plenocal.precalib.internals import lenslet_field_trend

S = 0.0055  # mm per px


def _trend(change: float, std: float) -> LensletFieldTrend:
    return LensletFieldTrend(5.0, (change,) * 3, (std * np.sqrt(3),) * 3, 6.0)


def test_the_decision_needs_both_the_size_and_the_significance():
    assert refractive_lenslets(_trend(-0.0217, 0.0003))  # the real-optics R12-B's whites
    assert not refractive_lenslets(_trend(0.0001, 0.0001))  # PRISM's thin lenslets
    assert not refractive_lenslets(_trend(-0.003, 0.0001))  # significant but below 0.5 %
    assert not refractive_lenslets(_trend(-0.018, 0.005))  # 3.6σ only
    assert not refractive_lenslets(None)


def test_the_systematic_goes_to_d_and_the_focal_lengths_only():
    values = {"F_mm": 49.8, "D_mm": 52.06, "d_mm": 0.3345, "f1_mm": 0.552, "f2_mm": 0.4827, "u0_px": 2033.0}
    sd = lenslet_systematics(values, _trend(-0.0217, 0.0003))
    assert set(sd) == {"d_mm", "f1_mm", "f2_mm"}
    assert sd["d_mm"] == pytest.approx(LENSLET_D_SYSTEMATIC * 0.3345)
    assert sd["f2_mm"] == pytest.approx(LENSLET_F_SYSTEMATIC * 0.4827)
    assert lenslet_systematics(values, _trend(0.0001, 0.0001)) == {}
    rec = lenslet_record(_trend(-0.0217, 0.0003), values)
    assert rec is not None and rec["refractive"] and "-2.17 ± 0.03 % at 5 mm" in str(rec["reason"])
    thin = lenslet_record(_trend(0.0001, 0.0001), values)
    assert thin is not None and not thin["refractive"] and thin["systematic"] == {} and "thin" in str(thin["reason"])
    assert lenslet_record(None, values) is None


def _white_rows(*, radial: float, radial_aperture: float = 0.0, tilt: float = 2.7e-7, seed: int = 0, n: int = 3000):
    """Variance-law rows (1/N², position px, type, 4σ² mm²) of three types at four apertures:
    R_a = |m|/N with a linear tilt trend and, optionally, a radial one (a main lens's pupil seen
    obliquely); R_b = |q_t|·(1 + tilt·Δu)·(1 + radial·r²), r in mm from the sensor's centre."""
    rng = np.random.default_rng(seed)
    pos = rng.uniform([0, 0], [4080, 3068], (n, 2))
    t = rng.integers(0, 3, n)
    xy = (pos - [2039.5, 1533.5]) * S
    r2 = np.sum(xy * xy, axis=1)
    q = np.array([0.0256, 0.0200, 0.0232])[t] * (1 + tilt * (pos[:, 0] - 2039.5)) * (1 + radial * r2)
    rows = []
    for N in (5.66, 8.0, 11.31, 16.0):
        ra = 0.159 / N * (1 - 1e-6 * (pos[:, 1] - 1533.5)) * (1 + radial_aperture * r2)
        y = ra**2 + q**2 + rng.normal(0, 2e-6, n)
        rows.append((np.full(n, 1 / N**2), pos, t, y))
    return tuple(np.concatenate(c) for c in zip(*rows, strict=True))


def test_the_trend_is_the_radial_change_of_the_blur_disc_whatever_the_tilt_and_centre():
    inv_n2, pos, typ, y = _white_rows(radial=-0.0008)  # −2 % at 5 mm
    ok = np.ones(len(y), dtype=bool)
    tr = lenslet_field_trend(inv_n2, pos, typ, y, ok, 3, pixel_size_mm=S, centre_px=(2039.5, 1533.5))
    assert tr is not None and tr.radius_mm == 5.0 and 13.0 < tr.reach_mm < 14.1
    # (1 + c r²)² = 1 + 2c r² + c² r⁴: the fit's r² term takes most of the r⁴ one; 0.1 % of it is left
    assert np.allclose(tr.relative_change, -0.02, atol=1.5e-3) and max(tr.std) < 5e-4
    assert refractive_lenslets(tr)
    shifted = lenslet_field_trend(inv_n2, pos, typ, y, ok, 3, pixel_size_mm=S, centre_px=(2139.5, 1433.5))
    assert shifted is not None and np.allclose(shifted.relative_change, tr.relative_change, atol=1e-3)


def test_a_main_lens_that_shrinks_its_pupil_off_axis_is_not_taken_for_refractive_lenslets():
    inv_n2, pos, typ, y = _white_rows(radial=0.0, radial_aperture=-0.0008)
    tr = lenslet_field_trend(inv_n2, pos, typ, y, np.ones(len(y), dtype=bool), 3, pixel_size_mm=S, centre_px=(2039.5, 1533.5))
    assert tr is not None and abs(tr.mean) < 3 * tr.mean_std + 2e-4
    assert not refractive_lenslets(tr)


def test_too_few_micro_images_or_one_aperture_give_no_trend():
    inv_n2, pos, typ, y = _white_rows(radial=-0.0008, n=30)  # ~40 rows a type
    assert lenslet_field_trend(inv_n2, pos, typ, y, np.ones(len(y), dtype=bool), 3, pixel_size_mm=S, centre_px=(0, 0)) is None
    inv_n2, pos, typ, y = _white_rows(radial=-0.0008)
    one = inv_n2 == inv_n2[0]
    assert lenslet_field_trend(inv_n2[one], pos[one], typ[one], y[one], np.ones(one.sum(), dtype=bool), 3,
                               pixel_size_mm=S, centre_px=(0, 0)) is None


def test_the_verdict_says_it_and_shows_the_paraxial_sigma():
    from plenocal.viz.verdict import intrinsic_rows, lenslet_findings, model_findings, parameter_sigmas

    values = {"d_mm": 0.3345, "f1_mm": 0.552}
    rec = lenslet_record(_trend(-0.0217, 0.0003), values)
    found = lenslet_findings(rec)
    assert [f.level for f in found] == ["info"] and "±2.1 % and ±5.5 %" in found[0].text
    assert [f.level for f in lenslet_findings(lenslet_record(_trend(0.0001, 0.0001), values))] == ["info"]
    # With the whites' word on the micro-lenses, the curved field no longer stands in for it.
    sel = {"exit_pupil": {"kept": True, "wald": 82.0, "threshold": 10.8},
           "depth_distortion": {"kept": True, "wald": 99.0, "threshold": 13.8}}
    assert [f.level for f in model_findings(sel, lenslets=rec)] == ["info"]
    assert [f.level for f in model_findings(sel)] == ["info", "warning"]
    cal = {"parameters": {"d_mm": {"value": 0.3345, "std": 0.0007, "std_frames": 0.002,
                                   "std_lenslets": LENSLET_D_SYSTEMATIC * 0.3345},
                          "f1_mm": {"value": 0.552, "std": 0.0013}}}
    sig = parameter_sigmas(cal)
    assert sig["d_mm"].std_lenslets == pytest.approx(0.0070245) and sig["d_mm"].sigma == 0.002
    assert sig["f1_mm"].std_lenslets is None
    rows = {r[0]: r for r in intrinsic_rows(sig)}
    assert rows["d [µm]"][1] == "334.5 ± 2.0" and "paraxial value ± 7.0 (σ_lenslets)" in rows["d [µm]"][2]
    # camera.json's uncertainty carries it when the report does not
    cal2 = {"parameters": {"d_mm": {"value": 0.3345, "std": 0.0007}}}
    cam = {"uncertainty": {"d_mm": 0.0007, "std_lenslets": {"d_mm": 0.007}}}
    assert parameter_sigmas(cal2, cam)["d_mm"].std_lenslets == 0.007
