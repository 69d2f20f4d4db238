"""Real chief rays: the ray through the aperture stop's centre to a point behind the lens,
found by Newton's method on its direction (``docs/simulator.md``).

The micro-image of lenslet k is the exit pupil seen from the lenslet, imaged through it; its
centre lies on the ray from the **exit-pupil** centre through the lenslet's centre. Paraxially
that ray comes from the paraxial exit pupil (:meth:`RealOpticsCamera.micro_image_centres_px`);
through a real lens it is the real chief ray — the ray that crosses the stop at its centre and
reaches the lenslet's front principal point H_k — continued from H′_k with the same direction.
With pupil aberration the two differ: at 9 mm from the axis on R12-B by 0.1 px (double-Gauss)
to 2 px (the field-corrector lens, whose menisci near the image bend oblique rays strongly).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import ModelError
from plenocal.sim.optics._kernels import trace_rays
from plenocal.sim.optics.camera import RealOpticsCamera

NEWTON_ITERATIONS = 8
NEWTON_STEP = 1e-7
"""Finite-difference step on the direction tangents (rad)."""
STOP_TOLERANCE_MM = 1e-9
"""A chief ray is accepted when it crosses the stop plane within this distance of its centre."""


def _unlimited_table(camera: RealOpticsCamera) -> NDArray[np.float64]:
    """The whole main lens, in lens coordinates, with unlimited apertures (a geometric ray;
    vignetting is not its business)."""
    table = camera.lens_table().copy()
    table[:, 4] = np.inf
    return np.ascontiguousarray(table)


def _behind_stop_table(camera: RealOpticsCamera) -> NDArray[np.float64]:
    """Surfaces from the stop to the last, with unlimited apertures (the geometric chief ray)."""
    return np.ascontiguousarray(_unlimited_table(camera)[camera.lens.stop_index:])


Miss = Callable[[NDArray[np.float64], NDArray[np.float64]], tuple[NDArray[np.float64], NDArray[np.bool_]]]
"""A ray's miss (N, 2) of its target, mm, and whether it was traced (N,), from its direction
tangents (a, b)."""


def _newton_on_tangents(miss: Miss, a: NDArray[np.float64], b: NDArray[np.float64]
                        ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """Direction tangents (a, b) whose rays hit their targets: :data:`NEWTON_ITERATIONS` Newton
    steps with a forward-difference Jacobian (step :data:`NEWTON_STEP`) from the given start, and
    whether each converged within :data:`STOP_TOLERANCE_MM`."""
    h = NEWTON_STEP
    ok = np.zeros(len(a), dtype=bool)
    for _ in range(NEWTON_ITERATIONS):
        f, ok0 = miss(a, b)
        fa, oka = miss(a + h, b)
        fb, okb = miss(a, b + h)
        J = np.stack([(fa - f) / h, (fb - f) / h], axis=2)  # (N, 2, 2): d(x, y)/d(a, b)
        det = J[:, 0, 0] * J[:, 1, 1] - J[:, 0, 1] * J[:, 1, 0]
        good = ok0 & oka & okb & (det != 0.0)
        det = np.where(good, det, 1.0)
        da = (J[:, 1, 1] * f[:, 0] - J[:, 0, 1] * f[:, 1]) / det
        db = (-J[:, 1, 0] * f[:, 0] + J[:, 0, 0] * f[:, 1]) / det
        a = np.where(good, a - da, a)
        b = np.where(good, b - db, b)
        ok = good
    f, ok0 = miss(a, b)
    return a, b, ok & ok0 & (np.hypot(f[:, 0], f[:, 1]) <= STOP_TOLERANCE_MM)


def chief_ray_directions(camera: RealOpticsCamera, targets_cam: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Direction (camera frame, towards the sensor) with which the real ray through the stop's
    centre arrives at each target point behind the lens.

    Parameters
    ----------
    targets_cam : ndarray, shape (N, 3)
        Points in the image space (camera frame, behind the last surface).

    Returns
    -------
    directions : ndarray, shape (N, 3)
        Unit vectors, camera frame.
    ok : ndarray of bool, shape (N,)
        Newton converged to within :data:`STOP_TOLERANCE_MM` of the stop's centre.
    """
    T = np.asarray(targets_cam, dtype=np.float64).reshape(-1, 3)
    table = _behind_stop_table(camera)
    z_stop = table[0, 0]
    # Lens coordinates of the targets; backward rays have d_z < 0 there.
    P = np.stack([T[:, 0], T[:, 1], camera.h_z - T[:, 2]], axis=1)
    par = camera.paraxial()
    xp = par.exit_pupil_z if np.isfinite(par.exit_pupil_z) else z_stop
    d0 = np.stack([-P[:, 0], -P[:, 1], np.full(len(P), xp) - P[:, 2]], axis=1)
    a = d0[:, 0] / np.abs(d0[:, 2])
    b = d0[:, 1] / np.abs(d0[:, 2])

    def stop_hit(a: NDArray[np.float64], b: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        d = np.stack([a, b, -np.ones_like(a)], axis=1)
        ok, q, _ = trace_rays(table, P, d, False)
        return q[:, :2], ok

    a, b, ok = _newton_on_tangents(stop_hit, a, b)
    # Towards the sensor in the camera frame: lens (−a, −b, +1) → camera (−a, −b, −1).
    d = np.stack([-a, -b, -np.ones_like(a)], axis=1)
    return d / np.linalg.norm(d, axis=1)[:, None], ok


def chief_ray_micro_image_centres_px(camera: RealOpticsCamera) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Micro-image centres (u, v) by real chief rays (module docstring), shape (L, 2), and
    whether each ray was found (L,)."""
    d, ok = chief_ray_directions(camera, camera.vertices)
    hp = camera.rear_principal_points()
    t = (camera.sensor_z_mm - hp[:, 2]) / d[:, 2]
    X = hp + t[:, None] * d
    s = camera.thin.sensor.pixel_size_mm
    u0, v0 = camera.thin.sensor.principal_point_px
    if not ok.any():
        raise ModelError(f"no chief ray of lens '{camera.lens.name}' reaches the lenslets")
    return np.stack([u0 - X[:, 0] / s, v0 - X[:, 1] / s], axis=1), ok


VIGNETTING_GRID = 24
"""Rays per axis of the square grid over the exit-pupil disc in :func:`relative_illumination`
(~450 rays in the disc: the fraction is good to ~0.3 %)."""


def relative_illumination(
    camera: RealOpticsCamera, radii_mm: NDArray[np.float64], *, f_number: float | None = None
) -> NDArray[np.float64]:
    """Mechanical vignetting: the fraction of the paraxial exit-pupil disc, seen from points of
    the lenslets' mean front principal plane at ``radii_mm`` from the axis, through which a real
    ray crosses every clear aperture and the stop (1 on axis for an unvignetted lens, a little
    less with pupil aberration; 0 where the lens does not reach).

    Returns
    -------
    ndarray, shape (len(radii_mm),)
    """
    par = camera.paraxial(f_number)
    table = camera.lens_table(f_number)
    r_xp = par.xpd_mm / 2.0
    g = (np.arange(VIGNETTING_GRID) + 0.5) / VIGNETTING_GRID * 2.0 - 1.0
    gx, gy = np.meshgrid(g, g)
    inside = gx**2 + gy**2 <= 1.0
    pupil = np.stack([gx[inside] * r_xp, gy[inside] * r_xp], axis=1)
    z_plane = camera.h_z + camera.thin.D_mm + camera.separation_mm  # lens coordinates of the MLA
    out = []
    for r in np.asarray(radii_mm, dtype=np.float64).reshape(-1):
        start = np.tile([r, 0.0, z_plane], (len(pupil), 1))
        aim = np.stack([pupil[:, 0], pupil[:, 1], np.full(len(pupil), par.exit_pupil_z)], axis=1)
        ok, _, _ = trace_rays(table, start, aim - start, False)
        out.append(ok.mean())
    return np.array(out)


def lit_image_radius_px(camera: RealOpticsCamera, *, f_number: float | None = None, fraction: float = 0.5) -> float:
    """Radius (px, from the principal point) out to which :func:`relative_illumination` stays
    >= ``fraction`` (searched in 0.1 mm steps on the MLA, scaled to the sensor by (D + d)/D);
    ``inf`` when the whole sensor is lit so."""
    sensor = camera.thin.sensor
    s = sensor.pixel_size_mm
    u0, v0 = sensor.principal_point_px
    corners = np.array([[0, 0], [sensor.width_px - 1, 0], [0, sensor.height_px - 1], [sensor.width_px - 1, sensor.height_px - 1]])
    reach_px = float(np.max(np.hypot(corners[:, 0] - u0, corners[:, 1] - v0)))
    scale = camera.thin.D_mm / (camera.thin.D_mm + camera.thin.d_mm)
    radii = np.arange(0.0, reach_px * s * scale + 0.1, 0.1)
    ill = relative_illumination(camera, radii, f_number=f_number)
    below = np.flatnonzero(ill < fraction)
    if len(below) == 0:
        return math.inf
    return float(radii[below[0]] / scale / s)


def feature_chief_rays_px(camera: RealOpticsCamera, points_cam: NDArray[np.float64], k: NDArray[np.integer],
                          l: NDArray[np.integer]) -> tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.bool_]]:
    """Where the paper's model puts a BAP feature, traced through the real main lens: the real ray
    from each object point that reaches its lenslet's front principal point H_k, continued from
    H′_k with the same direction to the sensor (the lenslet's nodal points; for thin lenslets the
    straight line through the lens centre, eq:bapprojm's (u, v)).

    No image and no detector: the chief-ray positions a perfect detector would report, so that
    what a calibration makes of them is the main lens's doing alone (``docs/model.md``, "What
    moves the exit pupil"). Newton's method on the ray's direction tangents, started from the
    thin-lens equivalent's ray, as :func:`chief_ray_directions`.

    Parameters
    ----------
    points_cam : ndarray, shape (N, 3)
        Object points, camera frame (z > 0, in front of the lens).
    k, l : ndarray of int, shape (N,)
        Each point's lenslet.

    Returns
    -------
    uv : ndarray, shape (N, 2)
        Sensor positions, px (the thin camera's principal point and pixel size).
    ok : ndarray of bool, shape (N,)
        Newton converged within :data:`STOP_TOLERANCE_MM` of H_k.
    vignetted : ndarray of bool, shape (N,)
        The ray is clipped by a clear semi-diameter or the stop: it carries no light, but is still
        where the model's (u, v) is.
    """
    P = np.asarray(points_cam, dtype=np.float64).reshape(-1, 3)
    H, Hp = camera.lenslet_principal_points(np.asarray(k), np.asarray(l))
    table = _unlimited_table(camera)
    start = np.stack([P[:, 0], P[:, 1], camera.h_z - P[:, 2]], axis=1)
    # the thin-lens equivalent's ray: from the virtual point through H_k, back to the plane of H′,
    # whose height the ray from P has on the plane of H
    F = camera.thin.main_lens.focal_length_mm
    zp = -camera.separation_mm  # H′, camera frame
    virtual = P * (-F / (P[:, 2] - F))[:, None]
    virtual[:, 2] += zp
    t = (zp - virtual[:, 2]) / (H[:, 2] - virtual[:, 2])
    y = virtual[:, :2] + t[:, None] * (H[:, :2] - virtual[:, :2])
    a = (y[:, 0] - P[:, 0]) / P[:, 2]
    b = (y[:, 1] - P[:, 1]) / P[:, 2]

    def exit_ray(a: NDArray[np.float64], b: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
        """The ray behind the lens, camera frame: a point, its direction, whether it was traced."""
        ok, q, dl = trace_rays(table, start, np.stack([a, b, np.ones_like(a)], axis=1), True)
        return (np.stack([q[:, 0], q[:, 1], camera.h_z - q[:, 2]], axis=1),
                np.stack([dl[:, 0], dl[:, 1], -dl[:, 2]], axis=1), ok)

    def miss(a: NDArray[np.float64], b: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        qc, dc, ok = exit_ray(a, b)
        s = (H[:, 2] - qc[:, 2]) / dc[:, 2]
        return qc[:, :2] + s[:, None] * dc[:, :2] - H[:, :2], ok

    a, b, ok = _newton_on_tangents(miss, a, b)
    dc = exit_ray(a, b)[1]
    s = (camera.sensor_z_mm - Hp[:, 2]) / dc[:, 2]
    X = Hp + s[:, None] * dc
    px = camera.thin.sensor.pixel_size_mm
    u0, v0 = camera.thin.sensor.principal_point_px
    lit, _, _ = trace_rays(camera.lens_table(), start, np.stack([a, b, np.ones_like(a)], axis=1), True)
    return np.stack([u0 - X[:, 0] / px, v0 - X[:, 1] / px], axis=1), ok, ok & ~lit
