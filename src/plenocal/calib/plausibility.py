"""Checks of a calibration result before it is written: converged, and physically plausible.

A solver that stops at a stationary point has "converged" whatever the data; these checks catch
the results that are numbers but not a camera — a micro-lens array 0.3 µm from the sensor, a
50 mm lens calibrated at 17 mm, σ that could not be computed, a single view — so that
``plenocal calibrate`` refuses to write them (``--allow-failed-checks`` writes them, marked).
Each bound is named after the quantity it bounds and is loose: it stops the absurd, never a
merely surprising result (real R12-A observations give F = 53.2 mm for a 50 mm lens: +6 %).
"""

from __future__ import annotations

import math
from typing import Any

MIN_CALIBRATION_FRAMES = 2
"""Fewest frames (poses) of a calibration: one view of a planar target leaves the principal
point and the depth scale to the noise (one frame of the real R12-A observations moves u0 by 25 σ
of the 16-frame result)."""

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


def result_problems(result: Any, *, nominal_focal_length_mm: float | None) -> list[str]:
    """Why ``result`` (a :class:`plenocal.calib.calibrate.CalibrationResult`) must not be
    written as a camera; empty when it passes every check.

    Checks: every stage converged; at least :data:`MIN_CALIBRATION_FRAMES` frames; D > 0, d > 0,
    every f_i > 0 with f_i / d within :data:`MICRO_FOCAL_TO_SENSOR_DISTANCE_RANGE`; every free
    intrinsic with a finite σ > 0; F within :data:`NOMINAL_FOCAL_LENGTH_RELATIVE_BOUND` of the
    nominal focal length (+ :data:`FOCAL_LENGTH_SIGMA_FACTOR` σ_F) when it is known.

    Parameters
    ----------
    result : CalibrationResult
    nominal_focal_length_mm : float or None
        The dataset's ``camera_spec.main_lens_focal_length_mm``.

    Returns
    -------
    list of str
        One short sentence per failed check.
    """
    problems: list[str] = []
    if not result.converged:
        stages = {"final": result.solver.to_dict(), **result.stages}
        bad = [f"{k} ({v.get('termination', '?')})" for k, v in stages.items()
               if k != "poses" and not v.get("converged", True)]
        problems.append(f"not converged: stage {', '.join(bad)}")
    n_frames = len(result.poses)
    if n_frames < MIN_CALIBRATION_FRAMES:
        problems.append(f"calibrated from {n_frames} frame(s), need >= {MIN_CALIBRATION_FRAMES}: one view of a plane "
                        "leaves the principal point and depth scale undetermined")
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
    return problems


__all__ = [
    "FOCAL_LENGTH_SIGMA_FACTOR",
    "MICRO_FOCAL_TO_SENSOR_DISTANCE_RANGE",
    "MIN_CALIBRATION_FRAMES",
    "NOMINAL_FOCAL_LENGTH_RELATIVE_BOUND",
    "result_problems",
]
