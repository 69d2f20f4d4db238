"""Blur radius versus depth, focus planes and depth of field (paper §2.4, reference §8.2).

Distances along the optical axis in "MLA space" are the signed distance ``a`` of a virtual point
from the MLA plane (negative behind the MLA, towards the sensor), as in eq:blurradius. Object
distances are camera-frame z (> F).

The micro-lens aperture here is the MLA pitch Δ_C (paper §2.1: "we make the hypothesis that Δ_C
is equal to the micro-lens aperture"; §2.4 uses it for the DoF). The BAP feature's ρ uses
λ·Δc instead (eq:radiusfinal, :func:`plenocal.model.projection.blur_radius_mm`); the two agree
when the micro-image grid is the projection of the MLA, and differ by 0.03 % on the reference's
R12-A files, where Δ_C reproduces the paper's 14.44 mm total depth of field.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.errors import ModelError
from plenocal.model.camera import PlenopticCamera

FloatArray = NDArray[np.float64]

DEFAULT_WAVELENGTH_MM = 750e-6
"""ν = 750 nm, the paper's wavelength for the diffraction limit (§7.6)."""


def mla_to_object_mm(camera: PlenopticCamera, a_mm: ArrayLike) -> FloatArray:
    """Object distance of MLA-space distance a: a' = (D − a)·F/((D − a) − F) (eq:mla2obj)."""
    a = np.asarray(a_mm, dtype=np.float64)
    D, F = camera.D_mm, camera.main_lens.focal_length_mm
    return (D - a) * F / ((D - a) - F)


def object_to_mla_mm(camera: PlenopticCamera, z_mm: ArrayLike) -> FloatArray:
    """MLA-space distance of an on-axis object at distance z: a = D − F·z/(z − F) (inverse of eq:mla2obj)."""
    z = np.asarray(z_mm, dtype=np.float64)
    F = camera.main_lens.focal_length_mm
    return camera.D_mm - F * z / (z - F)


def virtual_depth(camera: PlenopticCamera, a_mm: ArrayLike) -> FloatArray:
    """υ = −a/d (paper §4.1)."""
    return -np.asarray(a_mm, dtype=np.float64) / camera.d_mm


def mla_distance_from_virtual_depth(camera: PlenopticCamera, v: ArrayLike) -> FloatArray:
    """a = −υ·d."""
    return -np.asarray(v, dtype=np.float64) * camera.d_mm


def micro_lens_aperture_mm(camera: PlenopticCamera) -> float:
    """A = Δ_C, the mean MLA pitch (paper §2.1 hypothesis)."""
    return 0.5 * (camera.mla.pitch_mm[0] + camera.mla.pitch_mm[1])


def blur_radius_px_at(camera: PlenopticCamera, a_mm: ArrayLike, type_index: int) -> FloatArray:
    """Signed blur radius ρ (px) of an on-axis virtual point at MLA distance a (eq:blurradius)."""
    f = camera.mla.focal_lengths_mm[type_index]
    d, A = camera.d_mm, micro_lens_aperture_mm(camera)
    a = np.asarray(a_mm, dtype=np.float64)
    return A * (d / 2.0) * (1.0 / f - 1.0 / a - 1.0 / d) / camera.sensor.pixel_size_mm


def blur_radius_px_vs_virtual_depth(camera: PlenopticCamera, v: ArrayLike, type_index: int) -> FloatArray:
    """ρ as a function of virtual depth: r = (A/2)/υ + A·d/(2f) − A/2 (eq:radiusfinal)."""
    return blur_radius_px_at(camera, mla_distance_from_virtual_depth(camera, v), type_index)


def focus_plane_mla_mm(camera: PlenopticCamera, type_index: int) -> float:
    """a0 = d·f/(d − f), the plane that type i images sharply (eq:focusplane)."""
    f = camera.mla.focal_lengths_mm[type_index]
    d = camera.d_mm
    if np.isclose(f, d):
        return float("-inf")
    return d * f / (d - f)


def min_circle_of_confusion_mm(camera: PlenopticCamera, *, wavelength_mm: float = DEFAULT_WAVELENGTH_MM) -> float:
    """r0 = max(1.22·ν·N*, s/2) with the working f-number N* = d/A (paper §2.4)."""
    n_star = camera.d_mm / micro_lens_aperture_mm(camera)
    return max(1.22 * wavelength_mm * n_star, camera.sensor.pixel_size_mm / 2.0)


def dof_limits_mla_mm(camera: PlenopticCamera, type_index: int, r0_mm: float) -> tuple[float, float]:
    """MLA-space limits where |r(a)| ≤ r0, as (a_near_mla, a_far_mla).

    Solving |A(d/2)(1/a0 − 1/a)| ≤ r0 gives a = A·d·a0/(A·d ∓ 2·r0·a0) (reference §8.2: the
    paper's printed eq:farnearfocus/eq:dofml do not reduce to these limits). "near" is the
    limit closer to the MLA plane, i.e. farther from the camera in object space when a < 0.
    """
    a0 = focus_plane_mla_mm(camera, type_index)
    A, d = micro_lens_aperture_mm(camera), camera.d_mm
    lo = A * d * a0 / (A * d - 2.0 * r0_mm * a0)
    hi = A * d * a0 / (A * d + 2.0 * r0_mm * a0)
    near, far = sorted((lo, hi), key=abs)
    return near, far


@dataclass(frozen=True)
class TypeDepthOfField:
    """Depth of field of one micro-lens type, in MLA space, virtual depth and object space."""

    type_index: int
    focal_length_mm: float
    focus_mla_mm: float
    limits_mla_mm: tuple[float, float]
    focus_virtual_depth: float
    limits_virtual_depth: tuple[float, float]
    focus_object_mm: float
    limits_object_mm: tuple[float, float]

    @property
    def dof_object_mm(self) -> float:
        return abs(self.limits_object_mm[1] - self.limits_object_mm[0])

    @property
    def dof_mla_mm(self) -> float:
        return abs(self.limits_mla_mm[1] - self.limits_mla_mm[0])


@dataclass(frozen=True)
class DepthOfField:
    """Per-type depths of field and the camera's total (eq:dofcamera, reference §8.2)."""

    r0_mm: float
    types: tuple[TypeDepthOfField, ...]

    @property
    def limits_object_mm(self) -> tuple[float, float]:
        lo = min(min(t.limits_object_mm) for t in self.types)
        hi = max(max(t.limits_object_mm) for t in self.types)
        return lo, hi

    @property
    def total_object_mm(self) -> float:
        lo, hi = self.limits_object_mm
        return hi - lo

    @property
    def limits_virtual_depth(self) -> tuple[float, float]:
        lo = min(min(t.limits_virtual_depth) for t in self.types)
        hi = max(max(t.limits_virtual_depth) for t in self.types)
        return lo, hi

    @property
    def total_mla_mm(self) -> float:
        lo = min(min(np.abs(t.limits_mla_mm)) for t in self.types)
        hi = max(max(np.abs(t.limits_mla_mm)) for t in self.types)
        return float(hi - lo)


def depth_of_field(
    camera: PlenopticCamera, *, r0_mm: float | None = None, wavelength_mm: float = DEFAULT_WAVELENGTH_MM
) -> DepthOfField:
    """Depth of field of each micro-lens type and in total (paper §2.4 with reference §8.2).

    Object-space limits beyond infinity (the virtual point in front of the main lens' focal
    plane) are reported as ``inf``.
    """
    if camera.n_types == 0:
        raise ModelError("depth of field needs micro-lenses with focal lengths (I >= 1)")
    r0 = min_circle_of_confusion_mm(camera, wavelength_mm=wavelength_mm) if r0_mm is None else r0_mm
    out = []
    for i, f in enumerate(camera.mla.focal_lengths_mm):
        a0 = focus_plane_mla_mm(camera, i)
        lim = dof_limits_mla_mm(camera, i, r0)
        obj = tuple(float(_object_or_inf(camera, a)) for a in lim)
        out.append(
            TypeDepthOfField(
                type_index=i,
                focal_length_mm=f,
                focus_mla_mm=a0,
                limits_mla_mm=lim,
                focus_virtual_depth=float(virtual_depth(camera, a0)),
                limits_virtual_depth=tuple(float(virtual_depth(camera, a)) for a in lim),  # type: ignore[arg-type]
                focus_object_mm=float(_object_or_inf(camera, a0)),
                limits_object_mm=obj,  # type: ignore[arg-type]
            )
        )
    return DepthOfField(r0_mm=r0, types=tuple(out))


def _object_or_inf(camera: PlenopticCamera, a_mm: float) -> float:
    """Object distance, ``inf`` when the virtual point lies at or beyond the main lens' focal plane."""
    D, F = camera.D_mm, camera.main_lens.focal_length_mm
    if (D - a_mm) - F <= 0.0:
        return float("inf")
    return float(mla_to_object_mm(camera, a_mm))
