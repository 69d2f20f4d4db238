"""numba kernels of the real-optics tracer: exact sphere intersections, Snell's law, ideal
surfaces, the main lens traced surface by surface (``docs/simulator.md``).

Main-lens coordinates are **lens coordinates** (``plenocal.sim.optics.paraxial``): z from the
vertex of surface 1, positive towards the sensor. A ray is a point p and a unit direction d;
"forward" runs from the scene to the sensor (d_z > 0), "backward" the other way.

Surface table (one row per surface, from the object side), float64, columns:

    0 z of the vertex      1 curvature c = 1/R (0: plane)     2 index before   3 index after
    4 clear semi-diameter² (inf: unlimited)   5 1 for an ideal surface   6 its power 1/f

Sphere: with w = z − z_vertex, the surface is c·(x² + y² + w²) − 2w = 0 (centre at w = R). The
ray p + t·d meets it where c·t² − 2B·t + C = 0 with B = d_w − c·(p·d), C = c·|p|² − 2p_w; the
root t = C / (B + sgn(B)·√(B² − c·C)) is the one that tends to the plane's as c → 0, i.e. the
hemisphere that holds the vertex, once the ray has been carried to the vertex plane (Spencer &
Murty's choice; p_w = 0 there). Its unit normal is
(−c·x, −c·y, 1 − c·w).

Snell (vector form): with μ = n₁/n₂ and the normal oriented along the ray (cos i = d·n > 0),
d′ = μ·d + (√(1 − μ²(1 − cos² i)) − μ·cos i)·n; a negative radicand is total internal
reflection, and the ray is dropped (a blocked ray is a value: ``ok = False``).

Ideal surface (a paraxial thin lens in air at the vertex plane): the ray's direction tangents
along its propagation, (d_x, d_y)/|d_z|, lose (x, y)/f — exact imaging of planes by the
thin-lens law, the same in both directions (optiland's ``paraxial`` surface does the same).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange
from numpy.typing import NDArray

from plenocal.sim.optics.prescription import Prescription, SurfaceKind

SURFACE_COLUMNS = 7


def surface_table(p: Prescription) -> NDArray[np.float64]:
    """The kernel's surface table of a prescription (module docstring), shape (n_surfaces, 7)."""
    z = p.vertex_z_mm
    rows = []
    for i, s in enumerate(p.surfaces):
        ideal = s.kind is SurfaceKind.IDEAL
        rows.append([
            z[i], s.curvature, p.index_before(i), s.index_after, s.semi_diameter_mm**2,
            1.0 if ideal else 0.0, s.power_ideal,
        ])
    return np.ascontiguousarray(np.array(rows, dtype=np.float64).reshape(-1, SURFACE_COLUMNS))


@numba.njit(cache=True, inline="always")
def refract(dx: float, dy: float, dz: float, nx: float, ny: float, nz: float, mu: float):  # pragma: no cover
    """Snell's law at a unit normal (either orientation), μ = n_in/n_out.

    Returns (ok, dx′, dy′, dz′); ok is False on total internal reflection.
    """
    c = dx * nx + dy * ny + dz * nz
    if c < 0.0:
        nx, ny, nz, c = -nx, -ny, -nz, -c
    k = 1.0 - mu * mu * (1.0 - c * c)
    if k < 0.0:
        return False, dx, dy, dz
    g = math.sqrt(k) - mu * c
    return True, mu * dx + g * nx, mu * dy + g * ny, mu * dz + g * nz


@numba.njit(cache=True, inline="always")
def sphere_distance(px: float, py: float, pw: float, dx: float, dy: float, dz: float, c: float):  # pragma: no cover
    """Distance t along the unit d from p (w measured from the vertex) to the surface
    c·(x² + y² + w²) − 2w = 0, on the vertex's hemisphere. Returns (ok, t).

    The ray is first carried to the vertex plane (Spencer & Murty), where the root that tends
    to the plane's is the vertex hemisphere's wherever the ray started (a ray starting inside
    the sphere, far behind the vertex, would otherwise pick the far side).
    """
    if dz == 0.0:
        return False, 0.0
    t0 = -pw / dz
    x = px + t0 * dx
    y = py + t0 * dy
    B = dz - c * (x * dx + y * dy)
    C = c * (x * x + y * y)
    disc = B * B - c * C
    if disc < 0.0:
        return False, 0.0
    den = B + math.copysign(math.sqrt(disc), B)
    if den == 0.0:
        return False, 0.0
    return True, t0 + C / den


@numba.njit(cache=True, inline="always")
def surface_step(
    table: NDArray[np.float64], i: int, forward: bool,
    px: float, py: float, pz: float, dx: float, dy: float, dz: float,
):  # pragma: no cover - compiled
    """The ray across surface ``i`` of ``table``: intersection, clipping, refraction.

    Returns (ok, px, py, pz, dx, dy, dz) at the surface, after it.
    """
    zv = table[i, 0]
    c = table[i, 1]
    pw = pz - zv
    if c == 0.0:
        if dz == 0.0:
            return False, px, py, pz, dx, dy, dz
        t = -pw / dz
    else:
        ok, t = sphere_distance(px, py, pw, dx, dy, dz, c)
        if not ok:
            return False, px, py, pz, dx, dy, dz
    x = px + t * dx
    y = py + t * dy
    w = pw + t * dz
    r2 = x * x + y * y
    if r2 > table[i, 4]:
        return False, x, y, zv + w, dx, dy, dz
    if table[i, 5] != 0.0:
        # Ideal thin lens: tangents along the propagation lose (x, y)·φ.
        phi = table[i, 6]
        az = abs(dz)
        tx = dx / az - x * phi
        ty = dy / az - y * phi
        norm = 1.0 / math.sqrt(tx * tx + ty * ty + 1.0)
        return True, x, y, zv + w, tx * norm, ty * norm, math.copysign(norm, dz)
    n_before = table[i, 2]
    n_after = table[i, 3]
    if n_before == n_after:
        return True, x, y, zv + w, dx, dy, dz
    mu = n_before / n_after if forward else n_after / n_before
    ok, ex, ey, ez = refract(dx, dy, dz, -c * x, -c * y, 1.0 - c * w, mu)
    return ok, x, y, zv + w, ex, ey, ez


@numba.njit(cache=True, inline="always")
def trace_lens(
    table: NDArray[np.float64], forward: bool,
    px: float, py: float, pz: float, dx: float, dy: float, dz: float,
):  # pragma: no cover - compiled
    """A ray through every surface of the table, in order (forward) or in reverse (backward).

    Returns (ok, px, py, pz, dx, dy, dz) after the last surface crossed; ok is False as soon as
    the ray misses a surface, is clipped by a semi-diameter (the stop's included) or is totally
    reflected.
    """
    n = table.shape[0]
    for j in range(n):
        i = j if forward else n - 1 - j
        ok, px, py, pz, dx, dy, dz = surface_step(table, i, forward, px, py, pz, dx, dy, dz)
        if not ok:
            return False, px, py, pz, dx, dy, dz
    return True, px, py, pz, dx, dy, dz


@numba.njit(cache=True, parallel=True)
def trace_rays(
    table: NDArray[np.float64], points: NDArray[np.float64], directions: NDArray[np.float64], forward: bool
):  # pragma: no cover - compiled
    """Vectorised :func:`trace_lens` (tests, ground truth).

    Parameters
    ----------
    points, directions : ndarray, shape (N, 3)
        Lens coordinates; directions are normalised here.

    Returns
    -------
    ok : ndarray of bool, shape (N,)
    points, directions : ndarray, shape (N, 3)
        After the last surface crossed.
    """
    n = points.shape[0]
    ok = np.zeros(n, dtype=np.bool_)
    p_out = np.empty((n, 3))
    d_out = np.empty((n, 3))
    for k in prange(n):
        dx, dy, dz = directions[k, 0], directions[k, 1], directions[k, 2]
        s = 1.0 / math.sqrt(dx * dx + dy * dy + dz * dz)
        res = trace_lens(table, forward, points[k, 0], points[k, 1], points[k, 2], dx * s, dy * s, dz * s)
        ok[k] = res[0]
        p_out[k, 0], p_out[k, 1], p_out[k, 2] = res[1], res[2], res[3]
        d_out[k, 0], d_out[k, 1], d_out[k, 2] = res[4], res[5], res[6]
    return ok, p_out, d_out
