"""numba kernels of the real-optics tracer: exact sphere intersections, Snell's law, ideal
surfaces, the main lens traced surface by surface (``docs/simulator.md``).

Main-lens coordinates are **lens coordinates** (``plenocal.sim.optics.paraxial``): z from the
vertex of surface 1, positive towards the sensor. A ray is a point p and a unit direction d;
"forward" runs from the scene to the sensor (d_z > 0), "backward" the other way.

Surface table (one row per surface, from the object side), float64, columns:

    0 z of the vertex      1 curvature c = 1/R (0: plane)     2 index before   3 index after
    4 clear semi-diameter² (inf: unlimited)   5 1 for an ideal surface   6 its power 1/f
    7–9 an ideal surface's spherical, field-curvature and distortion terms

Sphere: with w = z − z_vertex, the surface is c·(x² + y² + w²) − 2w = 0 (centre at w = R). The
ray p + t·d meets it where c·t² − 2B·t + C = 0 with B = d_w − c·(p·d), C = c·|p|² − 2p_w; the
root t = C / (B + sgn(B)·√(B² − c·C)) is the one that tends to the plane's as c → 0, i.e. the
hemisphere that holds the vertex, once the ray has been carried to the vertex plane (Spencer &
Murty's choice; p_w = 0 there). Its unit normal is
(−c·x, −c·y, 1 − c·w).

Snell (vector form): with μ = n₁/n₂ and the normal oriented along the ray (cos i = d·n > 0),
d′ = μ·d + (√(1 − μ²(1 − cos² i)) − μ·cos i)·n; a negative radicand is total internal
reflection, and the ray is dropped (a blocked ray is a value: ``alive = 0``).

Rays are traced in structure-of-arrays batches (one batch = the samples of one pixel and lenslet),
surface by surface, with branch-free inner loops that LLVM vectorises: 4 ns per ray and surface
on one core of the 2-core test machine, 8× the scalar loop's.

Ideal surface (a paraxial thin lens in air at the vertex plane): the ray's direction tangents
along its propagation, (d_x, d_y)/|d_z|, lose (x, y)/f — exact imaging of planes by the
thin-lens law, the same in both directions (optiland's ``paraxial`` surface does the same). Its
optional third-order terms (``prescription.Surface``) are added to the image-side tangent in lens
coordinates; backwards, the object-side tangent is found by fixed-point iteration.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange
from numpy.typing import NDArray

from plenocal.sim.optics.prescription import Prescription, SurfaceKind
from plenocal.sim.sampling import hash4 as hash4_
from plenocal.sim.sampling import mix64 as mix64_
from plenocal.sim.sampling import unit_float as unit_float_
from plenocal.sim.tracer import _shade_rays as shade_rays_

SURFACE_COLUMNS = 10
ABERRATION_ITERATIONS = 6
"""Fixed-point iterations that invert an ideal surface's third-order terms for backward rays
(each gains the factor |∂terms/∂t| ≲ 3·distortion·|t|², ~1e-2 for strong distortion)."""


def surface_table(p: Prescription) -> NDArray[np.float64]:
    """The kernel's surface table of a prescription (module docstring), shape (n_surfaces, 7)."""
    z = p.vertex_z_mm
    rows = []
    for i, s in enumerate(p.surfaces):
        ideal = s.kind is SurfaceKind.IDEAL
        rows.append([
            z[i], s.curvature, p.index_before(i), s.index_after, s.semi_diameter_mm**2,
            1.0 if ideal else 0.0, s.power_ideal, s.spherical, s.field_curvature, s.distortion,
        ])
    return np.ascontiguousarray(np.array(rows, dtype=np.float64).reshape(-1, SURFACE_COLUMNS))


_FASTMATH = {"nsz", "arcp", "contract", "reassoc"}
"""Fast-math flags of the kernels (as ``plenocal.sim.tracer``): no ``nnan``/``ninf``, since
unlimited semi-diameters are ``inf`` and dead rays may carry NaN. Results are identical for any
thread count (each pixel is computed by one thread, in a fixed order); they may differ in the last
bits between processors."""


@numba.njit(cache=True, fastmath=_FASTMATH, error_model="numpy", inline="always")
def _sphere_soa(
    n: int, zv: float, c: float, mu: float, sd2: float,
    px: NDArray[np.float64], py: NDArray[np.float64], pz: NDArray[np.float64],
    dx: NDArray[np.float64], dy: NDArray[np.float64], dz: NDArray[np.float64], alive: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    """Rays 0..n of the arrays across a sphere (module docstring): carried to the vertex plane,
    intersected, clipped at sd², refracted with μ = n_in/n_out. Branch-free (vectorised); a ray
    that misses, is clipped or totally reflected gets ``alive = 0``."""
    for r in range(n):
        ddx = dx[r]
        ddy = dy[r]
        ddz = dz[r]
        t0 = (zv - pz[r]) / ddz
        x = px[r] + t0 * ddx
        y = py[r] + t0 * ddy
        B = ddz - c * (x * ddx + y * ddy)
        C = c * (x * x + y * y)
        disc = B * B - c * C
        den = B + math.copysign(math.sqrt(max(disc, 0.0)), B)
        t1 = C / den
        x = x + t1 * ddx
        y = y + t1 * ddy
        w = t1 * ddz
        nx = -c * x
        ny = -c * y
        nz = 1.0 - c * w
        cs = ddx * nx + ddy * ny + ddz * nz
        sg = math.copysign(1.0, cs)
        cs = cs * sg
        k = 1.0 - mu * mu * (1.0 - cs * cs)
        g = (math.sqrt(max(k, 0.0)) - mu * cs) * sg
        ok = (disc >= 0.0) & (x * x + y * y <= sd2) & (k >= 0.0)
        alive[r] = alive[r] if ok else 0.0
        px[r] = x
        py[r] = y
        pz[r] = zv + w
        dx[r] = mu * ddx + g * nx
        dy[r] = mu * ddy + g * ny
        dz[r] = mu * ddz + g * nz


@numba.njit(cache=True, fastmath=_FASTMATH, error_model="numpy", inline="always")
def _plane_soa(
    n: int, zv: float, mu: float, sd2: float,
    px: NDArray[np.float64], py: NDArray[np.float64], pz: NDArray[np.float64],
    dx: NDArray[np.float64], dy: NDArray[np.float64], dz: NDArray[np.float64], alive: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    """Rays across a plane (normal ±z): the tangential direction components scale by μ."""
    for r in range(n):
        ddz = dz[r]
        t0 = (zv - pz[r]) / ddz
        x = px[r] + t0 * dx[r]
        y = py[r] + t0 * dy[r]
        tx = mu * dx[r]
        ty = mu * dy[r]
        k = 1.0 - tx * tx - ty * ty
        ok = (x * x + y * y <= sd2) & (k >= 0.0)
        alive[r] = alive[r] if ok else 0.0
        px[r] = x
        py[r] = y
        pz[r] = zv
        dx[r] = tx
        dy[r] = ty
        dz[r] = math.copysign(math.sqrt(max(k, 0.0)), ddz)


@numba.njit(cache=True, fastmath=_FASTMATH, error_model="numpy", inline="always")
def _ideal_soa(
    n: int, zv: float, phi: float, sd2: float,
    px: NDArray[np.float64], py: NDArray[np.float64], pz: NDArray[np.float64],
    dx: NDArray[np.float64], dy: NDArray[np.float64], dz: NDArray[np.float64], alive: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    """Rays across an ideal thin lens of power φ in the plane z = zv (tangent law)."""
    for r in range(n):
        ddz = dz[r]
        t0 = (zv - pz[r]) / ddz
        x = px[r] + t0 * dx[r]
        y = py[r] + t0 * dy[r]
        az = abs(ddz)
        tx = dx[r] / az - x * phi
        ty = dy[r] / az - y * phi
        norm = 1.0 / math.sqrt(tx * tx + ty * ty + 1.0)
        ok = x * x + y * y <= sd2
        alive[r] = alive[r] if ok else 0.0
        px[r] = x
        py[r] = y
        pz[r] = zv
        dx[r] = tx * norm
        dy[r] = ty * norm
        dz[r] = math.copysign(norm, ddz)


@numba.njit(cache=True, fastmath=_FASTMATH, error_model="numpy", inline="always")
def _ideal_aberrated_soa(
    n: int, zv: float, phi: float, sd2: float, a_sph: float, a_fc: float, a_dist: float, forward: bool,
    px: NDArray[np.float64], py: NDArray[np.float64], pz: NDArray[np.float64],
    dx: NDArray[np.float64], dy: NDArray[np.float64], dz: NDArray[np.float64], alive: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    """An ideal surface with third-order terms (module docstring): in lens-coordinate tangents,
    t′ = t − y·φ − a_sph·|y|²y − a_fc·|t|²y − a_dist·|t|²t; backwards t is solved by fixed point."""
    for r in range(n):
        ddz = dz[r]
        t0 = (zv - pz[r]) / ddz
        x = px[r] + t0 * dx[r]
        y = py[r] + t0 * dy[r]
        # Lens-coordinate tangents (dx/dz) are the same for either direction of travel.
        ux = dx[r] / ddz
        uy = dy[r] / ddz
        r2 = x * x + y * y
        if forward:
            q = ux * ux + uy * uy
            vx = ux - x * phi - a_sph * r2 * x - a_fc * q * x - a_dist * q * ux
            vy = uy - y * phi - a_sph * r2 * y - a_fc * q * y - a_dist * q * uy
        else:
            bx = ux + x * phi + a_sph * r2 * x
            by = uy + y * phi + a_sph * r2 * y
            vx = bx
            vy = by
            for _ in range(ABERRATION_ITERATIONS):
                q = vx * vx + vy * vy
                vx = bx + a_fc * q * x + a_dist * q * vx
                vy = by + a_fc * q * y + a_dist * q * vy
        norm = 1.0 / math.sqrt(vx * vx + vy * vy + 1.0)
        sz = math.copysign(norm, ddz)
        ok = r2 <= sd2
        alive[r] = alive[r] if ok else 0.0
        px[r] = x
        py[r] = y
        pz[r] = zv
        dx[r] = vx * sz
        dy[r] = vy * sz
        dz[r] = sz


@numba.njit(cache=True, fastmath=_FASTMATH, error_model="numpy")
def trace_soa(
    table: NDArray[np.float64], forward: bool, n: int,
    px: NDArray[np.float64], py: NDArray[np.float64], pz: NDArray[np.float64],
    dx: NDArray[np.float64], dy: NDArray[np.float64], dz: NDArray[np.float64], alive: NDArray[np.float64],
) -> bool:  # pragma: no cover - compiled
    """Rays 0..n of the arrays through every surface of ``table``, in order (forward) or in
    reverse (backward), in place; ``alive`` (1/0) is cleared for rays that miss a surface, are
    clipped by a semi-diameter (the stop's included) or totally reflected. Stops early, and
    returns False, when no ray is left."""
    ns = table.shape[0]
    for j in range(ns):
        i = j if forward else ns - 1 - j
        zv = table[i, 0]
        c = table[i, 1]
        sd2 = table[i, 4]
        if table[i, 5] != 0.0:
            if table[i, 7] == 0.0 and table[i, 8] == 0.0 and table[i, 9] == 0.0:
                _ideal_soa(n, zv, table[i, 6], sd2, px, py, pz, dx, dy, dz, alive)
            else:
                _ideal_aberrated_soa(n, zv, table[i, 6], sd2, table[i, 7], table[i, 8], table[i, 9], forward,
                                     px, py, pz, dx, dy, dz, alive)
        else:
            mu = table[i, 2] / table[i, 3] if forward else table[i, 3] / table[i, 2]
            if c != 0.0:
                _sphere_soa(n, zv, c, mu, sd2, px, py, pz, dx, dy, dz, alive)
            else:
                _plane_soa(n, zv, mu, sd2, px, py, pz, dx, dy, dz, alive)
        left = 0.0
        for r in range(n):
            left += alive[r]
        if left == 0.0:
            return False
    return True


TRACE_BATCH = 16
"""Rays per vectorised batch in :func:`trace_rays`."""


@numba.njit(cache=True, parallel=True)
def trace_rays(
    table: NDArray[np.float64], points: NDArray[np.float64], directions: NDArray[np.float64], forward: bool
):  # pragma: no cover - compiled
    """Rays through a surface table (tests, ground truth), in batches of :data:`TRACE_BATCH`.

    Parameters
    ----------
    points, directions : ndarray, shape (N, 3)
        Lens coordinates; directions are normalised here.

    Returns
    -------
    ok : ndarray of bool, shape (N,)
    points, directions : ndarray, shape (N, 3)
        At the last surface crossed (meaningful where ``ok``).
    """
    n = points.shape[0]
    ok = np.zeros(n, dtype=np.bool_)
    p_out = np.empty((n, 3))
    d_out = np.empty((n, 3))
    nb = (n + TRACE_BATCH - 1) // TRACE_BATCH
    for b in prange(nb):
        lo = b * TRACE_BATCH
        m = min(TRACE_BATCH, n - lo)
        buf = np.empty((7, TRACE_BATCH))
        for r in range(m):
            dx, dy, dz = directions[lo + r, 0], directions[lo + r, 1], directions[lo + r, 2]
            s = 1.0 / math.sqrt(dx * dx + dy * dy + dz * dz)
            buf[0, r] = points[lo + r, 0]
            buf[1, r] = points[lo + r, 1]
            buf[2, r] = points[lo + r, 2]
            buf[3, r] = dx * s
            buf[4, r] = dy * s
            buf[5, r] = dz * s
            buf[6, r] = 1.0
        trace_soa(table, forward, m, buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6])
        for r in range(m):
            ok[lo + r] = buf[6, r] != 0.0
            for c in range(3):
                p_out[lo + r, c] = buf[c, r]
                d_out[lo + r, c] = buf[3 + c, r]
    return ok, p_out, d_out


# --------------------------------------------------------------------------------------------
# The renderer's kernel (``plenocal.sim.optics.render``).

_K_SHIFT = np.uint64(0xA5A5A5A5A5A5A5A5)
FOOTPRINT_MARGIN = 0.01
"""Relative margin on the radius of the disc sampled on the substrate's rear face. The exact
footprint of the clear aperture (the circle r_c on the mask plane seen from the pixel centre
through the substrate) is an oval whose radial and tangential half-axes are computed exactly;
its departure from the covering disc's circle is ≲ 0.5 % of its radius at the steepest angles of
an R12-like MLA (|tan| <= 0.3), so 1 % keeps every transmitting ray inside the disc."""


@numba.njit(cache=True, inline="always")
def _footprint_scale(rho: float, g: float, ts: float, n: float) -> float:  # pragma: no cover - compiled
    """Lateral offset, on the rear face, of the ray from a sensor point that reaches lateral
    offset ``rho`` on the mask plane: g·τ with g·τ + t_s·τ/√(n² + τ²(n² − 1)) = ρ (Newton)."""
    tau = rho / (g + ts / n)
    n2 = n * n
    for _ in range(4):
        q = math.sqrt(n2 + tau * tau * (n2 - 1.0))
        h = g * tau + ts * tau / q - rho
        tau -= h / (g + ts * n2 / (q * q * q))
    return g * tau


@numba.njit(cache=True, inline="always")
def footprint_disc(xl: float, yl: float, g: float, ts: float, n: float, r_c: float, pixel_mm: float):  # pragma: no cover
    """Disc on a lenslet's rear face that holds every point through which a ray from the pixel
    reaches the clear aperture (radius r_c on the mask plane, t_s of glass of index n above the
    rear face), for every point of a pixel of side ``pixel_mm`` centred at (xl, yl), g below the
    rear face (lenslet coordinates).

    The footprint seen from the pixel centre is an oval, symmetric about the line to the axis:
    its radial extent comes from the exact rear-face offsets of the rays to the aperture's near
    and far points, its tangential half-width from the rays to the two side points; the disc
    around its radial middle with the larger half-width, +:data:`FOOTPRINT_MARGIN`, covers it,
    and (1 − κ)·s/√2 more (κ = g/(g + t_s/n), the paraxial shrink of the footprint towards the
    pixel) covers every point of the pixel.

    Returns
    -------
    cx, cy, radius : float
    """
    kappa0 = g / (g + ts / n)
    rho0 = math.sqrt(xl * xl + yl * yl)
    a_far = _footprint_scale(rho0 + r_c, g, ts, n)
    a_near = _footprint_scale(rho0 - r_c, g, ts, n)
    rp = math.sqrt(rho0 * rho0 + r_c * r_c)
    a_perp = _footprint_scale(rp, g, ts, n) * r_c / rp
    radius = max(0.5 * (a_far - a_near), a_perp) * (1.0 + FOOTPRINT_MARGIN) + (1.0 - kappa0) * pixel_mm * 0.7072
    mid = 0.5 * (a_far + a_near)
    f = mid / rho0 if rho0 > 0.0 else 0.0
    return xl - f * xl, yl - f * yl, radius


# Rows of the per-thread sample buffer of render_kernel.
_PX, _PY, _PZ, _DX, _DY, _DZ, _ALIVE, _W = 0, 1, 2, 3, 4, 5, 6, 7
_BUF_ROWS = 8


@numba.njit(parallel=True, cache=True, fastmath=_FASTMATH, error_model="numpy")
def render_kernel(
    out: NDArray[np.float32], j0: int, j1: int, i0: int, i1: int,
    vertices: NDArray[np.float64], lens_type: NDArray[np.int64], axes: NDArray[np.float64],
    lenslet_tables: NDArray[np.float64], sample_z: NDArray[np.float64], lenslet: NDArray[np.float64],
    main_table: NDArray[np.float64], h_z: float, sensor: NDArray[np.float64], width: int,
    mic: NDArray[np.float64], bound2: NDArray[np.float64],
    cell_start: NDArray[np.int64], cell_lens: NDArray[np.int32], cells_x: int, cell: int,
    patterns: NDArray[np.float64], rotations: NDArray[np.float64], seed: np.uint64, image_id: np.uint64,
    white: bool, white_level: float, plates: NDArray[np.float64], texture: NDArray[np.float32],
    background: float,
) -> None:  # pragma: no cover - compiled
    """Rows j0..j1, columns i0..i1 of a real-optics raw image (``render`` module docstring).

    ``lenslet`` = (real flag, index n, substrate t_s, clear radius r_c, 1/K, natural-vignetting
    flag): K is the projected solid angle of a fully lit micro-image centre, so that it renders
    as 1 under radiance 1. Without natural vignetting a sample weighs its disc's area over the
    aperture's (the thin tracer's "fraction of rays"; K = π r_c² × the footprint's scale² then).
    ``sample_z`` (per type): the sampled plane in lenslet coordinates (rear face, or the thin
    lens's plane). ``mic``, ``bound2``: each micro-image's paraxial centre (px) and squared
    culling radius (px²). ``patterns`` (n_patterns, 4, n): pixel offsets + ½ and unit-disc points.
    """
    s, u0, v0, zs = sensor[0], sensor[1], sensor[2], sensor[3]
    e1x, e1y, e1z = axes[0, 0], axes[1, 0], axes[2, 0]
    e2x, e2y, e2z = axes[0, 1], axes[1, 1], axes[2, 1]
    nx, ny, nz = axes[0, 2], axes[1, 2], axes[2, 2]
    # Camera unit vectors x and y in lenslet coordinates (z_l = −n·v).
    axx, axy, axz = e1x, e2x, -nx
    ayx, ayy, ayz = e1y, e2y, -ny
    real = lenslet[0] != 0.0
    n_glass, ts, r_c, inv_k = lenslet[1], lenslet[2], lenslet[3], lenslet[4]
    cosines = lenslet[5] != 0.0
    n_pat = np.uint64(patterns.shape[0])
    n_rot = np.uint64(rotations.shape[0])
    n_rays = patterns.shape[2]
    inv_n = 1.0 / n_rays
    nch = out.shape[2]
    for jj in prange(j1 - j0):
        j = j0 + jj
        cy = j // cell
        buf = np.empty((_BUF_ROWS, n_rays))
        shade = np.empty((10, n_rays))
        px, py, pz = buf[_PX], buf[_PY], buf[_PZ]
        dx, dy, dz = buf[_DX], buf[_DY], buf[_DZ]
        alive, wt = buf[_ALIVE], buf[_W]
        for i in range(i0, i1):
            cidx = cy * cells_x + i // cell
            X0x = (u0 - i) * s
            X0y = (v0 - j) * s
            a0 = 0.0
            a1 = 0.0
            a2 = 0.0
            for q in range(cell_start[cidx], cell_start[cidx + 1]):
                k = cell_lens[q]
                du0 = i - mic[k, 0]
                dv0 = j - mic[k, 1]
                if du0 * du0 + dv0 * dv0 > bound2[k]:
                    continue
                typ = lens_type[k]
                zp = sample_z[typ]
                Vx, Vy, Vz = vertices[k, 0], vertices[k, 1], vertices[k, 2]
                rx = X0x - Vx
                ry = X0y - Vy
                rz = zs - Vz
                # Pixel centre in lenslet coordinates.
                xl = e1x * rx + e1y * ry + e1z * rz
                yl = e2x * rx + e2y * ry + e2z * rz
                zl = -(nx * rx + ny * ry + nz * rz)
                # Disc sampled on the plane z_l = zp: the clear aperture's footprint (real) or the
                # thin lens's aperture.
                if real:
                    cx, cyy, radius = footprint_disc(xl, yl, zl - zp, ts, n_glass, r_c, s)
                else:
                    radius = r_c
                    cx = 0.0
                    cyy = 0.0
                area = math.pi * radius * radius
                key = hash4_(seed, image_id, np.uint64(j * width + i), np.uint64(k))
                pat = int(key % n_pat)
                k2 = mix64_(key ^ _K_SHIFT)
                k3 = mix64_(k2)
                rot = int(mix64_(k3) % n_rot)
                su = unit_float_(k2)
                sv = unit_float_(k3)
                ca = rotations[rot, 0] * radius
                sa = rotations[rot, 1] * radius
                pu = patterns[pat, 0]
                pv = patterns[pat, 1]
                px_ = patterns[pat, 2]
                py_ = patterns[pat, 3]
                for r in range(n_rays):
                    tu = pu[r] + su
                    tv = pv[r] + sv
                    du = tu - math.floor(tu) - 0.5
                    dv = tv - math.floor(tv) - 0.5
                    # Sample point on the pixel (camera: X0 − s·(du, dv, 0)), lenslet coordinates.
                    Xx = xl - s * (du * axx + dv * ayx)
                    Xy = yl - s * (du * axy + dv * ayy)
                    Xz = zl - s * (du * axz + dv * ayz)
                    Dx = cx + ca * px_[r] - sa * py_[r] - Xx
                    Dy = cyy + sa * px_[r] + ca * py_[r] - Xy
                    Dz = zp - Xz
                    r2 = Dx * Dx + Dy * Dy + Dz * Dz
                    inv_r = 1.0 / math.sqrt(r2)
                    ex = Dx * inv_r
                    ey = Dy * inv_r
                    ez = Dz * inv_r
                    # cos at the sampled plane (normal: the lenslet axis) and at the sensor (camera z).
                    cos_x = ex * e1z + ey * e2z - ez * nz
                    wt[r] = area * (-ez) * cos_x / r2 if cosines else area
                    px[r] = Xx
                    py[r] = Xy
                    pz[r] = Xz
                    dx[r] = ex
                    dy[r] = ey
                    dz[r] = ez
                    alive[r] = 1.0
                if not trace_soa(lenslet_tables[typ], False, n_rays, px, py, pz, dx, dy, dz, alive):
                    continue
                # Out of the lenslet: camera frame, then the main lens's coordinates (x, y, h_z − z).
                for r in range(n_rays):
                    lx, ly, lz = px[r], py[r], pz[r]
                    fx, fy, fz = dx[r], dy[r], dz[r]
                    px[r] = Vx + lx * e1x + ly * e2x - lz * nx
                    py[r] = Vy + lx * e1y + ly * e2y - lz * ny
                    pz[r] = h_z - (Vz + lx * e1z + ly * e2z - lz * nz)
                    dx[r] = fx * e1x + fy * e2x - fz * nx
                    dy[r] = fx * e1y + fy * e2y - fz * ny
                    dz[r] = -(fx * e1z + fy * e2z - fz * nz)
                if not trace_soa(main_table, False, n_rays, px, py, pz, dx, dy, dz, alive):
                    continue
                if white:
                    acc = 0.0
                    for r in range(n_rays):
                        acc += wt[r] * alive[r]
                    a0 += acc * white_level * inv_n * inv_k
                    continue
                # Object space, camera frame: each ray's line through the plane z = 0 (H), towards
                # the scene; dead rays get a harmless finite ray and weight 0.
                for r in range(n_rays):
                    live = alive[r] != 0.0
                    dzc = -dz[r]
                    t0 = -(h_z - pz[r]) / dzc
                    shade[0, r] = px[r] + t0 * dx[r] if live else 0.0
                    shade[1, r] = py[r] + t0 * dy[r] if live else 0.0
                    shade[2, r] = dx[r] if live else 0.0
                    shade[3, r] = dy[r] if live else 0.0
                    shade[4, r] = dzc if live else 1.0
                    shade[5, r] = wt[r] if live else 0.0
                shade_rays_(shade, n_rays, plates, texture, background)
                b0 = 0.0
                b1 = 0.0
                b2 = 0.0
                for r in range(n_rays):
                    b0 += shade[5, r] * shade[7, r]
                    b1 += shade[5, r] * shade[8, r]
                    b2 += shade[5, r] * shade[9, r]
                a0 += b0 * inv_n * inv_k
                a1 += b1 * inv_n * inv_k
                a2 += b2 * inv_n * inv_k
            out[j, i, 0] = a0
            if nch == 3:
                out[j, i, 1] = a1 if not white else a0
                out[j, i, 2] = a2 if not white else a0
