"""F's and D's systematic σ through an exit pupil the images place badly: from the covariance when
the data estimated e, from the probe (scaled to the whites' range) when they left it out, none
when the lens is thin or the user gave e; written beside the data's σ and shown by the report."""

from __future__ import annotations

import pytest

from plenocal.calib.pupil_systematic import EXIT_PUPIL_SYSTEMATIC_MM, exit_pupil_systematic, whites_pupil_range


def _estimated(*, kept=True, priors=()):
    """The real-optics R12-B's kind: e kept by the data; F, D strongly tied to it."""
    names = ["F_mm", "D_mm", "exit_pupil_mm"]
    m = [[1.0, 0.9993, -0.52], [0.9993, 1.0, -0.50], [-0.52, -0.50, 1.0]]
    return {"model_selection": {"exit_pupil": {"kept": kept}},
            "parameters": {"F_mm": {"value": 49.80, "std": 0.094}, "D_mm": {"value": 52.06, "std": 0.098},
                           "exit_pupil_mm": {"value": 9.65, "std": 1.10}},
            "correlation": {"names": names, "matrix": m}, "priors": list(priors)}


def test_an_estimated_pupil_gives_the_regression_times_its_systematic():
    s = exit_pupil_systematic(_estimated())
    assert s is not None and s.kind == "regression"
    assert s.slope_mm_per_mm == pytest.approx(-0.52 * 0.094 / 1.10)
    assert s.relative["F_mm"] == pytest.approx(0.52 * 0.094 / 1.10 * EXIT_PUPIL_SYSTEMATIC_MM / 49.80)
    assert s.relative["D_mm"] == pytest.approx(0.50 * 0.098 / 1.10 * EXIT_PUPIL_SYSTEMATIC_MM / 52.06)
    # D at the lattice centre (D − Δ, Δ from the MLA's tilt and pitch) gets D's σ in mm
    doc = _estimated()
    doc["parameters"]["D_centre_mm"] = {"value": 52.01, "std": 0.10}
    c = exit_pupil_systematic(doc)
    assert c is not None and c.relative["D_centre_mm"] * 52.01 == pytest.approx(s.relative["D_mm"] * 52.06)
    assert exit_pupil_systematic(_estimated(kept=False)) is None  # a thin lens: nothing rests on e
    user = {"name": "exit_pupil_mm", "mean": 9.3, "std": 1.0, "origin": "--lens"}
    assert exit_pupil_systematic(_estimated(priors=[user])) is None


def test_every_other_parameter_gets_its_own_sigma_through_e():
    """Not only the scale moves with e: the principal point does too (the tilted Tessar render:
    u0 −26 px from e = 0 to 10 mm). Estimated e: each parameter's regression times 10 mm, in its
    own unit; e left out: the probe's change within the whites' range."""
    doc = _estimated()
    doc["correlation"]["names"].append("u0_px")
    m = doc["correlation"]["matrix"]
    for row, r in zip(m, (0.1, 0.1, 0.4), strict=True):
        row.append(r)
    m.append([0.1, 0.1, 0.4, 1.0])
    doc["parameters"]["u0_px"] = {"value": 2033.0, "std": 1.5}
    s = exit_pupil_systematic(doc)
    assert s is not None and s.absolute == pytest.approx({"u0_px": 0.4 * 1.5 / 1.10 * EXIT_PUPIL_SYSTEMATIC_MM})
    assert "u0_px" not in s.relative and "exit_pupil_mm" not in s.absolute
    pupil = {"kept": False, "values": {"exit_pupil_mm": 12.9}, "white_slope": {"with": -0.0222, "without": -0.0073, "margin": 0.01},
             "scale_probe": {"exit_pupil_mm": 10.0, "F_change_percent": -1.17, "D_change_percent": -1.3, "converged": True,
                             "changes": {"F_mm": -0.58, "u0_px": -25.7, "theta_x_rad": 1.6e-4}}}
    s = exit_pupil_systematic({"model_selection": {"exit_pupil": pupil}})
    factor = whites_pupil_range(pupil) / 10.0
    assert s is not None and s.absolute == pytest.approx({"u0_px": 25.7 * factor, "theta_x_rad": 1.6e-4 * factor})


def test_a_pupil_left_out_gives_the_probe_within_the_whites_range():
    """The field-corrector render at f/5.66 (thin lenslets): e = 12.9 mm left out by the whites
    (−2.2 % with it, −0.7 % without), the probe's e = 10 mm moving F −1.17 %, D −1.3 %."""
    pupil = {"kept": False, "values": {"exit_pupil_mm": 12.9}, "white_slope": {"with": -0.0222, "without": -0.0073, "margin": 0.01},
             "scale_probe": {"exit_pupil_mm": 10.0, "F_change_percent": -1.17, "D_change_percent": -1.3, "converged": True}}
    whites = whites_pupil_range(pupil)
    assert whites == pytest.approx(0.01 / (0.0149 / 12.9))
    s = exit_pupil_systematic({"model_selection": {"exit_pupil": pupil}})
    assert s is not None and s.kind == "whites" and s.whites_range_mm == pytest.approx(whites)
    assert s.relative == pytest.approx({"F_mm": 0.0117 * whites / 10.0, "D_mm": 0.013 * whites / 10.0})
    del pupil["white_slope"]  # the images could not place e at all: the probe's whole change
    s = exit_pupil_systematic({"model_selection": {"exit_pupil": pupil}})
    assert s is not None and s.kind == "probe" and s.relative == pytest.approx({"F_mm": 0.0117, "D_mm": 0.013})
    pupil["scale_probe"]["converged"] = False
    assert exit_pupil_systematic({"model_selection": {"exit_pupil": pupil}}) is None


def test_the_whites_judge_the_probes_pupil_too():
    """When the images could not place e at all (the camera with it free did not converge), the
    whites judge the probe's pupil 10 mm behind H′ against e = 0: when they favour e = 0 by more
    than their margin, F's systematic is the probe's change within their range of e; when they
    favour the probe's pupil (the telephoto render: e truly 13.2 mm, its e = 0 camera +4.5 % from
    the whites' slope) the probe's whole change stays."""
    probe = {"exit_pupil_mm": 10.0, "F_change_percent": -3.22, "D_change_percent": -3.24, "converged": True}
    thin = {"kept": False, "reason": "the camera with the exit pupil free did not converge: these images do not determine it",
            "scale_probe": probe, "white_slope": {"with": -0.031, "without": 0.002, "margin": 0.01, "exit_pupil_mm": 10.0}}
    assert whites_pupil_range(thin) == pytest.approx(0.01 / (0.033 / 10.0))
    s = exit_pupil_systematic({"model_selection": {"exit_pupil": thin}})
    assert s is not None and s.kind == "whites" and s.relative["F_mm"] == pytest.approx(0.0322 * 0.01 / 0.033)
    tele = {**thin, "white_slope": {"with": 0.011, "without": 0.0452, "margin": 0.01, "exit_pupil_mm": 10.0}}
    assert whites_pupil_range(tele) is None
    s = exit_pupil_systematic({"model_selection": {"exit_pupil": tele}})
    assert s is not None and s.kind == "probe" and s.relative["F_mm"] == pytest.approx(0.0322)
    near = {**thin, "white_slope": {"with": -0.0199, "without": 0.0132, "margin": 0.01, "exit_pupil_mm": 10.0}}
    assert whites_pupil_range(near) is None  # the quick demo: e = 0 not favoured by more than the margin


def test_the_report_shows_it_beside_the_data_sigma():
    from plenocal.viz.verdict import headline, intrinsic_rows, parameter_sigmas

    cal = {"parameters": {"F_mm": {"value": 50.425, "std": 0.04, "std_frames": 0.095, "std_exit_pupil": 0.60},
                          "D_mm": {"value": 52.65, "std": 0.11, "std_exit_pupil": 0.05}}}
    sig = parameter_sigmas(cal)
    rows = {r[0]: r for r in intrinsic_rows(sig)}
    assert rows["F [mm]"][1] == "50.425 ± 0.095" and "± 0.60 through the exit pupil (σ_pupil)" in rows["F [mm]"][2]
    assert "σ_pupil" not in rows["D [mm]"][2]  # smaller than the data's own σ: nothing to add
    assert headline(cal, None, sig)[0] == "F = 50.425 ± 0.095 mm (± 0.60 mm through the exit pupil)"
    cam = {"uncertainty": {"std_exit_pupil": {"F_mm": 0.6}}}
    assert parameter_sigmas({"parameters": {"F_mm": {"value": 50.4, "std": 0.04}}}, cam)["F_mm"].std_exit_pupil == 0.6
