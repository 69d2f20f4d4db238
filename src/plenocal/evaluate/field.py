"""The model's field: how far from the principal point the calibrated model describes the lens.

A real main lens is corrected over its design field; beyond it its aberrations grow fast, and a
thin-lens model with radial distortion (paper eq:distortion) and a radial depth distortion cannot
follow them. The realoptics R12-B lens (``../shared/validation/realoptics-r12b``, a Cooke triplet
with a field corrector, designed for ±9.65°) traced through its prescription, object plane at
600 mm, f/4: best focus within 0.02 mm of the axis's up to 6 mm of image height; at 8 / 9 / 10 mm
the tangential focus lies +0.32 / +0.82 / +1.67 mm from the axis's and the sagittal +0.02 / +0.07 /
+0.20 mm, RMS spot 14 / 32 / 92 µm (3 µm on the axis). There is no single virtual depth for a
point there, and the calibration's (u, v) residuals show it: their median grows 1.2 / 1.5 / 2.2 /
3.7 / 5.3× that of the innermost quarter at 4–5 / 6–7 / 7–8 / 8–9 / 9–10 mm, against ≤ 1.03× in
every ring of PRISM's thin-lens renders. Per-micro-image depth of that lens's translation frames
is within 0.8 % (median per ring) up to 6 mm and 2–22 % off beyond 8 mm (``docs/depth.md``).

:func:`model_field` finds the radius where the residuals stop being those of the centre, from the
calibration's own features (rejected ones included: the model's misfit is what makes them
outliers); ``plenocal calibrate`` stores it in ``camera.json`` (``model_field``) and ``plenocal
depth`` gives no depth beyond it (``--whole-field`` to give it anyway).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.evaluate.metrics import compute_residuals
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import Observations
from plenocal.model.target import Checkerboard

FloatArray = NDArray[np.float64]

FIELD_RING_MM = 1.0
"""Width of the rings (distance of the feature's micro-image centre from the principal point, on
the sensor) over which the residuals are summarised."""
MIN_RING_FEATURES = 30
"""A ring with fewer features is merged with the next one outwards (the relative standard error
of a median of n Rayleigh-distributed norms is ≈ 0.6/√n: 11 % at 30)."""
REFERENCE_FRACTION = 0.25
"""The reference residual is the median over the innermost quarter of the features."""
MAX_FIELD_RESIDUAL_RATIO = 1.5
"""The field ends where a ring's median |(u, v) residual|, linear between the rings' median radii,
first exceeds this many times the reference's. PRISM's R12-B (thin lens): ≤ 1.03 in every ring with ≥ 100 features;
the realoptics R12-B: 1.18 / 1.25 / 1.53 / 2.17 at 4–5 / 5–6 / 6–7 / 7–8 mm (field 6.4 mm). 1.5 is
4.5 standard errors above 1 for a 30-feature ring."""

MIN_FIELD_RESIDUAL_EXCESS_PX = 0.01
"""A ring departs only when its median also exceeds the reference's by this much: exact (noise-free,
synthetic) observations have residuals of ~1e-14 px, whose ratios mean nothing; detectors' noise is
≥ 0.05 px (PRISM 0.15, the real-optics set 0.12 px median)."""


@dataclass(frozen=True)
class ModelField:
    """Where the calibrated model describes the lens.

    Attributes
    ----------
    radius_mm : float
        The field's radius on the sensor about the principal point (``inf``: no ring departs, the
        model holds as far as the features reach).
    reach_mm : float
        The farthest feature's radius.
    reference_px : float
        Median |(u, v) residual| of the innermost :data:`REFERENCE_FRACTION` of the features.
    rings : list of dict
        ``inner_mm``, ``outer_mm``, ``n``, ``median_radius_mm``, ``median_px``, ``ratio`` per (merged)
        ring.
    max_ratio : float
        The bound used (:data:`MAX_FIELD_RESIDUAL_RATIO`).
    """

    radius_mm: float
    reach_mm: float
    reference_px: float
    rings: list[dict[str, float]] = field(default_factory=list)
    max_ratio: float = MAX_FIELD_RESIDUAL_RATIO

    @property
    def limited(self) -> bool:
        return math.isfinite(self.radius_mm)

    def to_json(self) -> dict[str, Any]:
        return {"radius_mm": self.radius_mm if self.limited else None, "reach_mm": self.reach_mm,
                "reference_residual_px": self.reference_px, "max_ratio": self.max_ratio,
                "ring_mm": FIELD_RING_MM, "min_ring_features": MIN_RING_FEATURES, "rings": self.rings}

    def line(self) -> str:
        """One line for the terminal and the report."""
        if not self.limited:
            return (f"model field: the (u, v) residuals stay those of the centre as far as the features reach "
                    f"({self.reach_mm:.1f} mm from the principal point)")
        beyond = [r["ratio"] for r in self.rings if r["outer_mm"] > self.radius_mm and r["ratio"] > self.max_ratio]
        return (f"model field: the model describes the lens to {self.radius_mm:.1f} mm from the principal point; "
                f"beyond, the (u, v) residuals grow to {min(beyond):.1f}–{max(beyond):.1f}× the centre's "
                f"(the lens's own aberrations): no depth is given there")


def _crossing(before: dict[str, float] | None, after: dict[str, float], level: float) -> float:
    """Radius where the ratio, linear between two rings' median radii, reaches ``level`` (the
    first ring's inner edge when no ring lies before it)."""
    if before is None:
        return after["inner_mm"]
    t = (level - before["ratio"]) / (after["ratio"] - before["ratio"])
    return before["median_radius_mm"] + t * (after["median_radius_mm"] - before["median_radius_mm"])


def model_field(radius_mm: ArrayLike, residual_px: ArrayLike, *, ring_mm: float = FIELD_RING_MM,
                min_ring_features: int = MIN_RING_FEATURES, reference_fraction: float = REFERENCE_FRACTION,
                max_ratio: float = MAX_FIELD_RESIDUAL_RATIO,
                min_excess_px: float = MIN_FIELD_RESIDUAL_EXCESS_PX) -> ModelField:
    """The model's field from the residuals of the calibration's features: the radius where the
    ratio of a ring's median residual to the centre's, linear between the rings' median radii,
    first exceeds ``max_ratio`` (and the median the centre's by ``min_excess_px``), never inside
    the centre's own micro-images.

    Parameters
    ----------
    radius_mm : (n,) distance of each feature's micro-image centre from the principal point, mm.
    residual_px : (n,) |(u, v) residual| of each feature, px.

    Returns
    -------
    ModelField
    """
    r = np.asarray(radius_mm, dtype=np.float64)
    e = np.asarray(residual_px, dtype=np.float64)
    good = np.isfinite(r) & np.isfinite(e)
    r, e = r[good], e[good]
    if len(r) < 2 * min_ring_features:
        return ModelField(math.inf, float(r.max()) if len(r) else 0.0, float("nan"), [], max_ratio)
    order = np.argsort(r, kind="stable")
    r, e = r[order], e[order]
    n_ref = max(int(np.ceil(reference_fraction * len(r))), min_ring_features)
    reference = float(np.median(e[:n_ref]))
    edges = np.arange(0.0, r[-1] + ring_mm, ring_mm)
    if edges[-1] <= r[-1]:
        edges = np.append(edges, edges[-1] + ring_mm)
    starts = np.searchsorted(r, edges, side="left")
    rings: list[dict[str, float]] = []
    radius = math.inf
    first = 0  # the ring where the current (merged) ring starts
    for b in range(len(edges) - 1):  # tens of rings: not a loop over features
        lo, hi = int(starts[first]), int(starts[b + 1])
        if hi - lo < min_ring_features:
            continue  # merged with the next ring outwards; the outermost remainder is not judged
        med = float(np.median(e[lo:hi]))
        ratio = med / reference if reference > 0 else math.inf
        ring = {"inner_mm": float(edges[first]), "outer_mm": float(edges[b + 1]), "n": hi - lo,
                "median_radius_mm": float(np.median(r[lo:hi])), "median_px": med, "ratio": ratio}
        if ratio > max_ratio and med - reference > min_excess_px and not math.isfinite(radius):
            # the centre (the reference's micro-images) is inside the field by definition
            radius = max(_crossing(rings[-1] if rings else None, ring, max_ratio), float(r[n_ref - 1]))
        rings.append(ring)
        first = b + 1
    return ModelField(radius, float(r[-1]), reference, rings, max_ratio)


def field_of_calibration(camera: PlenopticCamera, poses: dict[int, Pose], board: Checkerboard,
                         observations: Observations, **options: Any) -> ModelField:
    """:func:`model_field` of every linked feature of the posed frames (the calibration's, rejected
    ones included) at the calibrated camera; the radius is that of the feature's micro-image centre."""
    res = compute_residuals(camera, poses, board, observations)
    b = observations.bap.select(res.bap_index)
    return model_field(micro_image_radius_mm(camera, b.k, b.l), np.hypot(res.uv[:, 0], res.uv[:, 1]), **options)


def micro_image_radius_mm(camera: PlenopticCamera, k: ArrayLike, l: ArrayLike) -> FloatArray:
    """(n,) distance of micro-images (k, l)'s centres from the principal point on the sensor, mm:
    the radius the model's field is measured in."""
    c = camera.grid.centres(k, l) - np.asarray(camera.principal_point_px, dtype=np.float64)
    return np.hypot(c[:, 0], c[:, 1]) * camera.sensor.pixel_size_mm


__all__ = ["FIELD_RING_MM", "MAX_FIELD_RESIDUAL_RATIO", "MIN_FIELD_RESIDUAL_EXCESS_PX", "MIN_RING_FEATURES",
           "REFERENCE_FRACTION", "ModelField", "field_of_calibration", "micro_image_radius_mm", "model_field"]
