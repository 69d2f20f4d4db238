"""Where one real lenslet puts a virtual point, against the thin model (``docs/model.md``, "Real
micro-lenses").

The renderer (:mod:`plenocal.sim.optics.render`) answers "what does the whole camera see"; this
module answers the narrower question that the calibration's observations depend on: for one
lenslet behind a thin main lens, where on the sensor does the light of one virtual point land,
and how does that compare with the paper's chief ray through the lens centre (eq:completemodel)?
It traces rays **forwards**, exactly (Snell at every face, the mask as the stop), from points
uniform on the main lens's aperture towards the virtual point X′, through the lenslet, to the
sensor.

**The bench** (lenslet coordinates of :mod:`plenocal.sim.optics.lenslets`: z from the lenslet's
front vertex, its H, towards the sensor): the lenslet's axis is parallel to the main axis, at a
lateral distance ``field_mm`` (C) from it along +x; the thin main lens, with its pupil in its plane,
lies D in front of H (z = −D) and is centred at x = −C; the sensor lies d behind the lenslet's H′.
A virtual point of the paper's Galilean side at virtual depth υ lies at z = υ·d behind H, where the
light converges (a real lenslet's H and H′ collapse to the thin lens's plane in the paraxial
equivalent, so the thin model's image of X′ = (x, y, υ·d) is (x, y)·d/(υ·d) from the axis).

**The chief-ray map.** Where the main aperture does not clip the bundle (the lenslet's whole
clear aperture lies inside the cone from the aperture to X′), the spot depends on X′ alone, and its
centroid against the thin model's image e (relative to the lenslet axis) is, to first order in e,

    centroid = c0·x̂ + (1 + β_t)·e_t + (1 + β_s)·e_s,

x̂ the direction away from the main axis, e_t and e_s the components of e along and across it.
A thin lenslet has β = 0 and c0 = 0 whatever its aperture; a thin lenslet whose stop lies δ behind
it (towards the sensor) has β = (1 − δ/d)/(1 − δ/z″) − 1 ≈ −(δ/d)·(1 − d/f − 1/υ), z″ the image of
X′ (the test of this module). A plano-convex cap on a substrate has its mask ≈ sag/n behind H′'s
thin-lens equivalent, spherical aberration and coma, and β of about +1 % near focus to −1 % far
from it (R12-A caps, :func:`chief_ray_map`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import vogel_disc
from plenocal.model.observations import BapFeatures
from plenocal.model.projection import micro_lens_centres
from plenocal.model.white import internal_parameters
from plenocal.sim.optics._kernels import surface_table, trace_rays
from plenocal.sim.optics.lenslets import LensletDesign, LensletType, lenslet_prescription

SPOT_SAMPLES = 20_000
"""Rays per virtual point (a Vogel spiral on the part of the main aperture that can reach the
lenslet): the centroid of an unvignetted spot is then exact to ~1e-5 of its offset."""
FOOTPRINT_MARGIN = 1.5
"""The rays are drawn on the disc of the main aperture that the lenslet's clear aperture, seen
from X′, covers — enlarged by this factor and clipped by the aperture, so that every ray that can
pass is drawn: a stop behind the lenslet's front plane is met by rays that crossed that plane
off its disc (a cap's mask 7.5 µm behind its vertex: < 2 % of r_c; the tests' stop 20 µm behind
an ideal lens: ~15 %)."""
START_GAP_MM = 1e-3
"""Rays start this far in front of the lenslet's first vertex (in air)."""
MAP_POINTS_PER_AXIS = 4
"""Virtual points per axis of the square grid that :func:`chief_ray_map` fits its map to."""
MAP_CONE_FRACTION = 0.9
"""The grid reaches this fraction of the largest lateral offset at which the main aperture still
does not clip the bundle (the map describes unvignetted spots only)."""

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class LensletBench:
    """One lenslet behind a thin main lens (module docstring). Lengths in mm.

    Attributes
    ----------
    table : ndarray
        The lenslet's kernel surface table, lenslet coordinates (z from its front vertex).
    rear_principal_z_mm : float
        H′ in lenslet coordinates (H is at z = 0).
    clear_radius_mm : float
    focal_length_mm : float
        Paraxial focal length f.
    d_mm : float
        H′ → sensor.
    D_mm : float
        Main lens (its pupil) → H.
    pupil_radius_mm : float
        The main aperture's radius, F/(2N).
    """

    table: FloatArray
    rear_principal_z_mm: float
    clear_radius_mm: float
    focal_length_mm: float
    d_mm: float
    D_mm: float
    pupil_radius_mm: float

    @property
    def sensor_z_mm(self) -> float:
        return self.rear_principal_z_mm + self.d_mm


def lenslet_bench(design: LensletDesign, kind: LensletType, *, d_mm: float, D_mm: float, pupil_radius_mm: float) -> LensletBench:
    """The bench of a lenslet type of ``design`` (:func:`plenocal.sim.optics.lenslets.lenslet_types`)."""
    table = surface_table(lenslet_prescription(design, kind))
    return LensletBench(table, kind.principal_gap_mm, kind.clear_radius_mm, kind.focal_length_mm, float(d_mm), float(D_mm),
                        float(pupil_radius_mm))


def spot(bench: LensletBench, point_mm: FloatArray, *, field_mm: float = 0.0, samples: int = SPOT_SAMPLES) -> FloatArray:
    """Sensor hits (x, y), lenslet coordinates (mm from the lenslet axis), of the rays from the main
    aperture towards the virtual point ``point_mm`` = (x, y, z) (z > 0: behind H) that pass the
    lenslet, shape (M, 2); M = 0 if none does."""
    X = np.asarray(point_mm, dtype=np.float64)
    scale = (X[2] + bench.D_mm) / X[2]  # lenslet plane → main lens plane, seen from X′
    centre = -X[:2] * (scale - 1.0)
    disc = centre + vogel_disc(samples) * FOOTPRINT_MARGIN * bench.clear_radius_mm * abs(scale)
    disc = disc[np.hypot(disc[:, 0] + field_mm, disc[:, 1]) <= bench.pupil_radius_mm]
    start = np.column_stack([disc, np.full(len(disc), -bench.D_mm)])
    direction = X[None, :] - start
    t = (-START_GAP_MM - start[:, 2]) / direction[:, 2]
    ok, p, d = trace_rays(bench.table, np.ascontiguousarray(start + t[:, None] * direction), np.ascontiguousarray(direction), True)
    p, d = p[ok], d[ok]
    s = (bench.sensor_z_mm - p[:, 2]) / d[:, 2]
    return p[:, :2] + s[:, None] * d[:, :2]


def unvignetted_offset_mm(bench: LensletBench, virtual_depth: float) -> float:
    """Largest lateral offset of X′ (at virtual depth υ, from the centre of the cone the main
    aperture sends towards it) for which the lenslet's clear aperture lies inside that cone;
    ≤ 0 when the aperture clips every bundle at this depth. (The clear aperture is taken in the
    lenslet's front plane: a stop far behind it, whose footprint there is larger, needs a
    margin.)"""
    z = virtual_depth * bench.d_mm
    cone = bench.pupil_radius_mm * z / (bench.D_mm + z)
    return (cone - bench.clear_radius_mm) * (bench.D_mm + z) / bench.D_mm


@dataclass(frozen=True)
class ChiefRayMap:
    """Centroid of unvignetted spots against the thin model's image (module docstring).

    Attributes
    ----------
    offset_mm : float
        c0, along the direction away from the main axis.
    beta_t, beta_s : float
        Relative scale of the offset from the lenslet axis along (tangential) and across
        (sagittal) that direction.
    """

    offset_mm: float
    beta_t: float
    beta_s: float


def chief_ray_map(bench: LensletBench, virtual_depth: float, *, field_mm: float = 0.0,
                  samples: int = SPOT_SAMPLES) -> ChiefRayMap | None:
    """The :class:`ChiefRayMap` at virtual depth υ (> 1, the Galilean side) and field C, fitted to
    a grid of virtual points whose spots the main aperture does not clip; None where it clips
    every bundle (near the lenslet, a wide main aperture)."""
    reach = unvignetted_offset_mm(bench, virtual_depth) * MAP_CONE_FRACTION / math.sqrt(2.0)
    if not reach > 0.0:
        return None
    z = virtual_depth * bench.d_mm
    x0 = field_mm * z / bench.D_mm  # X′ whose cone is centred on the lenslet
    grid = np.linspace(-reach, reach, MAP_POINTS_PER_AXIS)
    model, centroid = [], []
    for dx in grid:
        for dy in grid:
            x = np.array([x0 + dx, dy, z])
            hits = spot(bench, x, field_mm=field_mm, samples=samples)
            model.append(x[:2] * bench.d_mm / z)
            centroid.append(hits.mean(axis=0))
    m, c = np.array(model), np.array(centroid)
    bt, c0 = np.polyfit(m[:, 0], c[:, 0], 1)
    bs = np.polyfit(m[:, 1], c[:, 1], 1)[0]
    return ChiefRayMap(float(c0), float(bt - 1.0), float(bs - 1.0))


def displaced_features(camera: PlenopticCamera, bap: BapFeatures, beta_t: FloatArray, beta_s: FloatArray,
                       offset_mm: FloatArray | float = 0.0) -> BapFeatures:
    """BAP features of ``camera`` as a detector would report them through lenslets with the chief-ray
    maps (β_t, β_s, c0) given per feature (arrays of shape (N,), or scalars).

    Each (u, v) moves about the foot of its lens's axis on the sensor (the lens centre projected
    along the MLA normal): the component along the direction away from the main axis is scaled by
    1 + β_t and moved by c0, the other by 1 + β_s. ρ is re-derived as detection derives it, from
    the virtual depth the moved disparities give (eq:virtdepth: 1/υ scales with the disparity, by
    1 + (β_t + β_s)/2) through eq:radiusfinal with the camera's own Ω: ρ + (Δ_C/2)·β·(1/υ)/s.
    """
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    n = len(bap)
    beta_t = np.broadcast_to(np.asarray(beta_t, dtype=np.float64), (n,))
    beta_s = np.broadcast_to(np.asarray(beta_s, dtype=np.float64), (n,))
    offset = np.broadcast_to(np.asarray(offset_mm, dtype=np.float64), (n,))
    C = micro_lens_centres(camera, bap.k, bap.l)
    normal = camera.mla.rotation[:, 2]
    foot = C + normal[None, :] * ((-camera.sensor.distance_mm - C[:, 2]) / normal[2])[:, None]
    fu, fv = u0 - foot[:, 0] / s, v0 - foot[:, 1] / s
    r = np.hypot(C[:, 0], C[:, 1])
    away = -C[:, :2] / np.maximum(r, 1e-12)[:, None]  # in (u, v): the sensor's axes are the camera's, flipped
    e = np.stack([bap.u - fu, bap.v - fv], axis=1)
    et = np.sum(e * away, axis=1)
    es = e - et[:, None] * away
    moved = (et * (1.0 + beta_t) + offset / s)[:, None] * away + es * (1.0 + beta_s)[:, None]
    types = camera.mla.types.type_of(bap.k, bap.l)
    omega = internal_parameters(camera)
    half = omega.micro_lens_pitch_mm / 2.0 / s
    q_prime = np.asarray(omega.q_prime_mm)[types] / s
    inverse_depth = (bap.rho - q_prime + half) / half  # eq:radiusfinal solved for 1/υ
    rho = bap.rho + half * 0.5 * (beta_t + beta_s) * inverse_depth
    return BapFeatures(frame=bap.frame, k=bap.k, l=bap.l, u=fu + moved[:, 0], v=fv + moved[:, 1], rho=rho,
                       node=bap.node, cluster=bap.cluster)
