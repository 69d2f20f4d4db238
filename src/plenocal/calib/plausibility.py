"""Checks of a calibration result before it is written: converged, and physically plausible.

A solver that stops at a stationary point has "converged" whatever the data; these checks catch
the results that are numbers but not a camera — a micro-lens array 0.3 µm from the sensor, a
50 mm lens calibrated at 17 mm, σ that could not be computed, a single view — so that
``plenocal calibrate`` refuses to write them (``--allow-failed-checks`` writes them, marked).
Each bound is named after the quantity it bounds and is loose: it stops the absurd, never a
merely surprising result (real R12-A observations give F = 53.2 mm for a 50 mm lens: +6 %).

Beyond the absurd, two checks see what a wrong declaration does to a camera that fits as well as
the right one (issue 25): the calibrated radius-law slope against the one the white images
measured (:func:`radius_slope_problem`: the board's square size, the pixel size), and a user's
prior against what the data alone say (:data:`plenocal.calib.calibrate.PRIOR_CONFLICT_SIGMA`);
and a calibration needs the frames its σ can be checked on (:data:`MIN_CALIBRATION_FRAMES`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

MIN_CALIBRATION_FRAMES = 3
"""Fewest frames (poses) of a calibration whose σ can be trusted. One view of a planar target
leaves the principal point and the depth scale to the noise (one frame of the real R12-A
observations moves u0 by 25 σ of the 16-frame result). Two views calibrate, but the σ that sees
model mismatch (the leave-one-frame-out jackknife, :data:`plenocal.calib.resampling.MIN_FRAMES`)
needs three, and the Jacobian σ alone is too small on detected features: on a simulated R12-A
crop (r12-a --small, 16 rays, seed 7; plenocal's own detections, 8 linked frames), 6 random pairs
of frames put u0 at −6.1, −5.2, −2.5, −2.2σ, d at −5.4σ from the truth, while every triple (6
drawn) kept u0, v0, F and d within 2.4 of their larger σ. (The issue-25 case: two frames, v0 27 %
off at −10.5σ, written with exit 0.)"""

MIN_FRAMES_ABSOLUTE = 2
"""Fewer frames cannot be calibrated at all, even with ``--allow-failed-checks``."""

RADIUS_SLOPE_TOLERANCE = 0.10
"""Largest relative disagreement |m_cal/m_Ω − 1| between the calibrated camera's white radius-law
slope m = ∓d·(F − e)/(2(D − e)) (:func:`plenocal.model.white.radius_law`) and the one the white
images measured in pre-calibration (Ω's m), when it is also beyond
:data:`RADIUS_SLOPE_SIGMA_FACTOR` of its larger σ. The whites measure m in pixels, independently of
the checkerboard; the calibration's m follows the declared board square and pixel size: a 6 mm
declaration of a 5 mm board puts it −15.1 % off (synthetic R12-A, 8 frames, σ 0.14 %) and −15.4 %
on a simulated R12-A crop from its images (d and f_i −17 %, RMSEs unchanged), a pixel size declared
6.0 µm for 5.5 µm +7.2 % (F +8 %, d +18 %: that scale is nearly a symmetry of the data, only the
nominal F sees it). Right declarations: +0.15…+0.39 % (synthetic), −0.57 % (simulated crop), +0.27 %
(PRISM r12-b), +1.3 % (the reference's real R12-A: libpleno's calibration against its own Ω), and
+6.9 % / −5.0 % on the real-optics r12-b renders (a thick lens: the lens-plane and exit-pupil
models; its Ω is −3 % from the paraxial truth). 10 % stays clear of the last; it lets board-size
errors below ~12 % and pixel-size errors below ~13 % through."""

RADIUS_SLOPE_SIGMA_FACTOR = 3.0
"""The slope disagreement must also exceed this many of its σ (the larger of the Jacobian and the
frame-resampling σ of the calibrated m; Ω's own σ is far smaller) to fail."""

NOMINAL_FOCAL_LENGTH_RELATIVE_BOUND = 0.25
"""|F − F_nominal| / F_nominal allowed beyond FOCAL_LENGTH_SIGMA_FACTOR·σ_F. Marked focal lengths
are within a few per cent of the true one; 25 % is far beyond any lens, focus breathing or model
mismatch seen (R12-A real: +6 %; PRISM r12-b: < 1 %)."""

FOCAL_LENGTH_SIGMA_FACTOR = 3.0
"""σ_F multiples added to the bound above: F is 'far' only when significantly beyond it."""

MICRO_FOCAL_TO_SENSOR_DISTANCE_RANGE = (0.1, 10.0)
"""Allowed f_i / d (micro-lens focal length over MLA–sensor distance): Galilean cameras have
f_i > d (R12: 1.5–1.8), Keplerian f_i < d, unfocused f = d; a factor 10 either way is no
plenoptic camera (the d = 0.3 µm 'converged' result had f_i / d ≈ 1800)."""


def radius_slope(layout: Any, x: Any) -> tuple[float, Any]:
    """The white radius-law slope m = ∓d·(F − e)/(2(D − e)) (eq:miradiusfnumbermc with the exit
    pupil) of the camera at the parameter vector ``x`` of ``layout``, and its gradient over ``x``."""
    idx = layout.index
    F, D, d = (float(x[idx[n]]) for n in ("F_mm", "D_mm", "d_mm"))
    e = float(x[idx["exit_pupil_mm"]]) if "exit_pupil_mm" in idx else float(layout.template.main_lens.exit_pupil_mm)
    sign = float(layout.template.configuration.radius_sign)
    m = sign * d * (F - e) / (2.0 * (D - e))
    g = np.zeros(len(x))
    g[idx["d_mm"]] = m / d if d else 0.0
    g[idx["F_mm"]] = sign * d / (2.0 * (D - e))
    g[idx["D_mm"]] = -m / (D - e)
    if "exit_pupil_mm" in idx:
        g[idx["exit_pupil_mm"]] = sign * d * (F - D) / (2.0 * (D - e) ** 2)
    return m, g


def radius_slope_sigma(result: Any) -> tuple[float, float, float | None]:
    """The calibrated m, its Jacobian σ and (when frame resampling ran) its jackknife σ."""
    lay = result.layout
    m, g = radius_slope(lay, result.x)
    std = float(np.sqrt(max(float(g @ result.covariance @ g), 0.0)))
    fr = result.frame_resampling
    std_frames = None
    if fr is not None:
        vals = []
        for row in fr.estimates:
            if np.all(np.isfinite(row)):
                xi = np.array(result.x, dtype=float)
                xi[: lay.n_intrinsics] = row[: lay.n_intrinsics]
                vals.append(radius_slope(lay, xi)[0])
        v = np.asarray(vals)
        if len(v) >= 2:
            std_frames = float(np.sqrt((len(v) - 1) / len(v) * np.sum((v - v.mean()) ** 2)))
    return m, std, std_frames


def radius_slope_problem(result: Any, omega: Any) -> str | None:
    """The white images against the declared board and pixel size (:data:`RADIUS_SLOPE_TOLERANCE`):
    one sentence when they disagree, else None (also without Ω)."""
    m_white = getattr(omega, "m_mm", None)
    if m_white is None or not math.isfinite(m_white) or m_white == 0.0:
        return None
    m, std, std_frames = radius_slope_sigma(result)
    sigma = max(std, std_frames or 0.0)
    rel = m / m_white - 1.0
    if not math.isfinite(rel):
        return None
    if abs(rel) <= RADIUS_SLOPE_TOLERANCE or abs(m - m_white) <= RADIUS_SLOPE_SIGMA_FACTOR * sigma:
        return None
    return (f"the calibrated camera's white radius-law slope m = {m * 1e3:.1f} ± {sigma * 1e3:.1f} µm is "
            f"{100 * rel:+.0f} % from the {m_white * 1e3:.1f} µm the white images measured (allowed "
            f"{100 * RADIUS_SLOPE_TOLERANCE:.0f} % and {RADIUS_SLOPE_SIGMA_FACTOR:g} σ): the declared checkerboard "
            "square (manifest.json target.square_mm) or pixel size (camera_spec.pixel_size_mm) does not match "
            "the images" + _slope_model_cause(result))


def _slope_model_cause(result: Any) -> str:
    """The (u, v) model as the other cause of a radius-slope disagreement, in the words that fit
    the observations: template-fit corners (whose exit pupil was not offered,
    :data:`plenocal.calib.calibrate.THIN_PUPIL_POSITIONS`) fit neither (u, v) model."""
    pupil = ((getattr(result, "model_selection", None) or {}).get("exit_pupil") or {})
    if pupil.get("offered") is False:
        return (", or neither (u, v) model fits these template-fit corners (the reference's real R12-A files: "
                "docs/model.md, \"Pupil vignetting in (u, v)\")")
    if (getattr(result, "pupil", None) or {}).get("vignetting"):
        return ""
    return ", or the corners are not chief-ray positions (imported apparent positions: --pupil-vignetting)"


def result_problems(result: Any, *, nominal_focal_length_mm: float | None, omega: Any = None) -> list[str]:
    """Why ``result`` (a :class:`plenocal.calib.calibrate.CalibrationResult`) must not be
    written as a camera; empty when it passes every check.

    Checks: every stage converged; at least :data:`MIN_CALIBRATION_FRAMES` frames; D > 0, d > 0,
    every f_i > 0 with f_i / d within :data:`MICRO_FOCAL_TO_SENSOR_DISTANCE_RANGE`; every free
    intrinsic with a finite σ > 0; F within :data:`NOMINAL_FOCAL_LENGTH_RELATIVE_BOUND` of the
    nominal focal length (+ :data:`FOCAL_LENGTH_SIGMA_FACTOR` σ_F) when it is known; the white
    radius-law slope against the white images' (:func:`radius_slope_problem`) when Ω is known; no
    user prior in conflict with the data alone (:data:`plenocal.calib.calibrate.PRIOR_CONFLICT_SIGMA`).

    Parameters
    ----------
    result : CalibrationResult
    nominal_focal_length_mm : float or None
        The dataset's ``camera_spec.main_lens_focal_length_mm``.
    omega : InternalParameters or None
        Ω measured on the white images (pre-calibration), for the radius-law slope.

    Returns
    -------
    list of str
        One short sentence per failed check.
    """
    problems: list[str] = []
    if not result.converged:
        from plenocal.calib.calibrate import convergence_counts

        stages = {"final": result.solver.to_dict(), **result.stages}
        bad = [f"{k} ({v.get('termination', '?')})" for k, v in stages.items()
               if convergence_counts(k, v) and not v.get("converged", True)]
        problems.append(f"not converged: stage {', '.join(bad)}")
    n_frames = len(result.poses)
    if n_frames < MIN_CALIBRATION_FRAMES:
        problems.append(f"calibrated from {n_frames} frame(s), need >= {MIN_CALIBRATION_FRAMES}: "
                        + ("one view of a plane leaves the principal point and depth scale undetermined" if n_frames < 2
                           else "with fewer the σ of the principal point and the scale cannot be checked by frame "
                                "resampling, and the Jacobian σ alone is several times too small; add views of the "
                                "board at other tilts"))
    cam = result.camera
    D, d = float(cam.D_mm), float(cam.d_mm)
    if not (math.isfinite(D) and D > 0):
        problems.append(f"main lens–MLA distance D = {D:g} mm, must be > 0")
    if not (math.isfinite(d) and d > 0):
        problems.append(f"MLA–sensor distance d = {d:g} mm, must be > 0")
    lo, hi = MICRO_FOCAL_TO_SENSOR_DISTANCE_RANGE
    for i, f in enumerate(cam.mla.focal_lengths_mm):
        if not (math.isfinite(f) and f > 0):
            problems.append(f"micro-lens focal length f{i + 1} = {f:g} mm, must be > 0")
        elif d > 0 and not lo <= f / d <= hi:
            problems.append(f"f{i + 1} / d = {f / d:.3g} (f{i + 1} = {f:.4g} mm, d = {d:.4g} mm) outside {lo:g}..{hi:g}: "
                            "no plenoptic camera")
    params = {p.name: p for p in result.parameters()}
    names = set(result.layout.intrinsic_names)
    bad_sigma = [p.name for p in params.values()
                 if p.name in names and not p.frozen and not (math.isfinite(p.std) and p.std > 0)]
    if bad_sigma:
        problems.append(f"no finite σ for {', '.join(bad_sigma[:4])}{', ...' if len(bad_sigma) > 4 else ''}: the "
                        "parameters are not determined by these observations")
    F = float(cam.main_lens.focal_length_mm)
    if nominal_focal_length_mm is not None and "F_mm" in params:
        sigma_f = params["F_mm"].std if math.isfinite(params["F_mm"].std) else 0.0
        allowed = NOMINAL_FOCAL_LENGTH_RELATIVE_BOUND * nominal_focal_length_mm + FOCAL_LENGTH_SIGMA_FACTOR * sigma_f
        if abs(F - nominal_focal_length_mm) > allowed:
            problems.append(
                f"F = {F:.4g} ± {sigma_f:.2g} mm is {100 * (F / nominal_focal_length_mm - 1):+.0f} % from the nominal "
                f"{nominal_focal_length_mm:g} mm (allowed {100 * NOMINAL_FOCAL_LENGTH_RELATIVE_BOUND:.0f} % + "
                f"{FOCAL_LENGTH_SIGMA_FACTOR:g} σ)")
    slope = radius_slope_problem(result, omega) if omega is not None else None
    if slope is not None:
        problems.append(slope)
    from plenocal.calib.calibrate import prior_conflict_text

    for q in result.prior_summary():
        if q.get("origin") == "option" and q.get("conflicts_with_data"):
            problems.append(prior_conflict_text(q))
    return problems


__all__ = [
    "FOCAL_LENGTH_SIGMA_FACTOR",
    "MICRO_FOCAL_TO_SENSOR_DISTANCE_RANGE",
    "MIN_CALIBRATION_FRAMES",
    "MIN_FRAMES_ABSOLUTE",
    "NOMINAL_FOCAL_LENGTH_RELATIVE_BOUND",
    "RADIUS_SLOPE_SIGMA_FACTOR",
    "RADIUS_SLOPE_TOLERANCE",
    "radius_slope",
    "radius_slope_problem",
    "radius_slope_sigma",
    "result_problems",
]
