"""A plenoptic camera with real optics, placed from a thin-lens camera (a preset), and its
thin-lens-equivalent truth (``docs/simulator.md``).

**Frames.** The *camera frame* is plenocal's (``docs/conventions.md``: x right, y down, z along the
optical axis towards the scene) with its **origin at the main lens's front principal plane H**,
as the validation set's ``t_origin_H``: object distances are measured from H, image distances
from H′, so the thin-lens-equivalent camera with poses from H is exact paraxially. Main-lens
surfaces are traced in lens coordinates (``paraxial``): z_lens = z_H − z_cam, x and y unchanged
(a mirror in z, harmless for a rotationally symmetric lens). Each lenslet is traced in its own
lenslet coordinates (``lenslets``): origin at its front vertex, z along −(MLA normal), x and y
along the MLA's axes.

**Placement** (from a :class:`~plenocal.model.camera.PlenopticCamera`, normally a preset's):

- the design is scaled to EFL = F;
- H′ lies Δ = z_H′ − z_H (lens coordinates; the H → H′ separation) behind H, so everything behind
  the lens is the thin camera's, moved by −Δ along z: the lenslets' mean front principal plane
  sits D behind H′ (per type, the vertices are offset by their sag's difference from the mean
  sag along the MLA normal, since the caps stand on one substrate);
- the sensor lies d behind the lenslets' mean rear principal plane: z_sensor = −(D + d) − Δ −
  mean_i t_i (1 − 1/n) (real lenslets; 0 for thin ones);
- MLA lattice, pitch, tilt and offset, types, f_i, pixel size and principal point are the thin
  camera's.

The **thin-lens equivalent** is the thin camera without Brown–Conrady distortion (F = EFL, D, d,
f_i, MLA pose, pitch, principal point): exact paraxial equivalents of the real camera (per-type
D_i, d_i differ by the sag, see :meth:`RealOpticsCamera.truth`). The **micro-image centres** are
the images of the **exit-pupil** centre through each lenslet's nodal points (H, H′ in air):
the ray from the exit-pupil centre to H_k, continued from H′_k to the sensor — not the
projection of H′ (:meth:`RealOpticsCamera.micro_image_centres_px`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import ModelError
from plenocal.model.camera import Distortion, MainLens, PlenopticCamera
from plenocal.model.projection import micro_lens_centres
from plenocal.sim.optics._kernels import surface_table
from plenocal.sim.optics.lenslets import LensletDesign, LensletKind, LensletType, lenslet_prescription, lenslet_types
from plenocal.sim.optics.paraxial import ParaxialData, paraxial_data, stop_semi_diameter_mm
from plenocal.sim.optics.prescription import Prescription

LENS_CLEARANCE_MM = 0.5
"""Smallest gap accepted between the main lens's last surface (at its clear semi-diameter) and
the lenslet array: a placement closer than this is refused (the lens would touch the MLA)."""


@dataclass(frozen=True, eq=False)
class RealOpticsCamera:
    """A real-optics plenoptic camera (module docstring).

    Attributes
    ----------
    lens : Prescription
        The main lens scaled to EFL = F (the stop's semi-diameter is set per f-number).
    lenslets : LensletDesign
    types : tuple of LensletType
        One per lens type (index = plenocal type).
    thin : PlenopticCamera
        The thin-lens equivalent (no distortion; its f-number is the default one).
    h_z : float
        Lens-coordinate position of H (the camera frame's origin).
    separation_mm : float
        Δ: H → H′ along the axis, + when H′ is behind H.
    sensor_z_mm : float
        Sensor plane, camera frame.
    vertices : ndarray, shape (L, 3)
        Each lenslet's front vertex (its H), camera frame, in lattice order.
    lens_type : ndarray of int, shape (L,)
    """

    lens: Prescription
    lenslets: LensletDesign
    types: tuple[LensletType, ...]
    thin: PlenopticCamera
    h_z: float
    separation_mm: float
    sensor_z_mm: float
    vertices: NDArray[np.float64] = field(repr=False)
    lens_type: NDArray[np.int64] = field(repr=False)

    @property
    def f_number(self) -> float:
        return self.thin.main_lens.f_number

    @property
    def mla_normal(self) -> NDArray[np.float64]:
        """Unit normal of the MLA, towards the scene (camera frame)."""
        return np.asarray(self.thin.mla.rotation[:, 2], dtype=np.float64)

    @property
    def mean_sag_mm(self) -> float:
        return float(np.mean([t.sag_mm for t in self.types]))

    @property
    def mean_principal_gap_mm(self) -> float:
        return float(np.mean([t.principal_gap_mm for t in self.types]))

    @property
    def air_gap_mm(self) -> float:
        """Substrate rear face → sensor at the MLA frame origin (real lenslets), or lenslet plane
        → sensor (thin)."""
        if self.lenslets.kind is LensletKind.THIN:
            return self.thin.d_mm
        return self.thin.d_mm + self.mean_principal_gap_mm - self.mean_sag_mm - self.lenslets.substrate_mm

    def paraxial(self, f_number: float | None = None) -> ParaxialData:
        """The main lens's first-order data at ``f_number`` (default: the camera's), lens
        coordinates."""
        return paraxial_data(self.lens, self.f_number if f_number is None else f_number)

    def lens_table(self, f_number: float | None = None) -> NDArray[np.float64]:
        """The main lens's kernel surface table with the stop set for ``f_number``."""
        n = self.f_number if f_number is None else f_number
        return surface_table(self.lens.with_stop_semi_diameter(stop_semi_diameter_mm(self.lens, n)))

    def lenslet_tables(self) -> NDArray[np.float64]:
        """Per-type kernel surface tables in lenslet coordinates, shape (I, m, 7)."""
        return np.ascontiguousarray(np.stack([surface_table(lenslet_prescription(self.lenslets, t)) for t in self.types]))

    def z_cam(self, z_lens: float) -> float:
        """Camera-frame z of a lens-coordinate position."""
        return self.h_z - z_lens

    def lenslet_principal_points(self, k: NDArray[np.integer], l: NDArray[np.integer]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Front and rear principal points (H_k, H′_k) of lenslets (k, l), camera frame, each (N, 3):
        :attr:`vertices` and :meth:`rear_principal_points` of those lenses, in their given order."""
        i = np.asarray(l, dtype=np.int64) * self.thin.mla.lattice.width + np.asarray(k, dtype=np.int64)
        return self.vertices[i], self.rear_principal_points()[i]

    def rear_principal_points(self) -> NDArray[np.float64]:
        """Each lenslet's H′, camera frame, shape (L, 3)."""
        gap = np.array([t.principal_gap_mm for t in self.types])[self.lens_type]
        return self.vertices - gap[:, None] * self.mla_normal[None, :]

    def micro_image_centres_px(self, f_number: float | None = None) -> NDArray[np.float64]:
        """Paraxial micro-image centres (u, v): the exit-pupil centre imaged through each lenslet's
        nodal points (module docstring), shape (L, 2)."""
        xp = self.z_cam(self.paraxial(f_number).exit_pupil_z)
        e = self.vertices - np.array([0.0, 0.0, xp])
        hp = self.rear_principal_points()
        t = (self.sensor_z_mm - hp[:, 2]) / e[:, 2]
        X = hp + t[:, None] * e
        s = self.thin.sensor.pixel_size_mm
        u0, v0 = self.thin.sensor.principal_point_px
        return np.stack([u0 - X[:, 0] / s, v0 - X[:, 1] / s], axis=1)

    def micro_image_radii_px(self, f_number: float | None = None) -> NDArray[np.float64]:
        """Paraxial support radius of each micro-image (px): the exit pupil's image through the
        lenslet's nodal points plus the lenslet aperture's blur, r_xp·d_k/D_k +
        r_c·|1 − d_k/f_k + d_k/D_k| with D_k = exit pupil → H_k and d_k = H′_k → sensor (both
        along z), shape (L,)."""
        par = self.paraxial(f_number)
        xp = self.z_cam(par.exit_pupil_z)
        D = xp - self.vertices[:, 2]
        d = self.rear_principal_points()[:, 2] - self.sensor_z_mm
        f = np.array([t.focal_length_mm for t in self.types])[self.lens_type]
        r_c = self.types[0].clear_radius_mm
        r = 0.5 * par.xpd_mm * d / np.abs(D) + r_c * np.abs(1.0 - d / f + d / D)
        return r / self.thin.sensor.pixel_size_mm

    def full_aperture_projected_solid_angle(self) -> float:
        """Projected solid angle (sr) of one lenslet's clear aperture seen from the sensor point
        on its axis, through the substrate (real) — the irradiance of a fully lit micro-image
        centre under radiance 1, which the renderer normalises to 1."""
        r_c = self.types[0].clear_radius_mm
        g = self.air_gap_mm
        if self.lenslets.kind is LensletKind.THIN:
            tau = r_c / g
        else:
            n, ts = self.lenslets.index, self.lenslets.substrate_mm
            tau = r_c / (g + ts / n)
            for _ in range(30):  # Newton on g·τ + t_s·τ/√(n²(1 + τ²) − τ²) = r_c
                q = math.sqrt(n * n * (1.0 + tau * tau) - tau * tau)
                h = g * tau + ts * tau / q - r_c
                dh = g + ts / q - ts * tau * tau * (n * n - 1.0) / q**3
                tau -= h / dh
        return math.pi * tau * tau / (1.0 + tau * tau)

    def per_type_distances_mm(self) -> tuple[list[float], list[float]]:
        """Per-type D_i (H′ of the main lens → the type's H) and d_i (the type's H′ → sensor),
        along z at the MLA frame origin (where plenocal measures D and d)."""
        D, d = self.thin.D_mm, self.thin.d_mm
        nz = float(self.mla_normal[2])
        Di, di = [], []
        for t in self.types:
            dsag = (t.sag_mm - self.mean_sag_mm) * nz
            dgap = (t.principal_gap_mm - self.mean_principal_gap_mm) * nz
            Di.append(D - dsag)
            di.append(d + dsag - dgap)
        return Di, di

    def truth(self, f_numbers: tuple[float, ...] = ()) -> dict[str, Any]:
        """The real-optics truth beyond the thin-lens equivalent, as plain numbers (the content of
        a dataset's ``ground_truth/optics.json``, ``docs/formats.md``).

        Positions are given in the camera frame (origin H, z towards the scene) as ``*_z_cam``,
        and in lens coordinates (z from the vertex of surface 1 towards the sensor) inside
        ``paraxial``. ``f_numbers``: the f-numbers to tabulate (the camera's is always included).
        """
        from plenocal.io.prescription import prescription_to_json

        ns = sorted({float(self.f_number), *(float(n) for n in f_numbers)})
        par = self.paraxial()
        Di, di = self.per_type_distances_mm()
        thin = self.thin
        xp_from_hp = par.exit_pupil_z - par.h_prime_z
        ep_from_h = par.entrance_pupil_z - par.h_z
        paraxial = {}
        for n in ns:
            p = self.paraxial(n)
            paraxial[f"{n:g}"] = p.to_dict() | {"entrance_pupil_diameter_mm": p.epd_mm, "exit_pupil_diameter_mm": p.xpd_mm}
        return {
            "frame": "camera frame: origin at the main lens's front principal plane H, z along the optical axis "
                     "towards the scene, x right, y down (docs/conventions.md); object distances from H, image "
                     "distances from H'",
            "main_lens": prescription_to_json(self.lens) | {"scaled_to_efl_mm": par.efl_mm},
            "paraxial_by_f_number": paraxial,
            "placement": {
                "h_lens_z_mm": self.h_z,
                "surface_vertex_z_cam_mm": [self.z_cam(z) for z in self.lens.vertex_z_mm],
                "h_prime_z_cam_mm": -self.separation_mm,
                "entrance_pupil_z_cam_mm": self.z_cam(par.entrance_pupil_z),
                "exit_pupil_z_cam_mm": self.z_cam(par.exit_pupil_z),
                "mla_origin_mean_vertex_z_cam_mm": -thin.D_mm - self.separation_mm,
                "sensor_z_cam_mm": self.sensor_z_mm,
            },
            "lenslets": {
                "kind": self.lenslets.kind.value,
                "index": self.lenslets.index if self.lenslets.kind is LensletKind.REAL else None,
                "substrate_mm": self.lenslets.substrate_mm if self.lenslets.kind is LensletKind.REAL else None,
                "clear_radius_mm": self.types[0].clear_radius_mm,
                "air_gap_mm": self.air_gap_mm,
                "types": [
                    {"focal_length_mm": t.focal_length_mm,
                     "cap_radius_mm": t.cap_radius_mm if math.isfinite(t.cap_radius_mm) else None,
                     "sag_mm": t.sag_mm, "centre_thickness_mm": t.thickness_mm,
                     "principal_gap_mm": t.principal_gap_mm}
                    for t in self.types
                ],
            },
            "thin_equivalent": {
                "F_mm": thin.main_lens.focal_length_mm,
                "D_mm": thin.D_mm,
                "d_mm": thin.d_mm,
                "D_per_type_mm": Di,
                "d_per_type_mm": di,
                "focal_lengths_mm": list(thin.mla.focal_lengths_mm),
                "principal_point_px": list(thin.sensor.principal_point_px),
                "distances_measured": "D: main lens H' to the lenslets' front principal planes (mean over types: the "
                                      "MLA plane), d: lenslets' rear principal planes (mean) to the sensor, along z at "
                                      "the MLA frame origin",
            },
            "principal_separation_mm": self.separation_mm,
            "entrance_pupil_from_h_mm": ep_from_h,
            "exit_pupil_from_h_prime_mm": xp_from_hp,
            "pupil_magnification": par.pupil_magnification,
            "lenslet_principal_gap_mm": [t.principal_gap_mm for t in self.types],
        }


def real_optics_camera(
    camera: PlenopticCamera, lens: Prescription, *, lenslets: LensletDesign | None = None
) -> RealOpticsCamera:
    """Place ``lens`` and real (or thin) lenslets in the geometry of the thin camera ``camera``
    (module docstring).

    Raises
    ------
    ModelError
        Pinhole micro-lenses (I = 0), a substrate too thick for d, caps too steep for their
        aperture, or a main lens that would reach the lenslet array.
    """
    lenslets = LensletDesign() if lenslets is None else lenslets
    if camera.n_types == 0:
        raise ModelError("the real-optics tracer needs micro-lens focal lengths (I >= 1), got I = 0")
    F = camera.main_lens.focal_length_mm
    thin = camera.replace(distortion=Distortion(), main_lens=MainLens(F, camera.main_lens.f_number))
    scaled = lens.scaled_to_efl(F)
    par = paraxial_data(scaled, thin.main_lens.f_number)
    delta = par.principal_separation_mm
    mla = thin.mla
    pitch = 0.5 * (mla.pitch_mm[0] + mla.pitch_mm[1])
    types = lenslet_types(lenslets, mla.focal_lengths_mm, pitch)
    k, l = mla.lattice.all_indices()
    lens_type = np.asarray(mla.types.type_of(k, l), dtype=np.int64)
    normal = np.asarray(mla.rotation[:, 2])
    sags = np.array([t.sag_mm for t in types])
    C = micro_lens_centres(thin, k, l)
    vertices = C - np.array([0.0, 0.0, delta]) + (sags[lens_type] - sags.mean())[:, None] * normal[None, :]
    gap = float(np.mean([t.principal_gap_mm for t in types]))
    sensor_z = -thin.sensor.distance_mm - delta - gap
    cam = RealOpticsCamera(
        lens=scaled, lenslets=lenslets, types=types, thin=thin, h_z=par.h_z, separation_mm=delta,
        sensor_z_mm=sensor_z, vertices=np.ascontiguousarray(vertices), lens_type=lens_type,
    )
    if lenslets.kind is LensletKind.REAL and not cam.air_gap_mm > 0.0:
        raise ModelError(
            f"the lenslets' substrate ({lenslets.substrate_mm:g} mm) is too thick for d = {thin.d_mm:g} mm: "
            f"the air gap to the sensor would be {cam.air_gap_mm:.4f} mm"
        )
    last = scaled.surfaces[-1]
    sag_last = 0.0
    if math.isfinite(last.radius_mm) and math.isfinite(last.semi_diameter_mm):
        R, h = last.radius_mm, last.semi_diameter_mm
        sag_last = R - math.copysign(math.sqrt(max(R * R - h * h, 0.0)), R)
    rear_most = cam.z_cam(par.last_vertex_z + max(sag_last, 0.0))
    if rear_most - float(vertices[:, 2].max()) < LENS_CLEARANCE_MM:
        raise ModelError(
            f"lens '{lens.name}' placed for D = {thin.D_mm:g} mm from H′ reaches the lenslet array "
            f"(clearance {rear_most - float(vertices[:, 2].max()):.3f} mm < {LENS_CLEARANCE_MM} mm)"
        )
    return cam
