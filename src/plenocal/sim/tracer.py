"""Backward ray tracer of raw plenoptic images through the physical parts of a camera.

Every ray starts on a pixel's area and is traced towards the scene:

    pixel area → micro-lens (thin lens, aperture = its disc of diameter = the MLA pitch)
    → exit-pupil plane z = −e (disc of radius (F − e)/(2N); rays outside are vignetted; the
      paper's lens-plane aperture F/(2N) when e = 0)
    → thin main lens with lateral distortion in the virtual space → scene.

This module does **not** call :mod:`plenocal.model.projection`'s projections: it uses the camera's
dataclasses and the micro-lens centres (geometry) only, so a mistake in the model's projection
cannot hide in both the model and the simulator. Conventions: ``docs/conventions.md``.

Optics, for a sample point X on the sensor and a micro-lens of centre C, axis n, power φ = 1/f:

- thin micro-lens: every ray from X through the lens passes through the conjugate point
  X' = C + (X − C)·f/(f − d_X), with d_X = (C − X)·n; written homogeneously as
  (P, h) = (C·h + C − X, d_X·φ − 1) so that the unfocused case f = d_X (X' at infinity, h = 0)
  needs no special case;
- the ray through the disc point M meets the main-lens plane z = 0 at L, and the exit-pupil
  plane z = −e at A (vignetting test |A| ≤ (F − e)/(2N); A = L for the paper's e = 0). An
  aberration-free lens whose stop is not in its plane: the image-space rays are straight, the
  pupil only clips them (:class:`~plenocal.model.camera.MainLens`);
- main lens: the distortion (paper eq:distortion) acts on points of the virtual space, so the
  image-space ray, the straight line M → X' → L, is undistorted *as a whole*: Dist⁻¹ is
  linearised once per (pixel, micro-lens), Dist⁻¹(Y) ≈ c + I·Y (Newton's method), and the scene
  ray is the thin-lens conjugate (paper eq:thinlens) of the undistorted line through
  L~ = c + I·L and p' = c + I·X': it leaves the lens plane at L~ in direction L~·(z' + F) − F·p'.
  A scene point is then seen along the straight cone from its distorted virtual point through
  the main aperture, which is the paper's blur model (eq:blurradius). The linearisation point is
  where the pixel's central ray (main-lens centre → X') crosses the image of the checkerboard
  (:func:`focus_scale`; X' itself for other scenes), so the map is exact to second order in the
  bundle's spread where it meets the target.

  History (2026-11): the tracer first undistorted X' alone and sent every scene ray from L,
  which bends the cone; blur discs sat ~0.4 % of ρ off the chief ray at R12-A's distortion and
  detection was biased by ~0.01 px. Linearising at X' rather than on the target left errors of
  up to 0.08 px on frames far off-axis at large υ (r12-c translation frame 200).

Pixel value = Σ over micro-lenses of (mean radiance over the n rays sampled on (pixel area ×
lens disc)); blocked rays count as black, so vignetting by both apertures is physical. Gaps
between micro-lens discs receive no light. Micro-images of neighbouring lenses overlap, and add,
at wide apertures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
from numba import prange
from numpy.typing import NDArray

from plenocal.errors import ModelError
from plenocal.model.camera import PlenopticCamera
from plenocal.model.projection import micro_lens_centres
from plenocal.sim.sampling import hash4, mix64, sample_patterns, unit_float
from plenocal.sim.scene import (
    KIND_CHECKERBOARD,
    KIND_DISC,
    KIND_SPHERE,
    Scene,
    WhiteDiffuser,
    pack_scene,
)

CELL_SIZE_PX = 8
"""Side of the square cells of the sensor-space acceleration grid (pixels)."""

_K_SHIFT = np.uint64(0xA5A5A5A5A5A5A5A5)
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, eq=False)
class TracerOptics:
    """The camera as flat arrays for the kernels, at one main-lens f-number.

    Attributes
    ----------
    lens_centres : ndarray, shape (L, 3)
        Micro-lens centres in the camera frame (mm).
    lens_power : ndarray, shape (L,)
        1/f of each micro-lens (mm⁻¹).
    lens_radius_mm : float
        Radius of every micro-lens disc, (p0 + p1)/4.
    mla_axes : ndarray, shape (3, 3)
        Columns: the MLA plane's x and y axes and its normal, in the camera frame.
    main : ndarray, shape (9,)
        F, exit-pupil radius (F − e)/(2N), Q1, Q2, Q3, P1, P2, has_distortion, z of the exit
        pupil −e.
    sensor : ndarray, shape (4,)
        s (mm), u0, v0 (px), z of the sensor plane (mm, −(D + d)).
    width_px, height_px : int
    cell_start : ndarray, shape (n_cells + 1,)
    cell_lens : ndarray, shape (n_entries,)
        CSR lists of the micro-lenses whose micro-image support may touch each cell.
    cells_x : int
        Number of cells along u.
    """

    lens_centres: NDArray[np.float64]
    lens_power: NDArray[np.float64]
    lens_radius_mm: float
    mla_axes: NDArray[np.float64]
    main: NDArray[np.float64]
    sensor: NDArray[np.float64]
    width_px: int
    height_px: int
    cell_start: NDArray[np.int64]
    cell_lens: NDArray[np.int32]
    cells_x: int


@numba.njit(cache=True)
def _build_cells(
    cu: NDArray[np.float64], cv: NDArray[np.float64], radius: NDArray[np.float64],
    width: int, height: int, cell: int,
) -> tuple[NDArray[np.int64], NDArray[np.int32], int]:  # pragma: no cover - compiled
    nx = (width + cell - 1) // cell
    ny = (height + cell - 1) // cell
    counts = np.zeros(nx * ny + 1, dtype=np.int64)
    n = cu.shape[0]
    for pas in range(2):
        if pas == 1:
            for c in range(nx * ny):
                counts[c + 1] += counts[c]
            fill = counts[:-1].copy()
            entries = np.empty(counts[nx * ny], dtype=np.int32)
        for k in range(n):
            a0 = math.floor((cu[k] - radius[k] + 0.5) / cell)
            a1 = math.floor((cu[k] + radius[k] + 0.5) / cell)
            b0 = math.floor((cv[k] - radius[k] + 0.5) / cell)
            b1 = math.floor((cv[k] + radius[k] + 0.5) / cell)
            a0, b0 = max(a0, 0), max(b0, 0)
            a1, b1 = min(a1, nx - 1), min(b1, ny - 1)
            for b in range(b0, b1 + 1):
                for a in range(a0, a1 + 1):
                    c = b * nx + a
                    if pas == 0:
                        counts[c + 1] += 1
                    else:
                        entries[fill[c]] = k
                        fill[c] += 1
    return counts, entries, nx


def build_optics(camera: PlenopticCamera, f_number: float | None = None) -> TracerOptics:
    """Flatten a camera for the kernels, at main-lens f-number ``f_number`` (default: the
    camera's).

    Raises
    ------
    ModelError
        When the micro-lenses are pinholes (I = 0), or when unfocused micro-lenses (f = d) meet a
        distorted main lens (their conjugate points are at infinity, where the distortion of paper
        eq:distortion is undefined).
    """
    if camera.n_types == 0:
        raise ModelError("the ray tracer needs micro-lens focal lengths (I >= 1), got I = 0")
    if camera.distortion.has_depth:
        raise ModelError("the thin-lens tracer does not render a depth distortion (distortion.z1, z2); "
                         "render a curved field with the real-optics tracer (plenocal simulate --lens)")
    N = camera.main_lens.f_number if f_number is None else float(f_number)
    if not N > 0:
        raise ModelError(f"f-number must be > 0, got {f_number}")
    mla, sensor = camera.mla, camera.sensor
    lattice = mla.lattice
    k, l = lattice.all_indices()
    C = np.ascontiguousarray(micro_lens_centres(camera, k, l))
    f = np.asarray(mla.focal_lengths_mm)[mla.types.type_of(k, l)]
    power = 1.0 / f
    axes = np.ascontiguousarray(mla.rotation)
    r_lens = 0.25 * (mla.pitch_mm[0] + mla.pitch_mm[1])
    F = camera.main_lens.focal_length_mm
    e = camera.main_lens.exit_pupil_mm
    r_ap = (F - e) / (2.0 * N)  # the exit pupil's radius (MainLens.exit_pupil_radius_mm)
    dist = camera.distortion
    has_dist = 0.0 if dist.is_zero else 1.0
    s = sensor.pixel_size_mm
    u0, v0 = sensor.principal_point_px
    zs = -sensor.distance_mm
    # Distances of each lens to the main lens and to the sensor, along the MLA normal.
    n = axes[:, 2]
    D_l = -(C @ n)
    d_l = (C - np.array([0.0, 0.0, zs])) @ n
    if has_dist and np.any(np.abs(d_l * power - 1.0) < 1e-9):
        raise ModelError("unfocused micro-lenses (f = d) with a distorted main lens are not supported")
    # Culling bound of each micro-image (a generous circle around the central projection of C
    # from the exit-pupil centre (0, 0, −e)): support radius r_lens·|1 − d/f + d/D_e| + d·r_ap/D_e
    # of a white micro-image, D_e = D − e, +10 %, +2 px.
    scale = (zs + e) / (C[:, 2] + e)
    cu = u0 - C[:, 0] * scale / s
    cv = v0 - C[:, 1] * scale / s
    D_e = D_l - e
    support = (r_lens * np.abs(1.0 - d_l * power + d_l / D_e) + d_l * r_ap / D_e) / s
    bound = 1.1 * support + 2.0
    starts, entries, nx = _build_cells(cu, cv, bound, sensor.width_px, sensor.height_px, CELL_SIZE_PX)
    main = np.array([F, r_ap, dist.q1, dist.q2, dist.q3, dist.p1, dist.p2, has_dist, -e])
    return TracerOptics(
        lens_centres=C,
        lens_power=np.ascontiguousarray(power),
        lens_radius_mm=float(r_lens),
        mla_axes=axes,
        main=main,
        sensor=np.array([s, u0, v0, zs]),
        width_px=sensor.width_px,
        height_px=sensor.height_px,
        cell_start=starts,
        cell_lens=entries,
        cells_x=int(nx),
    )


@numba.njit(cache=True, inline="always")
def _distort_jac(x: float, y: float, q1: float, q2: float, q3: float, p1: float, p2: float):  # pragma: no cover
    """Distortion (paper eq:distortion) at (x, y) and its Jacobian."""
    r2 = x * x + y * y
    rad = q1 * r2 + q2 * r2 * r2 + q3 * r2 * r2 * r2
    g = q1 + 2.0 * q2 * r2 + 3.0 * q3 * r2 * r2
    fx = x + x * rad + p1 * (r2 + 2.0 * x * x) + 2.0 * p2 * x * y
    fy = y + y * rad + p2 * (r2 + 2.0 * y * y) + 2.0 * p1 * x * y
    jxx = 1.0 + rad + 2.0 * g * x * x + 6.0 * p1 * x + 2.0 * p2 * y
    jyy = 1.0 + rad + 2.0 * g * y * y + 6.0 * p2 * y + 2.0 * p1 * x
    jxy = 2.0 * g * x * y + 2.0 * p1 * y + 2.0 * p2 * x
    return fx, fy, jxx, jxy, jyy


@numba.njit(cache=True)
def undistort_newton(
    xu: float, yu: float, q1: float, q2: float, q3: float, p1: float, p2: float
):  # pragma: no cover - compiled
    """(x, y) with Dist(x, y) = (xu, yu), and the inverse Jacobian there (Newton, 5 steps).

    Returns
    -------
    x, y, i00, i01, i10, i11 : float
        The undistorted point and dDist⁻¹ = J(x, y)⁻¹ (row-major).
    """
    x, y = xu, yu
    for _ in range(5):
        fx, fy, jxx, jxy, jyy = _distort_jac(x, y, q1, q2, q3, p1, p2)
        det = jxx * jyy - jxy * jxy
        rx, ry = fx - xu, fy - yu
        x -= (jyy * rx - jxy * ry) / det
        y -= (-jxy * rx + jxx * ry) / det
    _, _, jxx, jxy, jyy = _distort_jac(x, y, q1, q2, q3, p1, p2)
    det = jxx * jyy - jxy * jxy
    return x, y, jyy / det, -jxy / det, -jxy / det, jxx / det


@numba.njit(cache=True, inline="always")
def _scene_ray(
    Lx: float, Ly: float, Px: float, Py: float, Pz: float, h: float, F: float,
    c_x: float, c_y: float, i00: float, i01: float, i10: float, i11: float,
):  # pragma: no cover - compiled
    """Scene ray of the image-space ray through the aperture point L and X' = P/h (homogeneous):
    the thin-lens conjugate of that line undistorted as a whole by Dist⁻¹(Y) ≈ c + I·Y (module
    docstring). It leaves the lens plane at L~ = c + I·L in direction L~·(z' + F) − F·p' times h,
    p' = c + I·X'. Returns L~ (x, y) and the direction (x, y, z)."""
    Sx = c_x + i00 * Lx + i01 * Ly
    Sy = c_y + i10 * Lx + i11 * Ly
    w = Pz + F * h
    dx = Sx * w - F * (h * c_x + i00 * Px + i01 * Py)
    dy = Sy * w - F * (h * c_y + i10 * Px + i11 * Py)
    return Sx, Sy, dx, dy, -F * Pz


@numba.njit(cache=True)
def focus_scale(
    x: float, y: float, z: float, F: float, n: NDArray[np.float64], h: float,
    q1: float, q2: float, q3: float, p1: float, p2: float,
) -> float:  # pragma: no cover - compiled
    """t such that the scene conjugate of the undistorted t·X' lies on the plane n·X = h.

    X' = (x, y, z) is a point of the (distorted) virtual space; the line from the main-lens centre
    through it is the central ray of a pixel's bundle. The conjugate of p' = (Dist⁻¹(t·x, t·y), t·z)
    is F·p'/(z' + F), so the condition is F·n·p' − h·(t·z + F) = 0 (Newton, 3 steps from t = 1;
    1 if it fails). The tracer linearises Dist⁻¹ there: where the bundle crosses the image of
    the checkerboard.
    """
    t = 1.0
    for _ in range(3):
        ux, uy, i00, i01, i10, i11 = undistort_newton(t * x, t * y, q1, q2, q3, p1, p2)
        g = F * (n[0] * ux + n[1] * uy + n[2] * t * z) - h * (t * z + F)
        dg = F * (n[0] * (i00 * x + i01 * y) + n[1] * (i10 * x + i11 * y) + n[2] * z) - h * z
        tn = t - g / dg if dg != 0.0 else t
        t = tn if (tn > 0.0 and tn < 100.0) else 1.0
    return t


@numba.njit(cache=True, inline="always", fastmath={"nsz", "arcp", "contract", "reassoc"})
def _bilinear_texel(buf: NDArray[np.float64], r: int, texture: NDArray[np.float32], fx: float, fy: float) -> None:  # pragma: no cover
    """Radiance (r, g, b) of ray ``r`` (``buf`` rows 7–9) bilinear in ``texture`` at texel
    coordinates (fx, fy), clamped to [0, w − 1] × [0, h − 1] by the caller (grey textures repeat
    their one channel)."""
    h, w, nc = texture.shape
    ix0 = min(int(fx), w - 1)
    iy0 = min(int(fy), h - 1)
    ix1 = min(ix0 + 1, w - 1)
    iy1 = min(iy0 + 1, h - 1)
    ax = fx - ix0
    ay = fy - iy0
    for c in range(3):
        cc = min(c, nc - 1)
        buf[7 + c, r] = (1.0 - ay) * (
            (1.0 - ax) * texture[iy0, ix0, cc] + ax * texture[iy0, ix1, cc]
        ) + ay * ((1.0 - ax) * texture[iy1, ix0, cc] + ax * texture[iy1, ix1, cc])


@numba.njit(cache=True, fastmath={"nsz", "arcp", "contract", "reassoc"})
def _shade_rays(
    buf: NDArray[np.float64], n: int, plates: NDArray[np.float64], texture: NDArray[np.float32],
    background: float,
) -> None:  # pragma: no cover - compiled
    """Radiance of rays L + t·dir (L on the plane z = 0): the nearest plate hit, else background.

    ``buf`` rows: 0–1 L (x, y), 2–4 dir, 5 aperture weight (unused here), 6 nearest t (scratch),
    7–9 radiance (r, g, b) (output). Loops over rays are branch-free so LLVM vectorises them.
    """
    for r in range(n):
        buf[6, r] = np.inf
        buf[7, r] = background
        buf[8, r] = background
        buf[9, r] = background
    for k in range(plates.shape[0]):
        p = plates[k]
        nx, ny, nz = p[2], p[5], p[8]
        tx, ty, tz = p[9], p[10], p[11]
        x0, x1, y0, y1 = p[12], p[13], p[14], p[15]
        kind = int(p[16])
        if kind == KIND_CHECKERBOARD:
            sq = p[17]
            inv_sq = 1.0 / sq
            sx1 = sq * p[18]
            sy1 = sq * p[19]
            black, white = p[20], p[21]
            for r in range(n):
                Lx, Ly, dx, dy, dz = buf[0, r], buf[1, r], buf[2, r], buf[3, r], buf[4, r]
                t = ((tx - Lx) * nx + (ty - Ly) * ny + tz * nz) / (dx * nx + dy * ny + dz * nz)
                wx = Lx + t * dx - tx
                wy = Ly + t * dy - ty
                wz = t * dz - tz
                x = p[0] * wx + p[3] * wy + p[6] * wz
                y = p[1] * wx + p[4] * wy + p[7] * wz
                hit = (t > 0.0) & (t < buf[6, r]) & (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
                squares = (x >= -sq) & (x < sx1) & (y >= -sq) & (y < sy1)
                cells = math.floor(x * inv_sq) + math.floor(y * inv_sq)
                odd = cells - 2.0 * math.floor(0.5 * cells)
                v = black + (white - black) * odd if squares else white
                buf[6, r] = t if hit else buf[6, r]
                buf[7, r] = v if hit else buf[7, r]
                buf[8, r] = v if hit else buf[8, r]
                buf[9, r] = v if hit else buf[9, r]
        elif kind == KIND_DISC:
            radius2 = p[17] * p[17]
            level = p[18]
            for r in range(n):
                Lx, Ly, dx, dy, dz = buf[0, r], buf[1, r], buf[2, r], buf[3, r], buf[4, r]
                t = ((tx - Lx) * nx + (ty - Ly) * ny + tz * nz) / (dx * nx + dy * ny + dz * nz)
                wx = Lx + t * dx - tx
                wy = Ly + t * dy - ty
                wz = t * dz - tz
                x = p[0] * wx + p[3] * wy + p[6] * wz
                y = p[1] * wx + p[4] * wy + p[7] * wz
                hit = (t > 0.0) & (t < buf[6, r]) & (x * x + y * y <= radius2)
                buf[6, r] = t if hit else buf[6, r]
                buf[7, r] = level if hit else buf[7, r]
                buf[8, r] = level if hit else buf[8, r]
                buf[9, r] = level if hit else buf[9, r]
        elif kind == KIND_SPHERE:  # near side of the sphere, texture wrapped by longitude and colatitude
            radius = p[17]
            h, w = texture.shape[0], texture.shape[1]
            for r in range(n):
                Lx, Ly, dx, dy, dz = buf[0, r], buf[1, r], buf[2, r], buf[3, r], buf[4, r]
                ox, oy, oz = Lx - tx, Ly - ty, -tz
                a = dx * dx + dy * dy + dz * dz
                b = dx * ox + dy * oy + dz * oz
                disc = b * b - a * (ox * ox + oy * oy + oz * oz - radius * radius)
                if disc < 0.0:
                    continue
                t = (-b - math.sqrt(disc)) / a
                if not ((t > 0.0) & (t < buf[6, r])):
                    continue
                wx = ox + t * dx
                wy = oy + t * dy
                wz = oz + t * dz
                x = p[0] * wx + p[3] * wy + p[6] * wz
                y = p[1] * wx + p[4] * wy + p[7] * wz
                z = p[2] * wx + p[5] * wy + p[8] * wz
                lon = math.atan2(y, x)
                colat = math.acos(min(max(z / radius, -1.0), 1.0))
                fx = min(max((lon + math.pi) / (2.0 * math.pi) * w - 0.5, 0.0), w - 1.0)
                fy = min(max(colat / math.pi * h - 0.5, 0.0), h - 1.0)
                buf[6, r] = t
                _bilinear_texel(buf, r, texture, fx, fy)
        else:  # texture: bilinear at texel centres, clamped at the edges
            h, w = texture.shape[0], texture.shape[1]
            for r in range(n):
                Lx, Ly, dx, dy, dz = buf[0, r], buf[1, r], buf[2, r], buf[3, r], buf[4, r]
                t = ((tx - Lx) * nx + (ty - Ly) * ny + tz * nz) / (dx * nx + dy * ny + dz * nz)
                wx = Lx + t * dx - tx
                wy = Ly + t * dy - ty
                wz = t * dz - tz
                x = p[0] * wx + p[3] * wy + p[6] * wz
                y = p[1] * wx + p[4] * wy + p[7] * wz
                if not ((t > 0.0) & (t < buf[6, r]) & (x >= x0) & (x < x1) & (y >= y0) & (y < y1)):
                    continue
                fx = min(max(x / p[17] - 0.5, 0.0), w - 1.0)
                fy = min(max(y / p[18] - 0.5, 0.0), h - 1.0)
                buf[6, r] = t
                _bilinear_texel(buf, r, texture, fx, fy)


_FASTMATH = {"nsz", "arcp", "contract", "reassoc"}  # no nnan/ninf: the shading uses inf


@numba.njit(parallel=True, cache=True, fastmath=_FASTMATH)
def _render_kernel(
    out: NDArray[np.float32], j0: int, j1: int, i0: int, i1: int,
    centres: NDArray[np.float64], power: NDArray[np.float64], r_lens: float,
    axes: NDArray[np.float64], main: NDArray[np.float64], sensor: NDArray[np.float64],
    width: int, cell_start: NDArray[np.int64], cell_lens: NDArray[np.int32], cells_x: int,
    cell: int, patterns: NDArray[np.float64], rotations: NDArray[np.float64],
    seed: np.uint64, image_id: np.uint64, white: bool, white_level: float,
    plates: NDArray[np.float64], texture: NDArray[np.float32], background: float,
) -> None:  # pragma: no cover - compiled
    """Rows j0..j1, columns i0..i1 of the image; see the module docstring for the optics.

    ``patterns`` has shape (n_patterns, 4, n): pixel offsets + ½ (two rows, in [0, 1)) and unit
    disc points (two rows); ``rotations`` (n_rot, 2) holds (cos, sin) of evenly spaced angles.
    """
    F, r_ap, z_ap = main[0], main[1], main[8]
    q1, q2, q3, p1, p2 = main[2], main[3], main[4], main[5], main[6]
    has_dist = main[7] != 0.0
    r_ap2 = r_ap * r_ap
    s, u0, v0, zs = sensor[0], sensor[1], sensor[2], sensor[3]
    e1x, e1y, e1z = axes[0, 0], axes[1, 0], axes[2, 0]
    e2x, e2y, e2z = axes[0, 1], axes[1, 1], axes[2, 1]
    nx, ny, nz = axes[0, 2], axes[1, 2], axes[2, 2]
    n_pat = np.uint64(patterns.shape[0])
    n_rot = np.uint64(rotations.shape[0])
    n_rays = patterns.shape[2]
    inv_n = 1.0 / n_rays
    nch = out.shape[2]
    single_checker = plates.shape[0] == 1 and int(plates[0, 16]) == KIND_CHECKERBOARD
    cb = plates[0] if plates.shape[0] > 0 else np.zeros(24)
    cb_ex = np.array([cb[0], cb[3], cb[6]])
    cb_ey = np.array([cb[1], cb[4], cb[7]])
    cb_n = np.array([cb[2], cb[5], cb[8]])
    cb_t = np.array([cb[9], cb[10], cb[11]])
    cb_box = np.array([cb[12], cb[13], cb[14], cb[15]])
    cb_sq = cb[17]
    cb_inv = 1.0 / cb_sq if cb_sq > 0 else 0.0
    cb_sx1 = cb_sq * cb[18]
    cb_sy1 = cb_sq * cb[19]
    cb_black, cb_white = cb[20], cb[21]
    cb_h = cb_n[0] * cb_t[0] + cb_n[1] * cb_t[1] + cb_n[2] * cb_t[2]
    focus_plane = plates.shape[0] > 0 and int(plates[0, 16]) == KIND_CHECKERBOARD
    for jj in prange(j1 - j0):
        j = j0 + jj
        cy = j // cell
        buf = np.empty((10, n_rays))
        for i in range(i0, i1):
            cidx = cy * cells_x + i // cell
            X0x = (u0 - i) * s
            X0y = (v0 - j) * s
            a0 = 0.0
            a1 = 0.0
            a2 = 0.0
            for q in range(cell_start[cidx], cell_start[cidx + 1]):
                lens = cell_lens[q]
                Cx, Cy, Cz = centres[lens, 0], centres[lens, 1], centres[lens, 2]
                phi = power[lens]
                # At the pixel centre X0: X' = (P0, h0) homogeneous (module docstring).
                dX = (Cx - X0x) * nx + (Cy - X0y) * ny + (Cz - zs) * nz
                h0 = dX * phi - 1.0
                P0x = Cx * h0 + Cx - X0x
                P0y = Cy * h0 + Cy - X0y
                P0z = Cz * h0 + Cz - zs
                # Conservative culling: the exit pupil (centre (0, 0, z_ap)) projected from X' onto
                # the lens plane (centre Q, radius rho_q) must meet the lens disc, with a margin
                # for the pixel.
                den = z_ap * h0 - P0z
                if abs(den) > 1e-12:
                    ratio = (z_ap - Cz) / den
                    Qx = P0x * ratio
                    Qy = P0y * ratio
                    rho_q = abs(P0z - Cz * h0) * r_ap / abs(den)
                    reach = (rho_q + r_lens) * 1.001 + 0.75 * s * abs(ratio) + 1e-9
                    if (Qx - Cx) ** 2 + (Qy - Cy) ** 2 > reach * reach:
                        continue
                # Affine dependence on the sample: X = X0 − s·(du, dv, 0), M = C + x·A1 + y·A2.
                hu = phi * s * nx
                hv = phi * s * ny
                Pux = Cx * hu + s
                Puy = Cy * hu
                Puz = Cz * hu
                Pvx = Cx * hv
                Pvy = Cy * hv + s
                Pvz = Cz * hv
                key = hash4(seed, image_id, np.uint64(j * width + i), np.uint64(lens))
                pat = int(key % n_pat)
                k2 = mix64(key ^ _K_SHIFT)
                k3 = mix64(k2)
                rot = int(mix64(k3) % n_rot)
                su = unit_float(k2)
                sv = unit_float(k3)
                ca = rotations[rot, 0] * r_lens
                sa = rotations[rot, 1] * r_lens
                A1x = ca * e1x + sa * e2x
                A1y = ca * e1y + sa * e2y
                A1z = ca * e1z + sa * e2z
                A2x = -sa * e1x + ca * e2x
                A2y = -sa * e1y + ca * e2y
                A2z = -sa * e1z + ca * e2z
                pu = patterns[pat, 0]
                pv = patterns[pat, 1]
                px_ = patterns[pat, 2]
                py_ = patterns[pat, 3]
                if white:
                    hits = 0.0
                    for r in range(n_rays):
                        tu = pu[r] + su
                        tv = pv[r] + sv
                        du = tu - math.floor(tu) - 0.5
                        dv = tv - math.floor(tv) - 0.5
                        x = px_[r]
                        y = py_[r]
                        h = h0 + du * hu + dv * hv
                        Px = P0x + du * Pux + dv * Pvx
                        Py = P0y + du * Puy + dv * Pvy
                        Pz = P0z + du * Puz + dv * Pvz
                        Mx = Cx + x * A1x + y * A2x
                        My = Cy + x * A1y + y * A2y
                        Mz = Cz + x * A1z + y * A2z
                        ez = Mz * h - Pz
                        t = Mz / ez
                        Lx = Mx - t * (Mx * h - Px)
                        Ly = My - t * (My * h - Py)
                        # The ray's point in the exit-pupil plane z = z_ap (L when z_ap = 0).
                        Ax = Lx + z_ap * (Mx * h - Px) / ez
                        Ay = Ly + z_ap * (My * h - Py) / ez
                        hits += 1.0 if Ax * Ax + Ay * Ay <= r_ap2 else 0.0
                    a0 += hits * white_level * inv_n
                    continue
                # Undistortion at the pixel centre (Newton) and its inverse Jacobian I: over the
                # pixel, Dist⁻¹(X') ≈ U0 + I·(X' − X'0) (X' moves by ~10 µm over a pixel). In
                # homogeneous form h·Dist⁻¹(P/h) = h·c + I·P with c = U0 − I·X'0 (c = 0, I = id
                # without distortion, which also covers h = 0, the unfocused case).
                i00 = 1.0
                i01 = 0.0
                i10 = 0.0
                i11 = 1.0
                c_x = 0.0
                c_y = 0.0
                if has_dist:
                    xq0 = P0x / h0
                    yq0 = P0y / h0
                    # Linearisation centre: where the central ray of the pixel's bundle (main-lens
                    # centre → X') meets the image of the checkerboard (focus_scale); the affine
                    # map is then exact to second order in the bundle's spread there.
                    tc = focus_scale(xq0, yq0, P0z / h0, F, cb_n, cb_h, q1, q2, q3, p1, p2) if focus_plane else 1.0
                    ux0, uy0, i00, i01, i10, i11 = undistort_newton(tc * xq0, tc * yq0, q1, q2, q3, p1, p2)
                    c_x = ux0 - (i00 * tc * xq0 + i01 * tc * yq0)
                    c_y = uy0 - (i10 * tc * xq0 + i11 * tc * yq0)
                if single_checker:
                    # One checkerboard plate (every dataset frame): one fused, branch-free loop.
                    b0 = 0.0
                    for r in range(n_rays):
                        tu = pu[r] + su
                        tv = pv[r] + sv
                        du = tu - math.floor(tu) - 0.5
                        dv = tv - math.floor(tv) - 0.5
                        x = px_[r]
                        y = py_[r]
                        h = h0 + du * hu + dv * hv
                        Px = P0x + du * Pux + dv * Pvx
                        Py = P0y + du * Puy + dv * Pvy
                        Pz = P0z + du * Puz + dv * Pvz
                        Mx = Cx + x * A1x + y * A2x
                        My = Cy + x * A1y + y * A2y
                        Mz = Cz + x * A1z + y * A2z
                        ez = Mz * h - Pz
                        t = Mz / ez
                        Lx = Mx - t * (Mx * h - Px)
                        Ly = My - t * (My * h - Py)
                        Ax = Lx + z_ap * (Mx * h - Px) / ez
                        Ay = Ly + z_ap * (My * h - Py) / ez
                        Sx, Sy, dx, dy, dz = _scene_ray(Lx, Ly, Px, Py, Pz, h, F, c_x, c_y, i00, i01, i10, i11)
                        tp = ((cb_t[0] - Sx) * cb_n[0] + (cb_t[1] - Sy) * cb_n[1] + cb_t[2] * cb_n[2]) / (
                            dx * cb_n[0] + dy * cb_n[1] + dz * cb_n[2]
                        )
                        wx = Sx + tp * dx - cb_t[0]
                        wy = Sy + tp * dy - cb_t[1]
                        wz = tp * dz - cb_t[2]
                        bx = cb_ex[0] * wx + cb_ex[1] * wy + cb_ex[2] * wz
                        by = cb_ey[0] * wx + cb_ey[1] * wy + cb_ey[2] * wz
                        # tp > 0 on the scene side: dir and −dir give the same line, the sign of
                        # tp·dz tells whether the hit is in front of the main lens.
                        front = tp * dz > 0.0
                        plate = front & (bx >= cb_box[0]) & (bx < cb_box[1]) & (by >= cb_box[2]) & (by < cb_box[3])
                        squares = (bx >= -cb_sq) & (bx < cb_sx1) & (by >= -cb_sq) & (by < cb_sy1)
                        cells = math.floor(bx * cb_inv) + math.floor(by * cb_inv)
                        odd = cells - 2.0 * math.floor(0.5 * cells)
                        v = (cb_black + (cb_white - cb_black) * odd if squares else cb_white) if plate else background
                        b0 += v if Ax * Ax + Ay * Ay <= r_ap2 else 0.0
                    a0 += b0 * inv_n
                    continue
                # Pass 1 (vectorisable): main-lens hit L, scene direction, aperture weight.
                for r in range(n_rays):
                    tu = pu[r] + su
                    tv = pv[r] + sv
                    du = tu - math.floor(tu) - 0.5
                    dv = tv - math.floor(tv) - 0.5
                    x = px_[r]
                    y = py_[r]
                    h = h0 + du * hu + dv * hv
                    Px = P0x + du * Pux + dv * Pvx
                    Py = P0y + du * Puy + dv * Pvy
                    Pz = P0z + du * Puz + dv * Pvz
                    Mx = Cx + x * A1x + y * A2x
                    My = Cy + x * A1y + y * A2y
                    Mz = Cz + x * A1z + y * A2z
                    ez = Mz * h - Pz
                    t = Mz / ez
                    Lx = Mx - t * (Mx * h - Px)
                    Ly = My - t * (My * h - Py)
                    Ax = Lx + z_ap * (Mx * h - Px) / ez
                    Ay = Ly + z_ap * (My * h - Py) / ez
                    # Oriented towards the scene (+z).
                    Sx, Sy, dx, dy, dz = _scene_ray(Lx, Ly, Px, Py, Pz, h, F, c_x, c_y, i00, i01, i10, i11)
                    sgn = 1.0 if dz >= 0.0 else -1.0
                    buf[0, r] = Sx
                    buf[1, r] = Sy
                    buf[2, r] = sgn * dx
                    buf[3, r] = sgn * dy
                    buf[4, r] = sgn * dz
                    buf[5, r] = 1.0 if Ax * Ax + Ay * Ay <= r_ap2 else 0.0
                # Pass 2: nearest plate and its radiance.
                _shade_rays(buf, n_rays, plates, texture, background)
                b0 = 0.0
                b1 = 0.0
                b2 = 0.0
                for r in range(n_rays):
                    b0 += buf[5, r] * buf[7, r]
                    b1 += buf[5, r] * buf[8, r]
                    b2 += buf[5, r] * buf[9, r]
                a0 += b0 * inv_n
                a1 += b1 * inv_n
                a2 += b2 * inv_n
            if white:
                for c in range(nch):
                    out[j, i, c] = a0
            else:
                out[j, i, 0] = a0
                if nch == 3:
                    out[j, i, 1] = a1
                    out[j, i, 2] = a2


_ROTATIONS = np.stack(
    [np.cos(2.0 * np.pi * np.arange(1024) / 1024), np.sin(2.0 * np.pi * np.arange(1024) / 1024)],
    axis=-1,
)


def render(
    camera: PlenopticCamera,
    scene: Scene | WhiteDiffuser,
    *,
    f_number: float | None = None,
    rays: int = 30,
    seed: int = 0,
    image_id: int = 0,
    roi: tuple[int, int, int, int] | None = None,
    optics: TracerOptics | None = None,
    progress: Callable[[int, int], None] | None = None,
    band_rows: int = 128,
) -> NDArray[np.float32]:
    """Render a noise-free raw image (relative radiance, 1.0 = fully lit by the white diffuser).

    Parameters
    ----------
    camera : PlenopticCamera
        The true camera.
    scene : Scene or WhiteDiffuser
        Plates (checkerboard, texture, disc light) or the diffuser of white images.
    f_number : float, optional
        Main-lens f-number N (default: the camera's); aperture radius F/(2N).
    rays : int
        Rays per pixel and per contributing micro-lens, stratified over pixel area × lens disc.
    seed, image_id : int
        The image is a deterministic function of (camera, scene, rays, seed, image_id), whatever
        the number of threads.
    roi : (u_start, v_start, u_stop, v_stop), optional
        Render only this pixel window (half-open); other pixels are 0. A window is identical to
        the same window of a full render.
    optics : TracerOptics, optional
        Pre-built :func:`build_optics` (must match ``f_number``).
    progress : callable(done_rows, total_rows), optional
        Called after each band of rows.
    band_rows : int
        Rows per kernel call (progress granularity).

    Returns
    -------
    ndarray, shape (H, W) float32 for grey scenes, (H, W, 3) for RGB textures.
    """
    if optics is None:
        optics = build_optics(camera, f_number)
    H, W = optics.height_px, optics.width_px
    i0, j0, i1, j1 = (0, 0, W, H) if roi is None else roi
    i0, j0 = max(int(i0), 0), max(int(j0), 0)
    i1, j1 = min(int(i1), W), min(int(j1), H)
    white = isinstance(scene, WhiteDiffuser)
    if white:
        plates = np.zeros((0, 24))
        texture = np.zeros((1, 1, 1), dtype=np.float32)
        channels, background, level = 1, 0.0, float(scene.level)
    else:
        assert isinstance(scene, Scene)
        plates, texture, channels = pack_scene(scene)
        background, level = float(scene.background), 0.0
    table = sample_patterns(int(rays), seed=seed, image_id=image_id)
    patterns = np.ascontiguousarray(table.transpose(0, 2, 1))
    patterns[:, 0:2] += 0.5
    out = np.zeros((H, W, channels), dtype=np.float32)
    total = max(j1 - j0, 0)
    for start in range(j0, j1, band_rows):
        stop = min(start + band_rows, j1)
        _render_kernel(
            out, start, stop, i0, i1,
            optics.lens_centres, optics.lens_power, optics.lens_radius_mm, optics.mla_axes,
            optics.main, optics.sensor, W, optics.cell_start, optics.cell_lens, optics.cells_x,
            CELL_SIZE_PX, patterns, _ROTATIONS, np.uint64(seed & _MASK64), np.uint64(image_id & _MASK64),
            white, level, plates, texture, background,
        )
        if progress is not None:
            progress(stop - j0, total)
    return out[:, :, 0] if channels == 1 else out
