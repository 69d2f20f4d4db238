"""Projections of the BAP camera model, vectorised over (point, micro-lens) pairs.

- :func:`project_bap`: camera-frame points through micro-lenses to BAP features (u, v, ρ)
  (paper eq:completemodel, eq:bapprojm; reference §4).
- :func:`project_mic`: the main-lens centre through micro-lenses to micro-image centres (the
  paper's second cost term, §5.2; reference §4 "Main-lens-centre → MIC projection").
- :func:`back_project_bap`: (u, v, ρ) through a micro-lens back to the camera-frame point.

(u, v) follow the chief ray through the micro-lens centre; ρ is the paper's blur radius
(eq:blurradius with A = λ·Δc), signed, with the lens distances of the camera's
:class:`~plenocal.model.camera.RhoForm` (reference §4.7).

**Pupil vignetting (beyond the paper, opt-in).** A pixel at offset e from its micro-image centre
receives light only through the part of the micro-lens disc whose rays pass the main-lens
aperture: in image units the intersection of the lens disc (radius R_b = |q_i|/s) with the
aperture's preimage (radius R_a = |m|/(N·s)) centred e away — the same overlap that shapes white
micro-images (disc ⊗ disc). The centroid of that lit part is off the lens centre, so a defocused
feature is seen displaced radially: the observed offset e_o solves
``e_o = e − ρ·g(e_o)/R_b`` with g the centroid offset of the lit part (:func:`pupil_shift`;
the numerics, smooth and single-valued, with their derivatives: :mod:`plenocal.model.pupil`).
At the matched f-number (R_a ≈ R_b) this reaches ~1.5 px for |ρ| ≈ 3.5 px, and ray-traced
images show it (see ``docs/detection.md``). ``project_bap(..., pupil_vignetting=True)`` adds it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.model.camera import PlenopticCamera, RhoForm
from plenocal.model.pupil import MIN_LENS_RADIUS_PX, centroid_offset, shifted_offset, unshifted_offset

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
    """Model micro-image centres: the exit-pupil centre projected through C(k, l) onto the sensor, px.

    No distortion, no thin lens: the central projection of the micro-lens centre from the centre
    of the main lens's exit pupil, (0, 0, −e) — the main-lens centre O in the paper (§5.2, MIC
    term), where e = 0. A white micro-image is the micro-lens's image of the exit pupil, so its
    centre lies on the line from the exit-pupil centre through the lens centre; with the pupil e
    behind H′ the MIC lattice is (D + d − e)/(D − e) times the MLA's, not (D + d)/D.

    Returns
    -------
    ndarray, shape (N, 2)
    """
    C = micro_lens_centres(camera, k, l)
    e = camera.main_lens.exit_pupil_mm
    scale = (camera.sensor.distance_mm - e) / (-C[..., 2] - e)
    u, v = _sensor_uv(camera, C[..., 0] * scale, C[..., 1] * scale)
    return np.stack([u, v], axis=-1)


project_mic = micro_image_centres


def central_view_px(camera: PlenopticCamera, points_cam: ArrayLike) -> FloatArray:
    """Where camera-frame points appear in the central view: their distorted virtual points
    (:func:`virtual_points`) projected from the exit-pupil centre onto the sensor, px.

    A virtual point seen at offset o from micro-image centre c_i (whose lens is at inverse virtual
    depth w = 1/υ from it) lies at X = c_i + o/γ, γ = (1 − λ) + λ·w (the disparity's factor of
    :mod:`plenocal.depth.matching`): X is this projection, the same for every micro-image that sees
    the point — the coordinates of the all-in-focus image (:mod:`plenocal.depth.render`). At
    o = 0 it is c_i itself (the micro-image centre is the exit-pupil centre's projection).

    Parameters
    ----------
    points_cam : array_like, shape (N, 3), mm, z > F

    Returns
    -------
    ndarray, shape (N, 2): (u, v) px.
    """
    pu = virtual_points(camera, points_cam)
    e = camera.main_lens.exit_pupil_mm
    scale = (camera.sensor.distance_mm - e) / (-pu[..., 2] - e)
    u, v = _sensor_uv(camera, pu[..., 0] * scale, pu[..., 1] * scale)
    return np.stack([u, v], axis=-1)


def virtual_points(camera: PlenopticCamera, points_cam: ArrayLike) -> FloatArray:
    """Images of camera-frame points through the thin main lens, distorted (eq:distortion).

    ``p' = −F/(z − F) · p`` (eq:thinlens) then Brown–Conrady on (x', y') and the depth distortion
    Δz′ = Z1·r′² + Z2·r′⁴ on z′ (:class:`~plenocal.model.camera.Distortion`).

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
    dist = camera.distortion
    xu, yu = dist.apply(x, y)
    return np.stack([xu, yu, z + dist.depth(x, y) if dist.has_depth else z], axis=-1)


def depth_in_mla(camera: PlenopticCamera, virtual: FloatArray) -> FloatArray:
    """Signed distance a of virtual points from the (tilted) MLA plane, in mm.

    ``a = z-component of R_mᵀ (p − t_m)``; negative behind the MLA (towards the sensor).
    """
    mla = camera.mla
    n = mla.rotation[:, 2]
    return (virtual - np.asarray(mla.translation_mm)) @ n


def blur_radius_mm(
    camera: PlenopticCamera, a_mm: ArrayLike, types: ArrayLike, *, d_lens_mm: ArrayLike | None = None
) -> FloatArray:
    """Signed blur radius r = (A/2)·(d_f/f − 1 − d_v/a), paper eq:blurradius with A = λ·Δc.

    (d_f, d_v) per :class:`~plenocal.model.camera.RhoForm`: (d, d) legacy, (d(k, l), d(k, l))
    HEAD, (d, d(k, l)) virtual-depth, d the MLA–sensor distance at the MLA frame origin.

    Parameters
    ----------
    a_mm : array_like
        Signed distance of the virtual point from the micro-lens plane.
    types : array_like of int
        Micro-lens type of each observation (0..I−1).
    d_lens_mm : array_like, optional
        d(k, l) of each observation's lens (:func:`lens_distances`); required unless legacy.
    """
    f = np.asarray(camera.mla.focal_lengths_mm, dtype=np.float64)[np.asarray(types)]
    d_f, d_v = rho_distances(camera, d_lens_mm)
    A = camera.micro_lens_aperture_mm
    a = np.asarray(a_mm, dtype=np.float64)
    return (A / 2.0) * (d_f / f - 1.0 - d_v / a)


def rho_distances(camera: PlenopticCamera, d_lens_mm: ArrayLike | None) -> tuple[FloatArray | float, FloatArray | float]:
    """(d_f, d_v) of :func:`blur_radius_mm` for the camera's ρ form."""
    form = camera.rho_form
    if form is RhoForm.LEGACY:
        return camera.d_mm, camera.d_mm
    if d_lens_mm is None:
        raise ValueError(f"the {form.value} ρ needs each lens' d(k, l)")
    dk = np.asarray(d_lens_mm, dtype=np.float64)
    return (dk if form is RhoForm.HEAD else camera.d_mm), dk


def lens_distances(camera: PlenopticCamera, centres_mm: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(D(k, l), d(k, l)) of lenses at camera-frame centres C (N, 3): −C_z and (D + d) − D(k, l)."""
    D = -np.asarray(centres_mm, dtype=np.float64)[..., 2]
    return D, camera.sensor.distance_mm - D


def blur_radius_px(camera: PlenopticCamera, virtual: FloatArray, centres_mm: FloatArray, types: ArrayLike) -> FloatArray:
    """ρ (px) of distorted virtual points ``virtual`` (N, 3) through lenses centred at ``centres_mm``
    (N, 3) of ``types`` (N,), in the camera's ρ form (reference §4.7).

    The depth a is the virtual point's distance from the tilted MLA plane (legacy: the MLA frame's
    z), or its camera-z difference with the lens centre z_u + D(k, l) (HEAD, virtual-depth); the
    two differ by O(tilt²).
    """
    if camera.rho_form is RhoForm.LEGACY:
        a = depth_in_mla(camera, virtual)
        return blur_radius_mm(camera, a, types) / camera.sensor.pixel_size_mm
    D, d = lens_distances(camera, centres_mm)
    a = np.asarray(virtual, dtype=np.float64)[..., 2] + D
    return blur_radius_mm(camera, a, types, d_lens_mm=d) / camera.sensor.pixel_size_mm


def disc_intersection_centroid(e: ArrayLike, r1: ArrayLike, r2: ArrayLike) -> FloatArray:
    """Offset, along the line of centres, of the centroid of disc(0, r1) ∩ disc(e, r2) (e ≥ 0).

    Two circular segments cut by the common chord at x0 = (e² + r1² − r2²)/(2e), each of area
    R²·(θ − sin θ·cos θ) for its chord half-angle θ; the centroid is e·A2/(A1 + A2). Where one
    disc holds the other, the centroid is that disc's centre. Beyond r1 + r2 (no overlap) the
    value is r1 (the limit). Computed without cancellation up to the tangency
    (:func:`plenocal.model.pupil.centroid_partials`).
    """
    return centroid_offset(e, r1, r2)


def lens_radius_gain(rho: ArrayLike, radius_lens_px: ArrayLike) -> FloatArray:
    """−ρ/R_b, the gain γ of the pupil-vignetting shift e_o = e + γ·g(e_o); 0 where
    R_b < :data:`MIN_LENS_RADIUS_PX` (the R_b → 0 limit of the shift is 0: g(e_o) ≤ R_b and g = 0
    unless e_o is within R_b of the aperture's edge). The shift uses it saturated below the fold
    of the fixed point (:func:`plenocal.model.pupil.saturated_gain`)."""
    rho = np.asarray(rho, dtype=np.float64)
    rb = np.asarray(radius_lens_px, dtype=np.float64)
    rho, rb = np.broadcast_arrays(rho, rb)
    ok = rb >= MIN_LENS_RADIUS_PX
    return np.divide(-rho, rb, out=np.zeros(rho.shape), where=ok)


def pupil_shift(
    camera: PlenopticCamera,
    uv: FloatArray,
    rho: FloatArray,
    k: ArrayLike,
    l: ArrayLike,
    *,
    f_number: float | None = None,
) -> FloatArray:
    """Observed (u, v) of chief-ray features under pupil vignetting (module docstring).

    Parameters
    ----------
    uv : (N, 2) chief-ray positions; rho : (N,) signed blur radii (px); k, l : (N,) indices.
    f_number : main-lens N (default the camera's).

    Returns
    -------
    ndarray, shape (N, 2)
    """
    from plenocal.model.white import radius_law  # white imports camera only: no cycle

    N = camera.main_lens.f_number if f_number is None else float(f_number)
    s = camera.sensor.pixel_size_mm
    m, q = radius_law(camera)
    types = camera.mla.types.type_of(k, l)
    rb = np.abs(np.asarray(q, dtype=np.float64))[types] / s
    mic = micro_image_centres(camera, k, l)
    return pupil_shift_px(uv, rho, mic, abs(m) / N / s, rb)


def pupil_shift_px(
    uv: FloatArray,
    rho: FloatArray,
    mic_uv: FloatArray,
    radius_aperture_px: float | FloatArray,
    radius_lens_px: float | FloatArray,
) -> FloatArray:
    """:func:`pupil_shift` in image terms: chief-ray positions ``uv`` (N, 2) with blur ``rho`` in
    micro-images centred at ``mic_uv``, R_a = ``radius_aperture_px``, R_b = ``radius_lens_px``.

    Each position moves radially to the root e_o of e_o = e + γ_s·g(e_o)
    (:func:`plenocal.model.pupil.shifted_offset`: smooth and single-valued in every argument)."""
    e = np.asarray(uv, dtype=np.float64) - mic_uv
    en = np.hypot(e[:, 0], e[:, 1])
    eo = shifted_offset(en, np.asarray(rho, dtype=np.float64), radius_aperture_px, radius_lens_px)
    scale = np.where(en > 1e-12, eo / np.maximum(en, 1e-12), 1.0)
    return mic_uv + e * scale[:, None]


def pupil_unshift(
    uv: FloatArray,
    rho: FloatArray,
    mic_uv: FloatArray,
    radius_aperture_px: float | FloatArray,
    radius_lens_px: float | FloatArray,
) -> FloatArray:
    """Chief-ray positions of observed (pupil-vignetted) features: the inverse of :func:`pupil_shift`.

    ``e = e_o − γ_s·g(e_o)`` is explicit in the observed offset e_o from the micro-image centre
    (:func:`plenocal.model.pupil.unshifted_offset`).

    Parameters
    ----------
    uv : (N, 2) observed positions; rho : (N,) signed blur radii (px);
    mic_uv : (N, 2) micro-image centres; radius_aperture_px : R_a = |m|/(N·s);
    radius_lens_px : (N,) R_b = |q_i|/s of each observation's type.
    """
    e = np.asarray(uv, dtype=np.float64) - mic_uv
    eo = np.hypot(e[:, 0], e[:, 1])
    en = unshifted_offset(eo, np.asarray(rho, dtype=np.float64), radius_aperture_px, radius_lens_px)
    scale = np.where(eo > 1e-12, en / np.maximum(eo, 1e-12), 1.0)
    return mic_uv + e * scale[:, None]


def project_bap(
    camera: PlenopticCamera,
    points_cam: ArrayLike,
    k: ArrayLike,
    l: ArrayLike,
    *,
    pupil_vignetting: bool = False,
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
    pupil_vignetting : bool
        Displace (u, v) by the vignetting of the micro-lens pupil by the main aperture
        (:func:`pupil_shift`; beyond the paper, off by default).

    Returns
    -------
    ndarray, shape (N, 3)
        Columns u (px), v (px), ρ (px, signed).

    Examples
    --------
    >>> from plenocal.sim.presets import preset_camera  # doctest: +SKIP
    """
    out = virtual_points_bap(camera, virtual_points(camera, points_cam), k, l)
    if pupil_vignetting and camera.n_types > 0:
        out[:, :2] = pupil_shift(camera, out[:, :2], out[:, 2], k, l)
    return out


def virtual_points_bap(camera: PlenopticCamera, virtual: ArrayLike, k: ArrayLike, l: ArrayLike) -> FloatArray:
    """BAP features (u, v, ρ) of distorted virtual points through micro-lenses (k, l), without the
    pupil-vignetting shift: :func:`project_bap` from its virtual points on (eq:bapprojm,
    eq:blurradius), for points that do not come from the thin lens (a real lens's apparent points).

    Parameters
    ----------
    virtual : array_like, shape (N, 3)
        Points in the image space, camera frame, mm.
    k, l : array_like of int, shape (N,)

    Returns
    -------
    ndarray, shape (N, 3)
        Columns u (px), v (px), ρ (px, signed; NaN with I = 0).
    """
    pu = np.asarray(virtual, dtype=np.float64)
    C = micro_lens_centres(camera, k, l)
    zs = -camera.sensor.distance_mm
    t = (zs - C[..., 2]) / (pu[..., 2] - C[..., 2])
    X = C[..., 0] + t * (pu[..., 0] - C[..., 0])
    Y = C[..., 1] + t * (pu[..., 1] - C[..., 1])
    u, v = _sensor_uv(camera, X, Y)
    if camera.n_types == 0:
        rho = np.full(u.shape, np.nan)
    else:
        rho = blur_radius_px(camera, pu, C, camera.mla.types.type_of(k, l))
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
    A = camera.micro_lens_aperture_mm
    r = feat[..., 2] * s
    D_k, d_k = lens_distances(camera, C)
    d_f, d_v = rho_distances(camera, None if camera.rho_form is RhoForm.LEGACY else d_k)
    a = -d_v / (2.0 * r / A - d_f / f + 1.0)  # r = (A/2)(d_f/f − 1 − d_v/a) solved for a
    if camera.rho_form is RhoForm.LEGACY:
        # Point on the line P -> C (and beyond) at signed depth a from the MLA plane.
        n = camera.mla.rotation[:, 2]
        t_m = np.asarray(camera.mla.translation_mm)
        depth_P = (P - t_m) @ n
        depth_C = (C - t_m) @ n
    else:
        # ... at camera z = a − D(k, l).
        depth_P, depth_C = P[..., 2] + D_k, C[..., 2] + D_k
    t = (a - depth_P) / (depth_C - depth_P)
    pu = P + t[..., None] * (C - P)
    x, y = camera.distortion.invert(pu[..., 0], pu[..., 1])
    zp = pu[..., 2] - camera.distortion.depth(x, y)
    F = camera.main_lens.focal_length_mm
    # p' = −F/(z − F)·p  <=>  p = F/(z' + F)·p'  (thin lens inverse)
    factor = F / (zp + F)
    return np.stack([x * factor, y * factor, zp * factor], axis=-1)
