"""The report's verdict: numbers rounded to σ, the two σ, and the status from every stage's findings."""

from __future__ import annotations

import copy
import json

import pytest

from plenocal.viz.verdict import (
    assemble,
    detection_findings,
    display_unit,
    evaluation_findings,
    parameter_sigmas,
    precalibration_findings,
    round_to_sigma,
)


@pytest.mark.parametrize(
    ("value", "sigma", "expected"),
    [
        (49.76959317, 0.378, ("49.77", "0.38")),  # the example
        (553.9188645, 18.39, ("554", "18")),
        (553.9188645, 183.9, ("550", "180")),
        (0.05, 0.0996, ("0.05", "0.10")),  # σ rounds up to the next decade: still 2 digits
        (-2.73e-05, 4.9e-05, ("-0.000027", "0.000049")),
        (127.4543579, 0.0014062, ("127.4544", "0.0014")),
        (12.5, None, ("12.5", "—")),
        (12.5, 0.0, ("12.5", "—")),
    ],
)
def test_round_to_sigma(value, sigma, expected):
    assert round_to_sigma(value, sigma) == expected


def test_display_units():
    assert display_unit("f2_mm", 0.506) == ("f2", "µm", 1e3)
    assert display_unit("D_mm", 56.7) == ("D", "mm", 1.0)
    assert display_unit("theta_y_rad", 5e-5) == ("θy", "µrad", 1e6)
    assert display_unit("lambda", 0.99) == ("lambda", "", 1.0)


def _calibration(**over) -> dict:
    doc = {
        "format": "plenocal-calibration", "converged": True, "termination": "ok", "n_bap": 994, "n_mic": 1500, "n_frames": 12,
        "frames": list(range(12)), "rmse": {"uv_px": 0.05, "rho_px": 0.01, "mic_px": 0.02},
        "rejected": {"bap": 6, "uv": 3, "rho": 3, "mic": 1}, "options": {"reject_probability": 1e-4},
        "parameters": {
            "F_mm": {"value": 49.71696, "std": 0.3741, "frozen": False},
            "D_mm": {"value": 56.70214, "std": 0.4269, "frozen": False},
            "d_mm": {"value": 0.3255365, "std": 0.002388, "frozen": False},
            "u0_px": {"value": 553.9, "std": 18.4, "frozen": False},
            "f1_mm": {"value": 0.579024, "std": 0.004256, "frozen": False},
        },
        "correlation": {"names": ["F_mm", "D_mm"], "matrix": [[1.0, 0.99998], [0.99998, 1.0]]},
        "stages": {"robust_0": {"converged": True}},
    }
    doc.update(over)
    return doc


def _camera() -> dict:
    return {"configuration": "galilean", "sensor": {"width_px": 1000, "height_px": 800, "pixel_size_mm": 0.0055},
            "mla": {"lattice": {"kind": "hexagonal-rows", "width": 44, "height": 40}, "focal_lengths_mm": [0.579]},
            "main_lens": {"f_number": 4.0}, "focus_distance_mm": 450.0}


def test_a_good_calibration_is_green_with_its_numbers_rounded_to_sigma():
    v = assemble({"calibration": _calibration(), "camera": _camera()})
    assert (v.status, v.css, v.reasons) == ("calibrated", "ok", [])
    rows = {r[0]: r[1] for r in v.intrinsics}
    assert rows["F [mm]"] == "49.72 ± 0.37" and rows["d [µm]"] == "325.5 ± 2.4" and rows["f1 [µm]"] == "579.0 ± 4.3"
    assert rows["u0 [px]"] == "554 ± 18"
    assert "F = 49.72 ± 0.37 mm" in v.headline[0] and "(6 rejected)" in v.headline[1]
    assert any("F and D slide together" in f.text for f in v.findings)
    assert ["calibration", "features", "6 (3 (u, v), 3 ρ)", "residual beyond the χ² rule, p = 0.0001"] in v.rejections


def test_std_frames_is_shown_flagged_when_it_disagrees_and_the_larger_one_is_used():
    cal = _calibration()
    cal["parameters"]["F_mm"]["std_frames"] = 1.9  # 5.1× the Jacobian's 0.374
    cal["parameters"]["D_mm"]["std_frames"] = 0.5  # 1.2×: no flag
    sig = parameter_sigmas(cal)
    assert sig["F_mm"].sigma == 1.9 and sig["F_mm"].disagreement == pytest.approx(1.9 / 0.3741)
    assert sig["D_mm"].sigma == 0.5 and sig["d_mm"].std_frames is None
    v = assemble({"calibration": cal, "camera": _camera()})
    rows = {r[0]: r for r in v.intrinsics}
    assert rows["F [mm]"][1] == "49.7 ± 1.9"
    assert rows["F [mm]"][2].startswith("frame resampling (larger)") and "differ 5.1×" in rows["F [mm]"][2]
    assert rows["D [mm]"][2] == "frame resampling (larger)" and rows["d [µm]"][2] == "Jacobian"
    # 1.9/49.7 = 3.8 %: weakly determined, and the two σ disagree → amber, both said.
    assert v.status == "calibrated with warnings"
    texts = [f.text for f in v.reasons]
    assert any("F_mm: the two σ disagree by 5.1×" in t for t in texts)
    assert any(t.startswith("F = 49.7 ± 1.9 mm: weakly determined") for t in texts)


def test_std_frames_from_camera_uncertainty_when_the_report_has_none():
    cam = _camera() | {"uncertainty": {"F_mm": {"std": 0.3741, "std_frames": 0.9}, "D_mm": 0.4269}}
    sig = parameter_sigmas(_calibration(), cam)
    assert sig["F_mm"].std_frames == 0.9 and sig["D_mm"].std_frames is None


def test_an_undetermined_focal_length_or_no_convergence_is_red():
    cal = _calibration()
    cal["parameters"]["F_mm"]["std_frames"] = 8.0  # 16 % of F
    v = assemble({"calibration": cal})
    assert v.status == "not trustworthy" and v.css == "bad"
    assert any("the data do not determine it" in f.text for f in v.reasons)
    v = assemble({"calibration": _calibration(converged=False, termination="max iterations")})
    assert v.status == "not trustworthy" and v.reasons[0].text == "did not converge (max iterations)"
    assert assemble({}).status == "not trustworthy"


def test_too_many_calibration_rejections():
    assert assemble({"calibration": _calibration(rejected={"bap": 30, "uv": 30, "rho": 0, "mic": 0})}).status == "calibrated with warnings"
    assert assemble({"calibration": _calibration(rejected={"bap": 200, "uv": 200, "rho": 0, "mic": 0})}).status == "not trustworthy"


def test_precalibration_findings():
    doc = {"apertures": [{"f_number": 4.0, "used": False, "reason": "micro-images touch"},
                         {"f_number": 8.0, "used": True}, {"f_number": 16.0, "used": True}],
           "type_confusion": 0.02, "initial_camera": {"mla_tilt_xy_rad": [-1.02e-4, 6.8e-5]},
           "radius_law_field": {"m_gradient_mm_per_px": [3e-7, -4e-7]}, "internal_parameters": {"m_mm": -0.1},
           "pixel_variance_px2": 0.075, "unblurred_weight": 0.01, "warnings": ["unblurred light in type 2"]}
    f = precalibration_findings(doc, sensor_size_px=(1000, 800))
    texts = {x.text: x.level for x in f}
    assert texts["white image at N = 4.0 left out: micro-images touch"] == "info"
    assert texts["unblurred light in type 2"] == "warning"
    assert any(t.startswith("joint type confusion 0.02") and lvl == "warning" for t, lvl in texts.items())
    assert "measured MLA tilt θx, θy = (-102, 68) µrad" in texts
    # |∇m| = 5e-7 mm/px over a 1281 px diagonal = 6.4e-4 mm = 0.64 % of |m|
    assert any("changing by 0.64 % across the sensor diagonal" in t for t in texts)
    assert precalibration_findings({"apertures": [{"f_number": 8.0, "used": True}]})[0].level == "error"


def test_linking_notes_that_differ_in_their_numbers_are_one_line_with_ranges():
    """The real-optics R12-B's report listed 16 near-identical lines, one per frame ("rules out 556
    of 560 placements (log-likelihood ratio ≥ 2475 over 79 cells) …"): one line, each number that
    differs as its range."""
    note = ("the board's printed extent in the image rules out {} of {} placements (log-likelihood ratio ≥ {} over {} cells); "
            "upright convention: node 0 top-left chosen among 2 labellings fitting equally")
    values = [(556, 560, 2475, 79), (532, 536, 146, 43), (620, 624, 4233, 81)]
    frames = [{"frame": i, "role": "calibration", "linking": {"ok": True, "note": note.format(*v)}} for i, v in enumerate(values)]
    frames.append({"frame": 9, "role": "calibration", "linking": {"ok": True, "note": "upright convention: node 0 top-left chosen"}})
    texts = [x.text for x in detection_findings({"frames": frames})[0]]
    assert texts == ["linking: " + note.format("532–620", "536–624", "146–4233", "43–81") + " — 3 frames",
                     "linking: upright convention: node 0 top-left chosen — 1 frame"]


def test_detection_findings_count_frames_skipped_and_rejections_per_reason():
    frames = [{"frame": i, "role": "calibration", "counts": {"rejected_border": 3, "clusters_noise": 1, "corners": 20},
               "linking": {"ok": i != 2, "reason": "4 barycentres" if i == 2 else "", "unlinked_features": 7 if i == 2 else 0,
                           "note": "upright convention: node 0 top-left chosen (|roll| 3°, 177°)" if i != 2 else ""}}
              for i in range(4)]
    f, rows = detection_findings({"frames": frames})
    texts = [x.text for x in f]
    assert "1 of 4 calibration frames not linked to the board, left out: 2 (4 barycentres)" in texts
    assert "linking: upright convention: node 0 top-left chosen — 3 frames" in texts
    assert ["detection", "micro-image corners", "12", "too close to the micro-image border"] in rows
    assert ["detection", "features", "7", "their frame could not be linked to the board"] in rows
    frames[0]["linking"]["ok"] = frames[1]["linking"]["ok"] = False
    assert any(x.level == "warning" for x in detection_findings({"frames": frames})[0])  # 3 of 4 lost


def _evaluation() -> dict:
    rej = {"rule": "calibration's χ² rule", "counts": {"bap": 15, "uv": 15, "rho": 0, "mic": 0}, "per_frame": {"15": 15},
           "calibration_counts": {"bap": 15}}
    return {"rmse": {"uv_px": 0.053, "rho_px": 0.01, "mic_px": 0.02}, "n_bap": 600, "n_mic": 1500,
            "per_frame": {"15": {"n_bap": 10, "n_rejected": 15}}, "rejected": rej,
            "holdout": {"rmse": {"uv_px": 0.07, "rho_px": 0.01}, "n_bap": 230, "frames_evaluated": [100, 101],
                        "rejected": {"rule": "held-out rule", "counts": {"bap": 0, "uv": 0, "rho": 0, "mic": 0}}}}


def test_evaluation_findings():
    f, rows, rmse = evaluation_findings(_evaluation(), calibration_uv_px=0.05)
    assert rmse[0][:2] == ["evaluation: calibration frames, calibrated poses", "0.053 px"]
    assert rmse[1][:2] == ["evaluation: 2 held-out frames, poses re-estimated", "0.07 px"]
    assert ["evaluation", "features of the calibration frames", "15 (15 (u, v), 0 ρ)",
            "residual beyond the calibration's χ² rule, re-applied"] in rows
    assert [x.level for x in f] == ["warning"] and "frame 15 lost 15 of 25 features" in f[0].text
    bad = copy.deepcopy(_evaluation())
    bad["holdout"]["rmse"]["uv_px"] = 0.2  # 4× calibration's
    assert any(x.level == "warning" and "generalises poorly" in x.text for x in evaluation_findings(bad, calibration_uv_px=0.05)[0])
    bad["holdout"]["rmse"]["uv_px"] = 3.0
    assert any(x.level == "error" for x in evaluation_findings(bad, calibration_uv_px=0.05)[0])
    bad["holdout"]["rmse"]["uv_px"] = 0.07
    bad["holdout"]["rejected"]["suspended"] = "the rule would reject 300 of 400 features"
    assert any(x.level == "error" and "300 of 400" in x.text for x in evaluation_findings(bad, calibration_uv_px=0.05)[0])


def test_calibration_findings_report_priors():
    """A prior used is always said (info); one the calibration lands far from is a warning."""
    from plenocal.viz.verdict import calibration_findings

    doc = {"converged": True, "priors": [
        {"name": "F_mm", "mean": 50.0, "std": 2.0, "value": 50.4123, "value_std": 0.21, "offset_in_prior_sigma": 0.2,
         "conflicts_with_data": False},
        {"name": "focus_distance_mm", "mean": 1000.0, "std": 10.0, "value": 1100.0, "value_std": 3.0,
         "offset_in_prior_sigma": 10.0, "conflicts_with_data": True},
    ]}
    found, _ = calibration_findings(doc)
    (f_info,) = [f for f in found if "F_mm" in f.text]
    assert f_info.level == "info" and "50.41 ± 0.21" in f_info.text and "+0.2 σ of the prior" in f_info.text
    (f_warn,) = [f for f in found if "focus_distance_mm" in f.text]
    assert f_warn.level == "warning" and "disagree" in f_warn.text


def test_a_prior_in_conflict_with_the_data_alone_is_red():
    """A user's prior judged against the data-only solution (calib.calibrate.data_only_solution):
    in conflict, the verdict is "not trustworthy" and says what the data alone give and what moved."""
    from plenocal.viz.verdict import calibration_findings

    q = {"name": "F_mm", "mean": 45.0, "std": 1e-6, "origin": "option", "value": 45.0, "value_std": 1e-6,
         "offset_in_prior_sigma": 0.001, "data_only": {"value": 49.7097, "std": 0.0496, "std_frames": 0.0831},
         "conflict_sigma": 56.7, "conflicts_with_data": True, "moved_in_data_sigma": {"D_mm": -95.0, "d_mm": -59.4}}
    found, _ = calibration_findings({"converged": True, "priors": [q]})
    (f,) = [x for x in found if "F_mm" in x.text]
    assert f.level == "error" and "without it they give 49.710 ± 0.083 (56.7 combined σ away)" in f.text
    assert "moved D −95.0σ".replace("−", "-") in f.text
    v = assemble({"calibration": _calibration(priors=[q])})
    assert v.status == "not trustworthy" and f in v.reasons


def test_failed_checks_written_anyway_and_too_few_frames_are_red():
    from plenocal.viz.verdict import calibration_findings

    doc = _calibration(checks={"passed": False, "failed": ["F = 49.7 mm is -50 % from the nominal 100 mm"],
                               "written_anyway": True})
    v = assemble({"calibration": doc})
    assert v.status == "not trustworthy"
    assert any("written despite a failed check" in r.text and "nominal 100 mm" in r.text for r in v.reasons)
    found, _ = calibration_findings(_calibration(n_frames=2, frames=[0, 1]))
    assert any(f.level == "error" and "calibrated from 2 frame(s), fewer than 3" in f.text for f in found)


def test_focal_length_far_from_the_nominal_names_the_pixel_size():
    """F 8 % from the nominal focal length (what a pixel size declared 6.0 µm for 5.5 µm does) is a
    warning naming the pixel size; 1 % is not; the radius-law slope is said as information."""
    from plenocal.viz.verdict import declaration_findings

    params = {"F_mm": {"value": 53.69, "std": 0.3, "std_frames": 1.33, "frozen": False}}
    doc = {"parameters": params, "consistency": {"nominal_focal_length_mm": 50.0,
                                                 "radius_slope": {"relative": 0.0723}}}
    found = declaration_findings(doc)
    (warn,) = [f for f in found if f.level == "warning"]
    assert "+7.4 % from the nominal 50 mm" in warn.text and "pixel_size_mm" in warn.text
    assert any(f.level == "info" and "+7.2 % from the white images'" in f.text for f in found)
    params["F_mm"]["value"] = 50.5
    assert [f for f in declaration_findings(doc) if f.level == "warning"] == []
    params["F_mm"].update(value=56.0, std_frames=3.0)  # 12 %, but F itself known to 5 % only: not judged here
    assert [f for f in declaration_findings(doc) if f.level == "warning"] == []


def test_the_main_lens_model_and_what_a_real_lens_means():
    """A thin lens chosen: one info line. A curved field: a warning that d and f_i are effective
    thin-lenslet values, and, when the centres do not determine e, one that F and D carry its σ."""
    from plenocal.viz.verdict import model_findings

    thin = model_findings({"exit_pupil": {"kept": False, "wald": 0.1, "threshold": 10.8},
                           "depth_distortion": {"kept": False, "wald": 3.6, "threshold": 13.8}})
    assert [f.level for f in thin] == ["info"] and "thin lens" in thin[0].text
    real = model_findings({"exit_pupil": {"kept": True, "wald": 0.7, "threshold": 10.8},
                           "depth_distortion": {"kept": True, "wald": 3575.0, "threshold": 13.8}})
    assert [f.level for f in real] == ["info", "warning", "warning"]
    assert "exit pupil, depth distortion" in real[0].text and "f_i" in real[1].text and "W = 0.7" in real[2].text
    pupil = model_findings({"exit_pupil": {"kept": True, "wald": 82.0, "threshold": 10.8},
                            "depth_distortion": {"kept": True, "wald": 99.0, "threshold": 13.8}})
    assert [f.level for f in pupil] == ["info", "warning"]
    assert model_findings(None) == [] and model_findings({}) == []


def test_a_limited_model_field_is_a_warning_and_explains_the_rejections():
    field = {"radius_mm": 6.35, "reach_mm": 11.4, "rejected_beyond": 180, "max_ratio": 1.5,
             "rings": [{"inner_mm": 5.0, "outer_mm": 6.0, "ratio": 1.25}, {"inner_mm": 7.0, "outer_mm": 8.0, "ratio": 2.2},
                       {"inner_mm": 8.0, "outer_mm": 9.0, "ratio": 10.1}]}
    v = assemble({"calibration": _calibration(rejected={"bap": 200, "uv": 200, "rho": 0, "mic": 0}, model_field=field)})
    assert v.status == "not trustworthy"  # the rejections stay an error: the intrinsics were fitted with them
    texts = [f.text for f in v.findings]
    assert any("180 of them beyond the model's field (6.3 mm" in t for t in texts)
    assert any(t.startswith("the model describes the lens to 6.3 mm") and "2.2–10.1×" in t for t in texts)
    unlimited = assemble({"calibration": _calibration(model_field={"radius_mm": None, "reach_mm": 12.1, "rings": []})})
    assert not any("model describes the lens" in f.text for f in unlimited.findings)


def test_rejections_are_judged_within_the_model_field_when_calibration_counted_it():
    """The real-optics R12-B's shape: 14 % rejected, nearly all beyond the field — a warning that
    counts them, not "too many to be outliers"; rejections within the field still decide."""
    base = {"radius_mm": 6.35, "reach_mm": 11.4, "max_ratio": 1.5, "rings": [{"inner_mm": 7.0, "outer_mm": 8.0, "ratio": 2.2}]}
    ro = _calibration(rejected={"bap": 531, "uv": 226, "rho": 292, "mic": 6}, n_bap=3388,
                      model_field=base | {"rejected_beyond": 490, "features_beyond": 1500})
    v = assemble({"calibration": ro})
    assert v.status == "calibrated with warnings"
    texts = [f.text for f in v.findings]
    assert "490 of the 531 features calibration rejected lie beyond the model's field (6.3 mm" in "\n".join(texts)
    assert not any("within the model's field rejected" in t for t in texts)  # 41 of 2419: 1.7 %, below 2 %
    inside = _calibration(rejected={"bap": 531, "uv": 226, "rho": 292, "mic": 6}, n_bap=3388,
                          model_field=base | {"rejected_beyond": 200, "features_beyond": 1500})
    v = assemble({"calibration": inside})
    assert v.status == "not trustworthy"
    assert any(f.text.startswith("331 of 2419 features within the model's field rejected (14%): too many") for f in v.reasons)


def test_a_frame_whose_rejections_lie_beyond_the_model_field_is_not_called_mislinked():
    doc = copy.deepcopy(_evaluation())
    feats = [{"frame": 15, "u": 3900.0 + i, "v": 2900.0, "reason": "uv"} for i in range(12)] + \
            [{"frame": 15, "u": 2040.0 + i, "v": 1530.0, "reason": "uv"} for i in range(3)]
    doc["rejected"]["features"] = feats
    field = {"radius_mm": 6.4, "radius_px": 1163.6, "centre_px": [2037.0, 1535.0]}
    f, _, _ = evaluation_findings(doc, calibration_uv_px=0.05, model_field=field)
    assert "frame 15 lost 15 of 25 features to rejection — 12 of them beyond the model's field" in f[0].text
    f, _, _ = evaluation_findings(doc, calibration_uv_px=0.05, model_field={"radius_mm": None})
    assert "probably linked to the wrong nodes" in f[0].text


def test_a_frame_rejected_by_its_blur_alone_is_not_called_mislinked():
    """plenocal's double-Gauss render: its calibration frame 0 at 372 mm (0.92 z_c) lost 42 of 74 features,
    31 by ρ alone; with the true camera and pose its kept features fit to 1.05 px (0.6 px on the
    other frames): the thin-lens blur model fails there, the links are right."""
    doc = copy.deepcopy(_evaluation())
    doc["rejected"]["features"] = ([{"frame": 15, "u": 2040.0, "v": 1530.0, "reason": "rho"} for _ in range(9)]
                                   + [{"frame": 15, "u": 2040.0, "v": 1530.0, "reason": r} for r in ("uv", "uv+rho", "uv+rho")]
                                   + [{"frame": 15, "u": 2040.0, "v": 1530.0, "reason": "uv"} for _ in range(3)])
    f, _, _ = evaluation_findings(doc, calibration_uv_px=0.05, model_field={"radius_mm": None})
    assert "frame 15 lost 15 of 25 features to rejection — 9 of them by their blur radius ρ alone" in f[0].text
    assert "wrong nodes" not in f[0].text


def test_a_scale_that_rests_on_a_data_chosen_exit_pupil_is_flagged():
    """F's regression on e (ρ·σ_F/σ_e) times the exit pupil's systematic 10 mm: the Tessar render's
    numbers (6.5 %: not trustworthy), the double-Gauss's (2.0 %: a warning); nothing when the user
    gave the pupil or the data left it out."""
    from plenocal.viz.verdict import exit_pupil_scale_findings

    def doc(rho, sF, se, F=46.56, kept=True, priors=()):
        return {"model_selection": {"exit_pupil": {"kept": kept}},
                "parameters": {"F_mm": {"value": F, "std": sF}, "exit_pupil_mm": {"value": 15.29, "std": se}},
                "correlation": {"names": ["F_mm", "exit_pupil_mm"], "matrix": [[1.0, rho], [rho, 1.0]]},
                "priors": list(priors)}

    tessar = exit_pupil_scale_findings(doc(-0.9988, 0.925, 3.04))
    assert [f.level for f in tessar] == ["error"] and "±6.5 %" in tessar[0].text and "--prior exit_pupil_mm" in tessar[0].text
    dg = exit_pupil_scale_findings(doc(-0.9934, 0.255, 2.53, F=49.51))
    assert [f.level for f in dg] == ["warning"] and "±2.0 %" in dg[0].text
    assert exit_pupil_scale_findings(doc(-0.3, 0.05, 3.0, F=49.9)) == []  # 0.1 %: nothing to say
    assert exit_pupil_scale_findings(doc(-0.9988, 0.925, 3.04, kept=False)) == []
    user = {"name": "exit_pupil_mm", "mean": 0.8, "std": 0.5, "origin": "--prior"}
    assert exit_pupil_scale_findings(doc(-0.9988, 0.925, 3.04, priors=[user])) == []
    default = {"name": "exit_pupil_mm", "mean": 0.0, "std": 50.0, "origin": "default: a photographic lens's exit pupil ..."}
    assert exit_pupil_scale_findings(doc(-0.9988, 0.925, 3.04, priors=[default]))[0].level == "error"
    # e left out, the scale probed with e 10 mm behind H′ (the telephoto render: F −3.2 %)
    probed = {"model_selection": {"exit_pupil": {"kept": False, "reason": "the camera with the exit pupil free did not converge",
                                                 "scale_probe": {"exit_pupil_mm": 10.0, "F_mm": 50.28, "converged": True,
                                                                 "F_change_percent": -3.18}}},
              "parameters": {"F_mm": {"value": 51.93, "std": 0.07}}}
    f = exit_pupil_scale_findings(probed)
    assert [x.level for x in f] == ["error"] and "F comes out -3.2 %" in f[0].text and "cannot place" in f[0].text
    probed["model_selection"]["exit_pupil"]["scale_probe"]["F_change_percent"] = -1.5
    assert [x.level for x in exit_pupil_scale_findings(probed)] == ["warning"]
    probed["model_selection"]["exit_pupil"]["scale_probe"]["converged"] = False
    assert exit_pupil_scale_findings(probed) == []


def test_a_not_trustworthy_verdict_is_one_console_line_and_run_exits_3(tmp_path, capsys):
    """``plenocal run`` and ``calibrate`` write everything, then exit 3 (EXIT_NOT_TRUSTWORTHY) with
    the verdict's first reason when it is "not trustworthy"; 0 with warnings."""
    from plenocal.cli.main import EXIT_NOT_TRUSTWORTHY, verdict_exit_code
    from plenocal.viz.verdict import not_trustworthy_line

    bad = _calibration(rejected={"bap": 300, "uv": 300, "rho": 0, "mic": 0}, converged=False, termination="max iterations")
    line = not_trustworthy_line(assemble({"calibration": bad, "camera": _camera()}))
    assert line is not None and line.startswith("not trustworthy — calibration: did not converge (max iterations) (and 1 more reason)")
    assert "\n" not in line
    assert not_trustworthy_line(assemble({"calibration": _calibration(), "camera": _camera()})) is None
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "report.json").write_text(json.dumps(bad))
    def verdict_code(folder):
        return verdict_exit_code(folder, command="run", written="every output is written")

    assert verdict_code(tmp_path) == EXIT_NOT_TRUSTWORTHY
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("plenocal run: not trustworthy — calibration: did not converge")
    (tmp_path / "calibration" / "report.json").write_text(json.dumps(_calibration()))
    assert verdict_code(tmp_path) == 0 and capsys.readouterr().err == ""


def test_a_radius_slope_off_the_whites_by_a_few_per_cent_is_a_warning():
    """The Tessar render's calibration with a wrong exit pupil: m −4.55 % at 2.7σ from the whites' —
    a warning; the same offset within 2σ, or 0.3 % at many σ (PRISM), stays information."""
    from plenocal.viz.verdict import declaration_findings

    def slope(rel, std):
        m = -0.1344
        return {"consistency": {"radius_slope": {"calibrated_mm": m, "std_mm": std, "std_frames_mm": std / 2,
                                                 "white_images_mm": m / (1 + rel), "relative": rel}}}

    (tessar,) = declaration_findings(slope(-0.0455, 0.00227))
    assert tessar.level == "warning" and tessar.text.startswith("the camera's radius-law slope m is -4.5 % (2.7σ)")
    assert [f.level for f in declaration_findings(slope(-0.0455, 0.004))] == ["info"]
    assert [f.level for f in declaration_findings(slope(0.0027, 0.00002))] == ["info"]


def test_a_pupil_the_white_images_left_out_is_judged_within_their_range():
    """The Tessar render: the whites left out the images' e = 15.3 mm (−4.6 % from their slope,
    +0.3 % without it), so e = 0 is known to ±3.2 mm, and the probe's −3.4 % for 10 mm becomes
    ±1.1 % — a warning, not "not trustworthy"; without the whites' record the probe's 3.4 % stays."""
    from plenocal.viz.verdict import exit_pupil_scale_findings

    pupil = {"kept": False, "values": {"exit_pupil_mm": 15.29}, "reason": "W = 25.3 > 10.8, but ...",
             "white_slope": {"with": -0.0455, "without": 0.0028, "margin": 0.01},
             "scale_probe": {"exit_pupil_mm": 10.0, "F_change_percent": -3.39, "converged": True}}
    (f,) = exit_pupil_scale_findings({"model_selection": {"exit_pupil": pupil}})
    assert f.level == "warning" and "within about ±3.2 mm" in f.text and "F is known to about ±1.1 %" in f.text
    del pupil["white_slope"]
    (f,) = exit_pupil_scale_findings({"model_selection": {"exit_pupil": pupil}})
    assert f.level == "error" and "these images cannot place" in f.text
    # the images could not place e at all; the whites judged the probe's pupil instead of theirs
    pupil = {"kept": False, "reason": "the camera with the exit pupil free did not converge",
             "white_slope": {"with": -0.021, "without": 0.002, "margin": 0.01, "exit_pupil_mm": 10.0},
             "scale_probe": {"exit_pupil_mm": 10.0, "F_change_percent": -3.22, "converged": True}}
    (f,) = exit_pupil_scale_findings({"model_selection": {"exit_pupil": pupil}})
    assert f.level == "warning" and "the camera with e = 10.0 mm was -2.1 % from it" in f.text and "±4.3 mm" in f.text
    assert "F is known to about ±1.4 %" in f.text


def test_a_warm_up_at_its_budget_is_not_a_warning():
    """The robust stage's loose first round stops at its iteration budget by design
    (``CalibrationOptions.warmup_iterations``): no finding; any other stage that did not converge
    is a warning."""
    from plenocal.viz.verdict import calibration_findings

    stages = {"robust_0": {"converged": False, "termination": "maximum number of iterations reached (safety net)",
                           "warm_up": True},
              "robust_1": {"converged": True}}
    found, _ = calibration_findings({"converged": True, "stages": stages})
    assert not [f for f in found if "did not converge" in f.text]
    stages["robust_1"] = {"converged": False, "termination": "cap"}
    found, _ = calibration_findings({"converged": True, "stages": stages})
    assert [f.text for f in found if "did not converge" in f.text] == ["stage robust_1 did not converge (cap)"]
