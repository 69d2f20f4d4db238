"""Projections of the BAP camera model, vectorised over (point, micro-lens) pairs.

- :func:`project_bap`: camera-frame points through micro-lenses to BAP features (u, v, ρ)
  (paper eq:completemodel, eq:bapprojm; reference §4).
- :func:`project_mic`: the main-lens centre through micro-lenses to micro-image centres (the
  paper's second cost term, §5.2; reference §4 "Main-lens-centre → MIC projection").
- :func:`back_project_bap`: (u, v, ρ) through a micro-lens back to the camera-frame point.

(u, v) follow the chief ray through the micro-lens centre; ρ is the paper's blur radius
(eq:blurradius with A = λ·Δc, the "legacy" form of reference §4.7), signed.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.model.camera import PlenopticCamera

FloatArray = NDArray[np.float64]


def micro_lens_centres(camera: PlenopticCamera, k: ArrayLike, l: ArrayLike) -> FloatArray:
    """Centres C(k, l) of micro-lenses in the camera frame, in mm.

    ``C = t_m + R_m · (c − g(k, l), 0)`` (``docs/conventions.md``).

    Parameters
    ----------
    k, l : array_like of int, shape (N,)

    Returns
    -------
    ndarray, shape (N, 3)
    """
    mla = camera.mla
    gx, gy = mla.lattice.positions(k, l, mla.pitch_mm)
    cx, cy = mla.corner
    local = np.stack([cx - gx, cy - gy, np.zeros_like(gx)], axis=-1)
    return local @ mla.rotation.T + np.asarray(mla.translation_mm)


def _sensor_uv(camera: PlenopticCamera, X: FloatArray, Y: FloatArray) -> tuple[FloatArray, FloatArray]:
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    return u0 - X / s, v0 - Y / s


def micro_image_centres(camera: PlenopticCamera, k: ArrayLike, l: ArrayLike) -> FloatArray:
    """Model micro-image centres: O projected through C(k, l) onto the sensor, in px.

    No distortion, no thin lens: the central projection of the micro-lens centre from the
    main-lens centre O (paper §5.2, MIC term).

    Returns
    -------
    ndarray, shape (N, 2)
    """
    C = micro_lens_centres(camera, k, l)
    scale = -camera.sensor.distance_mm / C[..., 2]
    u, v = _sensor_uv(camera, C[..., 0] * scale, C[..., 1] * scale)
    return np.stack([u, v], axis=-1)


project_mic = micro_image_centres


def virtual_points(camera: PlenopticCamera, points_cam: ArrayLike) -> FloatArray:
    """Images of camera-frame points through the thin main lens, distorted (eq:distortion).

    ``p' = −F/(z − F) · p`` (eq:thinlens) then Brown–Conrady on (x', y').

    Parameters
    ----------
    points_cam : array_like, shape (N, 3), mm, z > F

    Returns
    -------
    ndarray, shape (N, 3)
    """
    p = np.asarray(points_cam, dtype=np.float64)
    F = camera.main_lens.focal_length_mm
    factor = -F / (p[..., 2] - F)
    x, y, z = p[..., 0] * factor, p[..., 1] * factor, p[..., 2] * factor
    xu, yu = camera.distortion.apply(x, y)
    return np.stack([xu, yu, z], axis=-1)


def depth_in_mla(camera: PlenopticCamera, virtual: FloatArray) -> FloatArray:
    """Signed distance a of virtual points from the (tilted) MLA plane, in mm.

    ``a = z-component of R_mᵀ (p − t_m)``; negative behind the MLA (towards the sensor).
    """
    mla = camera.mla
    n = mla.rotation[:, 2]
    return (virtual - np.asarray(mla.translation_mm)) @ n


def blur_radius_mm(camera: PlenopticCamera, a_mm: ArrayLike, types: ArrayLike) -> FloatArray:
    """Signed blur radius r = A·(d/2)·(1/f − 1/a − 1/d), paper eq:blurradius, with A = λ·Δc.

    Parameters
    ----------
    a_mm : array_like
        Signed distance of the virtual point from the MLA plane.
    types : array_like of int
        Micro-lens type of each observation (0..I−1).
    """
    f = np.asarray(camera.mla.focal_lengths_mm, dtype=np.float64)[np.asarray(types)]
    d = camera.d_mm
    A = camera.micro_lens_aperture_mm
    a = np.asarray(a_mm, dtype=np.float64)
    return A * (d / 2.0) * (1.0 / f - 1.0 / a - 1.0 / d)


def project_bap(
    camera: PlenopticCamera, points_cam: ArrayLike, k: ArrayLike, l: ArrayLike
) -> FloatArray:
    """BAP features (u, v, ρ) of camera-frame points through micro-lenses (k, l).

    Paper eq:completemodel / eq:bapprojm. (u, v): the line from the micro-lens centre C(k, l)
    through the distorted virtual point p_u, intersected with the sensor plane. ρ = r/s from
    eq:blurradius with the micro-lens type of (k, l). With I = 0 (pinhole micro-lenses) ρ is NaN.

    Parameters
    ----------
    points_cam : array_like, shape (N, 3)
        Points in the camera frame, mm, z > F.
    k, l : array_like of int, shape (N,)
        Micro-lens indices.

    Returns
    -------
    ndarray, shape (N, 3)
        Columns u (px), v (px), ρ (px, signed).

    Examples
    --------
    >>> from plenocal.sim.presets import preset_camera  # doctest: +SKIP
    """
    pu = virtual_points(camera, points_cam)
    C = micro_lens_centres(camera, k, l)
    zs = -camera.sensor.distance_mm
    t = (zs - C[..., 2]) / (pu[..., 2] - C[..., 2])
    X = C[..., 0] + t * (pu[..., 0] - C[..., 0])
    Y = C[..., 1] + t * (pu[..., 1] - C[..., 1])
    u, v = _sensor_uv(camera, X, Y)
    if camera.n_types == 0:
        rho = np.full(u.shape, np.nan)
    else:
        types = camera.mla.types.type_of(k, l)
        a = depth_in_mla(camera, pu)
        rho = blur_radius_mm(camera, a, types) / camera.sensor.pixel_size_mm
    return np.stack([u, v, rho], axis=-1)


def back_project_bap(
    camera: PlenopticCamera, features: ArrayLike, k: ArrayLike, l: ArrayLike
) -> FloatArray:
    """Camera-frame points from BAP features through micro-lenses (inverse of project_bap).

    ρ gives the depth a of the virtual point from the MLA plane (eq:blurradius solved for a);
    the virtual point lies on the chief ray from the sensor point through C(k, l) at that depth;
    distortion is inverted; the thin main lens maps it back to object space.

    Parameters
    ----------
    features : array_like, shape (N, 3)
        (u, v, ρ).
    k, l : array_like of int, shape (N,)

    Returns
    -------
    ndarray, shape (N, 3)
    """
    feat = np.asarray(features, dtype=np.float64)
    s = camera.sensor.pixel_size_mm
    u0, v0 = camera.sensor.principal_point_px
    X = (u0 - feat[..., 0]) * s
    Y = (v0 - feat[..., 1]) * s
    P = np.stack([X, Y, np.full_like(X, -camera.sensor.distance_mm)], axis=-1)
    C = micro_lens_centres(camera, k, l)
    types = camera.mla.types.type_of(k, l)
    f = np.asarray(camera.mla.focal_lengths_mm)[types]
    d = camera.d_mm
    A = camera.micro_lens_aperture_mm
    r = feat[..., 2] * s
    inv_a = 1.0 / f - 1.0 / d - 2.0 * r / (A * d)
    a = 1.0 / inv_a
    # Point on the line P -> C (and beyond) at signed depth a from the MLA plane.
    n = camera.mla.rotation[:, 2]
    t_m = np.asarray(camera.mla.translation_mm)
    depth_P = (P - t_m) @ n
    depth_C = (C - t_m) @ n
    t = (a - depth_P) / (depth_C - depth_P)
    pu = P + t[..., None] * (C - P)
    x, y = camera.distortion.invert(pu[..., 0], pu[..., 1])
    zp = pu[..., 2]
    F = camera.main_lens.focal_length_mm
    # p' = −F/(z − F)·p  <=>  p = F/(z' + F)·p'  (thin lens inverse)
    factor = F / (zp + F)
    return np.stack([x * factor, y * factor, zp * factor], axis=-1)
