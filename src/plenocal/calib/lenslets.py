"""What refractive micro-lenses leave in d and f_i, and how the white images tell they are there.

The calibrated d and f_i are those of thin micro-lenses that reproduce the images: the (u, v)
disparities and the white images' radius law. Real micro-lenses are refractive caps on a substrate
with a mask at the cap's base; their stop is not at their principal planes, the caps are
aberrated, and the whites' blur disc is that of the clear aperture, not of the pitch. The
disparities then scale by (1 + β0) and the whites' q'_i by the clear aperture and the aberration,
which no observation separates from d and f_i (docs/model.md, "Real micro-lenses"). So d and f_i
describe the images, but their paraxial (thin-lens-equivalent) values lie further away than the
data's σ says.

The white images show whether the micro-lenses are refractive: caps on a substrate see off-axis
bundles obliquely, and their blur disc R_b shrinks away from the centre of the sensor
(:class:`~plenocal.model.white.LensletFieldTrend`, beyond the linear trend a tilted MLA gives);
thin lenses keep it. Measured at 5 mm (R12-B geometry; PRISM's thin lenslets and the real-optics
set's fused-silica caps on 0.1 mm):

====================================================  ==================
white images                                          R_b at 5 mm
====================================================  ==================
PRISM R12-B (thin lenslets)                           +0.01 ± 0.01 %
real-optics R12-B (caps, another tracer)              −2.2 ± 0.03 %
====================================================  ==================

When they do, the calibration adds to d and f_i a systematic σ for their paraxial values
(:data:`LENSLET_D_SYSTEMATIC`, :data:`LENSLET_F_SYSTEMATIC`), reported beside the data's two σ
(``std_lenslets``), not in them: the data determine the effective values that well.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from plenocal.model.white import LensletFieldTrend

LENSLET_TREND_SIGMAS = 4.0
"""The whites show refractive micro-lenses when R_b's change at 5 mm exceeds this many of its σ..."""
LENSLET_TREND_MIN = 0.005
"""...and this fraction (0.5 %): thin lenslets measure within ±0.03 % (PRISM, and plenocal's own
thin renders), refractive caps 1–3 %."""
LENSLET_D_SYSTEMATIC = 0.021
"""Relative σ of the paraxial d against the calibrated one with refractive micro-lenses: the RMS of
d's departures at the lattice centre over every render with refractive caps calibrated with
defaults (the real-optics R12-B −3.35 %, plenocal's field-corrector at f/5.66 −2.0 %, thin main
lens −2.0 %, Tessar −0.2 %, telephoto −2.6 %, double-Gauss −0.7 %; docs/model.md)."""
LENSLET_F_SYSTEMATIC = 0.055
"""Relative σ of the paraxial f_i, as :data:`LENSLET_D_SYSTEMATIC` (the same renders: −4.3…−4.9 %,
−6.0…−6.1 %, −6.0 %, −4.0 %, −7.6…−7.7 %, −4.0 %): d's departure less the whites' q'_i, which take
the clear aperture and the caps' aberration (+1…+4 %)."""


def refractive_lenslets(trend: LensletFieldTrend | None) -> bool:
    """Whether the white images show refractive micro-lenses (the module docstring)."""
    if trend is None:
        return False
    mean, sd = trend.mean, trend.mean_std
    return abs(mean) > LENSLET_TREND_MIN and abs(mean) > LENSLET_TREND_SIGMAS * sd


def _is_focal_length(name: str) -> bool:
    return re.fullmatch(r"f\d+_mm", name) is not None


def lenslet_systematics(values: Mapping[str, float], trend: LensletFieldTrend | None) -> dict[str, float]:
    """{d_mm, d_centre_mm, f<i>_mm: systematic σ of their paraxial values} when the whites show refractive
    micro-lenses, else {}. ``values``: the calibrated parameters by name."""
    if not refractive_lenslets(trend):
        return {}
    out = {}
    for name, v in values.items():
        if name in ("d_mm", "d_centre_mm"):
            out[name] = LENSLET_D_SYSTEMATIC * abs(float(v))
        elif _is_focal_length(name):
            out[name] = LENSLET_F_SYSTEMATIC * abs(float(v))
    return out


def lenslet_record(trend: LensletFieldTrend | None, values: Mapping[str, float]) -> dict[str, Any] | None:
    """report.json's ``lenslets``: the whites' trend, the decision and the systematic σ (None
    without a measured trend, e.g. imported observations without white images)."""
    if trend is None:
        return None
    refr = refractive_lenslets(trend)
    mean, sd = trend.mean, trend.mean_std
    if refr:
        why = (f"the white images' micro-lens blur disc changes {100 * mean:+.2f} ± {100 * sd:.2f} % at "
               f"{trend.radius_mm:g} mm from the centre: refractive micro-lenses")
    else:
        why = (f"the white images' micro-lens blur disc changes {100 * mean:+.2f} ± {100 * sd:.2f} % at "
               f"{trend.radius_mm:g} mm from the centre (within ±{100 * LENSLET_TREND_MIN:g} % or "
               f"{LENSLET_TREND_SIGMAS:g}σ): the micro-lenses behave as thin lenses")
    return {"refractive": refr, "reason": why, "trend": trend.to_dict(),
            "systematic": lenslet_systematics(values, trend),
            "relative_systematic": {"d": LENSLET_D_SYSTEMATIC, "f": LENSLET_F_SYSTEMATIC} if refr else {}}
