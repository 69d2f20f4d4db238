"""libpleno's ``distortions_inverse``: a Brown–Conrady polynomial fitted to undo the forward distortion.

libpleno (HEAD) and PRISM never invert the main-lens distortion exactly: where they need the
undistorted point of a distorted image-space point q (PRISM's ray tracer, reference §11 step 4;
depth tools) they apply the same polynomial as the forward distortion (reference §4 step 4) with
other coefficients, ``distortions_inverse``. COMPOTE fits them over checkerboard points; plenocal
fits them by linear least squares so that inv(dist(p)) = p over the image-space region the
sensor sees (:func:`image_space_footprint`), as ``prism-build/invdist.py`` did for the PRISM
r12-b renders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import DataError
from plenocal.model.camera import Distortion, PlenopticCamera

FloatArray = NDArray[np.float64]

MAX_FOCUS_VIRTUAL_DEPTH = 50.0
"""Focus planes of micro-lens types beyond this |virtual depth| (f ≈ d, unfocused) are left out
of the footprint: PRISM then traces from the pixel itself (reference §11 step 3)."""


@dataclass(frozen=True)
class InverseDistortionFit:
    """A fitted ``distortions_inverse`` and how well it undoes the forward distortion.

    Attributes
    ----------
    inverse : Distortion
        The coefficients (Q1..Q3, P1, P2 of the same polynomial, reference §4 step 4).
    x_range_mm, y_range_mm : (min, max)
        The image-space region of the fit (camera-frame x, y, mm).
    n_grid : int
        Points per side of the fit grid.
    max_error_mm, rms_error_mm : float
        |inv(dist(p)) − p| over the grid.
    max_shift_mm : float
        Largest |dist(p) − p| over the grid (the size of what is being undone).
    """

    inverse: Distortion
    x_range_mm: tuple[float, float]
    y_range_mm: tuple[float, float]
    n_grid: int
    max_error_mm: float
    rms_error_mm: float
    max_shift_mm: float

    def summary(self) -> dict[str, object]:
        """JSON-ready description (the ``plenocal_distortions_inverse_fit`` key of an export)."""
        return {
            "method": "linear least squares of inv(dist(p)) = p on a grid",
            "x_range_mm": list(self.x_range_mm),
            "y_range_mm": list(self.y_range_mm),
            "grid": self.n_grid,
            "max_error_mm": self.max_error_mm,
            "rms_error_mm": self.rms_error_mm,
            "max_distortion_shift_mm": self.max_shift_mm,
        }


def _design(qx: FloatArray, qy: FloatArray) -> FloatArray:
    """Rows of the linear map c -> inv_c(q) − q (x rows then y rows), shape (2N, 5)."""
    r2 = qx * qx + qy * qy
    ax = np.stack([qx * r2, qx * r2**2, qx * r2**3, r2 + 2.0 * qx * qx, 2.0 * qx * qy], axis=1)
    ay = np.stack([qy * r2, qy * r2**2, qy * r2**3, 2.0 * qx * qy, r2 + 2.0 * qy * qy], axis=1)
    return np.vstack([ax, ay])


def fit_inverse_distortion(
    distortion: Distortion,
    *,
    x_range_mm: tuple[float, float],
    y_range_mm: tuple[float, float],
    n_grid: int = 400,
) -> InverseDistortionFit:
    """Least-squares ``distortions_inverse`` of a forward distortion over a rectangle.

    On an ``n_grid`` × ``n_grid`` grid of undistorted points p, q = dist(p); the coefficients c
    minimise Σ|inv_c(q) − p|², which is linear in c (columns scaled to unit norm for conditioning).

    Parameters
    ----------
    distortion : Distortion
        The forward distortion (paper eq:distortion, reference §4 step 4).
    x_range_mm, y_range_mm : (min, max)
        The rectangle of undistorted image-space points, camera-frame mm.
    n_grid : int
        Points per side (default 400, as ``invdist.py``).

    Returns
    -------
    InverseDistortionFit
    """
    if n_grid < 3:
        raise DataError(f"the inverse-distortion grid needs at least 3 points per side, got {n_grid}")
    (x0, x1), (y0, y1) = x_range_mm, y_range_mm
    if not (np.isfinite([x0, x1, y0, y1]).all() and x1 > x0 and y1 > y0):
        raise DataError(f"the inverse-distortion region must be a non-empty rectangle, got x {x_range_mm}, y {y_range_mm}")
    xs, ys = np.meshgrid(np.linspace(x0, x1, n_grid), np.linspace(y0, y1, n_grid))
    px, py = xs.ravel(), ys.ravel()
    qx, qy = distortion.apply(px, py)
    A = _design(qx, qy)
    b = np.concatenate([px - qx, py - qy])
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0.0] = 1.0
    c, *_ = np.linalg.lstsq(A / norms, b, rcond=None)
    inverse = Distortion(*(float(x) for x in c / norms))
    ex, ey = inverse.apply(qx, qy)
    err = np.hypot(ex - px, ey - py)
    return InverseDistortionFit(
        inverse=inverse,
        x_range_mm=(float(x0), float(x1)),
        y_range_mm=(float(y0), float(y1)),
        n_grid=int(n_grid),
        max_error_mm=float(err.max()),
        rms_error_mm=float(np.sqrt(np.mean(err * err))),
        max_shift_mm=float(np.hypot(qx - px, qy - py).max()),
    )


def focus_plane_depths(camera: PlenopticCamera) -> tuple[float, ...]:
    """Signed distances a_i = f_i·d/(d − f_i) of the micro-lens types' focus planes from the MLA
    (reference §11 step 3; negative behind the MLA), leaving out near-unfocused types."""
    d = camera.d_mm
    out = []
    for f in camera.mla.focal_lengths_mm:
        if f != d and abs(f / (f - d)) <= MAX_FOCUS_VIRTUAL_DEPTH:
            out.append(f * d / (d - f))
    return tuple(out)


def error_on_sensor_px(camera: PlenopticCamera, error_mm: float) -> float:
    """About how far (px) an error of the inverse at PRISM's p' moves what a pixel sees.

    p' lies where the pixel's chief ray through its micro-lens meets the type's focus plane, at
    depth a from the MLA: a lateral error δ there is δ·d/|a| on the sensor, the largest over the
    types. PRISM starts the rays at the pixel itself (δ on the sensor) when libpleno HEAD takes the
    camera for unfocused: no micro-lens types, or d > f_0 (every Keplerian multi-focus camera,
    reference §11 step 3, §15 item 11).
    """
    d = camera.d_mm
    focal = camera.mla.focal_lengths_mm
    depths = focus_plane_depths(camera) if focal and d <= focal[0] else ()
    return float(error_mm * max([d / abs(a) for a in depths] or [1.0]) / camera.sensor.pixel_size_mm)


def image_space_footprint(
    camera: PlenopticCamera, *, depths_mm: tuple[float, ...] | None = None
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The image-space rectangle (camera x, y, mm) the sensor sees at some depths behind the MLA.

    A point at signed depth a from the MLA (virtual depth υ = −a/d) seen in a micro-image lies at
    C·(D − a)/D + υ·(P − c): the MLA centrally projected from O onto its plane, plus υ times the
    pixel's offset from the micro-image centre (at most Δc/2). The rectangle is therefore the
    sensor's (pixel edges) scaled by (D − a)/(D + d) and grown by |υ|·Δc/2, over the sensor itself
    (a = −d) and ``depths_mm``.

    Parameters
    ----------
    camera : PlenopticCamera
    depths_mm : tuple of float, optional
        Signed depths a from the MLA (default: the types' focus planes, :func:`focus_plane_depths`,
        where PRISM applies ``distortions_inverse``).

    Returns
    -------
    x_range_mm, y_range_mm : (min, max)
    """
    sensor = camera.sensor
    s, (u0, v0) = sensor.pixel_size_mm, sensor.principal_point_px
    # Sensor point (X, Y) is at pixel (u0 − X/s, v0 − Y/s): pixel edges −½ .. W−½.
    xs = np.array([(u0 - (sensor.width_px - 0.5)) * s, (u0 + 0.5) * s])
    ys = np.array([(v0 - (sensor.height_px - 0.5)) * s, (v0 + 0.5) * s])
    D, d = camera.D_mm, camera.d_mm
    half = camera.micro_image_pitch_mm / 2.0
    depths = (-d, *(focus_plane_depths(camera) if depths_mm is None else depths_mm))
    lo_x = lo_y = np.inf
    hi_x = hi_y = -np.inf
    for a in depths:
        scale = (D - a) / (D + d)
        grow = abs(a / d) * half
        lo_x, hi_x = min(lo_x, xs.min() * scale - grow), max(hi_x, xs.max() * scale + grow)
        lo_y, hi_y = min(lo_y, ys.min() * scale - grow), max(hi_y, ys.max() * scale + grow)
    return (float(lo_x), float(hi_x)), (float(lo_y), float(hi_y))


def fit_camera_inverse_distortion(
    camera: PlenopticCamera, *, depths_mm: tuple[float, ...] | None = None, n_grid: int = 400
) -> InverseDistortionFit:
    """:func:`fit_inverse_distortion` of a camera's distortion over its :func:`image_space_footprint`."""
    x_range, y_range = image_space_footprint(camera, depths_mm=depths_mm)
    return fit_inverse_distortion(camera.distortion, x_range_mm=x_range, y_range_mm=y_range, n_grid=n_grid)
