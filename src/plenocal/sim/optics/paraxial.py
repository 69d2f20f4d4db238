"""Paraxial (first-order) data of a prescription by a y–nu trace.

One coordinate convention throughout: **lens coordinates**, z along the optical axis from the
vertex of surface 1, positive towards the sensor, in mm. Paraxial rays are (y, n·u): height and
reduced slope (u = dy/dz, the tangent), with

- refraction at a surface of power φ:  n′u′ = n·u − y·φ,  φ = (n′ − n)/R for a sphere, 1/f for
  an ideal surface (in air);
- transfer over a thickness t in index n′:  y ← y + t·(n′u′)/n′.

Every 2 × 2 matrix here acts on (y, n·u) and has determinant 1. The system matrix
[[A, B], [C, D]] from the vertex plane of surface 1 (before it) to the vertex plane of the last
surface (after it) gives EFL = −1/C (object and image in air), the rear focal point at
z_last + A·EFL and the front one at −D·EFL, hence the principal planes H = (1 − D)·EFL and
H′ = z_last + (A − 1)·EFL (textbook first-order optics, e.g. Smith, *Modern Optical
Engineering*, ch. 2–3).

Pupils: the entrance pupil (EP) is the stop imaged by the surfaces before it, the exit pupil (XP)
by the surfaces after it. With [[a, b], [c, ·]] from surface 1 to the stop plane, the EP lies at
z = b/a and its radius is r_stop/a; with [[·, b′], [·, d′]] from the stop plane to the last
vertex, the XP lies at z_last − b′/d′ and its radius is r_stop/|d′| (d′ = 0: telecentric, XP at
infinity). The f-number is N = EFL / EPD (paraxial, object at infinity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import ModelError
from plenocal.sim.optics.prescription import Prescription, SurfaceKind

CLEAR_APERTURE_MARGIN = 1.02
"""Clear semi-diameter = this × (|marginal ray height| + |chief ray height|) in
:func:`clear_semi_diameters_mm` (the validation set's rule: 2 % mechanical margin)."""


def _refraction(p: Prescription, i: int) -> NDArray[np.float64]:
    s = p.surfaces[i]
    if s.kind is SurfaceKind.IDEAL:
        phi = s.power_ideal
    else:
        phi = (s.index_after - p.index_before(i)) * s.curvature
    return np.array([[1.0, 0.0], [-phi, 1.0]])


def _transfer(t: float, n: float) -> NDArray[np.float64]:
    return np.array([[1.0, t / n], [0.0, 1.0]])


def partial_matrix(p: Prescription, first: int, last: int, *, refract_last: bool = True) -> NDArray[np.float64]:
    """(y, n·u) matrix from the vertex plane of surface ``first`` (before it) to that of surface
    ``last`` (after it, or before it with ``refract_last=False``), 0-based, ``first <= last``."""
    M = np.eye(2)
    for i in range(first, last + 1):
        if i > first:
            prev = p.surfaces[i - 1]
            M = _transfer(prev.thickness_mm, prev.index_after) @ M
        if i < last or refract_last:
            M = _refraction(p, i) @ M
    return M


def system_matrix(p: Prescription) -> NDArray[np.float64]:
    """(y, n·u) matrix from before surface 1 to after the last surface, shape (2, 2)."""
    return partial_matrix(p, 0, len(p.surfaces) - 1)


@dataclass(frozen=True)
class ParaxialData:
    """First-order data of a prescription at one f-number, in lens coordinates (mm).

    Attributes
    ----------
    efl_mm : float
        Effective focal length (object and image space in air).
    bfl_mm, ffl_mm : float
        Back focal length (last vertex → rear focal point, + towards the sensor) and front
        focal length (front focal point → surface 1, + when the focal point is in front).
    front_focal_z, rear_focal_z : float
    h_z, h_prime_z : float
        Front and rear principal planes H and H′.
    entrance_pupil_z, exit_pupil_z : float
        Paraxial pupil positions (``inf`` for a telecentric side).
    f_number : float
        N = EFL / EPD.
    stop_semi_diameter_mm : float
        The stop radius giving ``f_number``.
    epd_mm, xpd_mm : float
        Entrance- and exit-pupil diameters.
    pupil_magnification : float
        XPD / EPD.
    last_vertex_z : float
        Position of the last surface's vertex.
    """

    efl_mm: float
    bfl_mm: float
    ffl_mm: float
    front_focal_z: float
    rear_focal_z: float
    h_z: float
    h_prime_z: float
    entrance_pupil_z: float
    exit_pupil_z: float
    f_number: float
    stop_semi_diameter_mm: float
    epd_mm: float
    xpd_mm: float
    pupil_magnification: float
    last_vertex_z: float

    @property
    def principal_separation_mm(self) -> float:
        """H → H′ along the axis (+ when H′ lies behind H, towards the sensor)."""
        return self.h_prime_z - self.h_z

    def to_dict(self) -> dict[str, float | None]:
        """Plain numbers for JSON (``None`` for an infinite pupil distance)."""
        return {k: (float(v) if math.isfinite(v) else None) for k, v in self.__dict__.items()} | {
            "principal_separation_mm": float(self.principal_separation_mm)
        }


def _stop_matrices(p: Prescription) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Surface 1 → stop plane (before the stop's refraction), stop plane → after the last."""
    s = p.stop_index
    pre = partial_matrix(p, 0, s, refract_last=False)
    post = partial_matrix(p, s, len(p.surfaces) - 1)
    return pre, post


def stop_semi_diameter_mm(p: Prescription, f_number: float) -> float:
    """Stop radius for which N = EFL / (paraxial entrance-pupil diameter) equals ``f_number``."""
    if not (math.isfinite(f_number) and f_number > 0.0):
        raise ModelError(f"f-number must be finite and > 0, got {f_number}")
    efl = -1.0 / system_matrix(p)[1, 0]
    a = _stop_matrices(p)[0][0, 0]
    if a == 0.0:
        raise ModelError(f"lens '{p.name}': the stop is conjugate to infinity (no entrance pupil)")
    return abs(a) * efl / (2.0 * f_number)


def paraxial_data(p: Prescription, f_number: float | None = None) -> ParaxialData:
    """First-order data (module docstring) at ``f_number`` (default: the stop's own semi-diameter).

    Raises
    ------
    ModelError
        A system without positive power, or a stop with no finite semi-diameter and no f-number.
    """
    M = system_matrix(p)
    A, C, D = M[0, 0], M[1, 0], M[1, 1]
    if not C < 0.0:
        raise ModelError(f"lens '{p.name}' has no positive focal length (power {-C:g} mm⁻¹)")
    efl = -1.0 / C
    z_last = p.vertex_z_mm[-1]
    rear_focal = z_last + A * efl
    front_focal = -D * efl
    pre, post = _stop_matrices(p)
    a, b = pre[0, 0], pre[0, 1]
    b2, d2 = post[0, 1], post[1, 1]
    ep_z = b / a if a != 0.0 else math.inf
    xp_z = z_last - b2 / d2 if d2 != 0.0 else math.inf
    if f_number is None:
        r_stop = p.surfaces[p.stop_index].semi_diameter_mm
        if not math.isfinite(r_stop):
            raise ModelError(f"lens '{p.name}': give an f-number (the stop has no semi-diameter)")
    else:
        r_stop = stop_semi_diameter_mm(p, f_number)
    epd = 2.0 * r_stop / abs(a)
    xpd = 2.0 * r_stop / abs(d2) if d2 != 0.0 else math.inf
    return ParaxialData(
        efl_mm=efl,
        bfl_mm=rear_focal - z_last,
        ffl_mm=-front_focal,
        front_focal_z=front_focal,
        rear_focal_z=rear_focal,
        h_z=front_focal + efl,
        h_prime_z=rear_focal - efl,
        entrance_pupil_z=ep_z,
        exit_pupil_z=xp_z,
        f_number=efl / epd,
        stop_semi_diameter_mm=r_stop,
        epd_mm=epd,
        xpd_mm=xpd,
        pupil_magnification=xpd / epd,
        last_vertex_z=z_last,
    )


def trace_paraxial(p: Prescription, y1: float, u1: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Heights y and reduced slopes n′u′ after each surface of a ray (y1, u1) at surface 1.

    Returns
    -------
    y, nu : ndarray, shape (n_surfaces,)
    """
    ray = np.array([y1, u1], dtype=np.float64)
    ys, nus = [], []
    for i in range(len(p.surfaces)):
        if i > 0:
            prev = p.surfaces[i - 1]
            ray = _transfer(prev.thickness_mm, prev.index_after) @ ray
        ray = _refraction(p, i) @ ray
        ys.append(ray[0])
        nus.append(ray[1])
    return np.array(ys), np.array(nus)


def clear_semi_diameters_mm(p: Prescription, *, f_number: float, image_height_mm: float) -> tuple[float, ...]:
    """Clear semi-diameters that pass an axial beam at ``f_number`` and the chief ray to
    ``image_height_mm`` (tan θ = h/EFL), with :data:`CLEAR_APERTURE_MARGIN`; the stop gets the
    f-number's radius.

    Returns
    -------
    tuple of float, one per surface (mm).
    """
    par = paraxial_data(p, f_number)
    ym, _ = trace_paraxial(p, par.epd_mm / 2.0, 0.0)
    tan_field = image_height_mm / par.efl_mm
    yc, _ = trace_paraxial(p, -tan_field * par.entrance_pupil_z, tan_field)
    out = [CLEAR_APERTURE_MARGIN * (abs(a) + abs(b)) for a, b in zip(ym, yc, strict=True)]
    out[p.stop_index] = par.stop_semi_diameter_mm
    return tuple(float(x) for x in out)


AXIAL_CLIP_TOLERANCE = 1e-3
"""Relative shortfall of a surface's clear semi-diameter below the axial marginal ray's height
at which the lens no longer opens to the f-number asked for (the stop's own radius is set from
the f-number, so it never clips)."""


def axial_clipping(p: Prescription, f_number: float) -> tuple[int, float, float] | None:
    """The first surface (index, its semi-diameter, the height it would need, mm) whose clear
    aperture clips the paraxial axial beam at ``f_number`` — the lens then works at a slower
    f-number than the one asked for, and its white images contradict their declared f-numbers —
    or None when every surface passes it (within :data:`AXIAL_CLIP_TOLERANCE`)."""
    par = paraxial_data(p, f_number)
    heights, _ = trace_paraxial(p, par.epd_mm / 2.0, 0.0)
    for i, (surface, y) in enumerate(zip(p.surfaces, heights, strict=True)):
        sd = surface.semi_diameter_mm
        if i != p.stop_index and sd is not None and abs(y) > sd * (1.0 + AXIAL_CLIP_TOLERANCE):
            return i, float(sd), float(abs(y))
    return None


def fastest_f_number(p: Prescription, *, start: float = 1.0, stop: float = 64.0) -> float:
    """The smallest f-number at which no clear aperture clips the paraxial axial beam
    (:func:`axial_clipping`; bisection on the f-number, 1e-3 relative)."""
    if axial_clipping(p, start) is None:
        return start
    lo, hi = start, stop
    if axial_clipping(p, hi) is not None:
        return math.inf
    while hi / lo > 1.0 + 1e-3:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if axial_clipping(p, mid) is not None else (lo, mid)
    return hi


def image_of_plane(p: Prescription, object_distance_mm: float) -> tuple[float, float]:
    """Paraxial image of an object plane ``object_distance_mm`` in front of H (> 0 for a real
    object; ``inf`` for infinity).

    Returns
    -------
    image_z : float
        Image plane position, lens coordinates (= H′ + s′ with 1/s + 1/s′ = 1/EFL).
    magnification : float
        Lateral magnification −s′/s (0 for an object at infinity).
    """
    M = system_matrix(p)
    A, C = M[0, 0], M[1, 0]
    efl = -1.0 / C
    h_prime = p.vertex_z_mm[-1] + (A - 1.0) * efl
    s = float(object_distance_mm)
    if math.isinf(s):
        return h_prime + efl, 0.0
    if s == efl:
        return math.inf, math.inf
    s_img = efl * s / (s - efl)
    return h_prime + s_img, -s_img / s
