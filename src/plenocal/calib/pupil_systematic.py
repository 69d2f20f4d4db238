"""How far the scale (F, D), and every other intrinsic, rests on an exit pupil the images place
badly: a systematic σ.

The calibrated F and D move with the main lens's exit pupil e (docs/model.md, "The exit pupil"),
which images through real micro-lenses place only to ~10 mm (:data:`EXIT_PUPIL_SYSTEMATIC_MM`),
or not at all. Three cases, from a calibration ``report.json`` (its ``model_selection``,
``parameters`` and ``correlation``):

- **e estimated by the data** (kept, no prior of the user's on it): each parameter's regression on
  e in the calibration's covariance (ρ_qe·σ_q/σ_e per mm of e) times :data:`EXIT_PUPIL_SYSTEMATIC_MM`;
- **e left out of a lens the data show not to be thin**, where calibration moved e to
  :data:`plenocal.calib.calibrate.EXIT_PUPIL_PROBE_MM` behind H′ to see (``scale_probe``): each
  parameter's change there, scaled to the range of e the white images allow when they favour
  e = 0 over the pupil the images chose or the probe's (:func:`whites_pupil_range`);
- otherwise (a thin lens, e given by the user): none.

F's and D's are relative (``relative``), the others' in their own units (``absolute``): the
principal point moves with e too (the tilted Tessar R12-A render: u0 −26 px from e = 0 to 10 mm).
The verdict words the scale's (:func:`plenocal.viz.verdict.exit_pupil_scale_findings`); the
calibration writes every one beside the data's σ (``std_exit_pupil``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plenocal.calib.priors import IMAGE_SYSTEMATIC

EXIT_PUPIL_SYSTEMATIC_MM = IMAGE_SYSTEMATIC["exit_pupil_mm"]
"""How far e estimated from images through real micro-lenses can be off (docs/model.md)."""


@dataclass(frozen=True)
class PupilSystematic:
    """F's and D's relative systematic through e (``relative`` {name: fraction}) and how it was
    found: ``kind`` "regression" (e estimated), "probe" (e left out, moved to see) or "whites"
    (the probe scaled to the whites' range of e, ``whites_range_mm``)."""

    kind: str
    relative: dict[str, float] = field(default_factory=dict)
    absolute: dict[str, float] = field(default_factory=dict)
    """The other parameters' systematic σ in their own units (px, mm, rad, …)."""
    slope_mm_per_mm: float = float("nan")
    """F's change per mm of e (regression)."""
    whites_range_mm: float | None = None


def _finite(x: Any) -> bool:
    try:
        return bool(np.isfinite(float(x)))
    except (TypeError, ValueError):
        return False


def whites_pupil_exit_mm(pupil: Any) -> float | None:
    """The exit pupil of the camera the white images judged against e = 0 (calibration's
    ``white_slope``): the one the images chose (``values``), or the scale probe's (``white_slope``'s
    own ``exit_pupil_mm``)."""
    ws = pupil.get("white_slope") if isinstance(pupil, Mapping) else None
    if not isinstance(ws, Mapping):
        return None
    values = pupil.get("values") if isinstance(pupil.get("values"), Mapping) else {}
    e = ws.get("exit_pupil_mm", values.get("exit_pupil_mm"))
    return float(e) if e is not None and _finite(e) else None


def whites_pupil_range(pupil: Any) -> float | None:
    """How far from e = 0 the white images' radius-law slope lets the exit pupil be (mm), when they
    favour e = 0 by more than their margin (calibration's ``white_slope``,
    :data:`plenocal.calib.calibrate.WHITE_SLOPE_PUPIL_MARGIN`) over a pupil the images chose or the
    scale probe put 10 mm behind H′: the margin over the slope's change per mm of e between the two
    cameras; else None (the whites do not support e = 0: the telephoto render's, e 13.2 mm)."""
    if not isinstance(pupil, Mapping) or pupil.get("kept"):
        return None
    ws, e = pupil.get("white_slope"), whites_pupil_exit_mm(pupil)
    if not isinstance(ws, Mapping) or e is None:
        return None
    nums = [ws.get("with"), ws.get("without"), ws.get("margin")]
    if not all(_finite(x) for x in nums):
        return None
    w, wo, margin = (float(x) for x in nums)
    if e == 0.0 or not abs(w) > abs(wo) + margin:
        return None
    return margin / (abs(w - wo) / abs(e))


def _user_prior_on_e(doc: Mapping[str, Any]) -> bool:
    return any(isinstance(q, Mapping) and q.get("name") == "exit_pupil_mm" and not str(q.get("origin", "")).startswith("default")
               for q in doc.get("priors") or [])


def exit_pupil_systematic(doc: Mapping[str, Any]) -> PupilSystematic | None:
    """F's and D's systematic through e of a calibration report (the module docstring), or None."""
    sel = doc.get("model_selection") if isinstance(doc.get("model_selection"), Mapping) else {}
    pupil = sel.get("exit_pupil")
    params = doc.get("parameters") if isinstance(doc.get("parameters"), Mapping) else {}
    probe = pupil.get("scale_probe") if isinstance(pupil, Mapping) else None
    if isinstance(probe, Mapping) and _finite(probe.get("F_change_percent")) and probe.get("converged"):
        e_probe = float(probe.get("exit_pupil_mm") or 0.0)
        whites = whites_pupil_range(pupil)
        factor = whites / e_probe if whites is not None and 0.0 < whites < e_probe else 1.0
        rel = {"F_mm": abs(float(probe["F_change_percent"])) / 100.0 * factor}
        if _finite(probe.get("D_change_percent")):
            rel["D_mm"] = abs(float(probe["D_change_percent"])) / 100.0 * factor
        changes = probe.get("changes")
        moved = {str(n): abs(float(v)) * factor for n, v in changes.items() if n not in _SCALE and _finite(v)} \
            if isinstance(changes, Mapping) else {}
        return PupilSystematic("whites" if factor < 1.0 else "probe", _with_lattice_centre(rel, params), moved,
                               whites_range_mm=whites if factor < 1.0 else None)
    F, e = params.get("F_mm"), params.get("exit_pupil_mm")
    if not (isinstance(pupil, Mapping) and pupil.get("kept") and isinstance(F, Mapping) and isinstance(e, Mapping)) \
            or F.get("frozen") or e.get("frozen") or _user_prior_on_e(doc):
        return None
    corr = doc.get("correlation") if isinstance(doc.get("correlation"), Mapping) else {}
    names = list(corr.get("names") or [])
    if "exit_pupil_mm" not in names:
        return None
    rel: dict[str, float] = {}
    absolute: dict[str, float] = {}
    slope_F = float("nan")
    try:
        ie = names.index("exit_pupil_mm")
        for i, name in enumerate(names):
            q = params.get(name)
            if name in ("exit_pupil_mm", "D_centre_mm") or not isinstance(q, Mapping) or q.get("frozen") or not _finite(q.get("std")):
                continue
            slope = float(corr["matrix"][i][ie]) * float(q["std"]) / float(e["std"])
            if name in _SCALE:
                rel[name] = abs(slope) * EXIT_PUPIL_SYSTEMATIC_MM / abs(float(q["value"]))
            elif np.isfinite(slope):
                absolute[name] = abs(slope) * EXIT_PUPIL_SYSTEMATIC_MM
            if name == "F_mm":
                slope_F = slope
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError):
        return None
    if "F_mm" not in rel or not all(np.isfinite(v) for v in rel.values()):
        return None
    return PupilSystematic("regression", _with_lattice_centre(rel, params), absolute, slope_mm_per_mm=slope_F)


_SCALE = ("F_mm", "D_mm", "D_centre_mm", "exit_pupil_mm")
"""The parameters :class:`PupilSystematic` gives relative σ (the scale) or none (e itself)."""


def _with_lattice_centre(rel: dict[str, float], params: Mapping[str, Any]) -> dict[str, float]:
    """``rel`` with D at the lattice centre (``D_centre_mm``) given D's σ in mm: the two differ by
    the lattice-centre offset Δ, a function of the MLA's tilt and pitch alone, not of e."""
    D, Dc = params.get("D_mm"), params.get("D_centre_mm")
    if "D_mm" not in rel or not isinstance(D, Mapping) or not isinstance(Dc, Mapping) \
            or not (_finite(D.get("value")) and _finite(Dc.get("value"))) or float(Dc["value"]) == 0.0:
        return rel
    return rel | {"D_centre_mm": rel["D_mm"] * abs(float(D["value"])) / abs(float(Dc["value"]))}
