"""What libpleno HEAD computes from an ``intrinsics.js``, in libpleno's own terms (reference §3, §4, §8.2, §10.2).

Every function here reads a :class:`~plenocal.io.libpleno.documents.CameraConfigDoc` (libpleno's
MLA-space lattice, poses and ``mode`` integers), not a plenocal camera, and restates what the HEAD
generation of libpleno does with it:

- the fields HEAD's ``save()`` writes beside the camera and ignores on load (reference §10.2):
  ``D`` and ``d`` of MLA-space lens (0, 0), the principal point ``pp``, ``Rxyz`` (Eigen's XYZ Euler
  angles of the MLA rotation), ``mode`` as HEAD's ``mode()`` computes it, ``focal_planes``
  (reference §8.2, with HEAD's double application of the depth ``scaling``, §15 item 4) and
  ``scaling`` itself (:func:`head_fields`);
- HEAD's blur radius of a point through a micro-lens, with each lens' own D(k, l), d(k, l) and the
  micro-image pitch ``dc`` of ``params.js`` (reference §4 step 7, HEAD; :func:`blur_radius_px`).

They are the yardstick that plenocal's exporter and its ρ forms are checked against; plenocal's
own model is in :mod:`plenocal.model`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plenocal.errors import DataError
from plenocal.io.libpleno._json import flat_json, num, vector_json
from plenocal.io.libpleno.documents import CameraConfigDoc, MeshDoc

FloatArray = NDArray[np.float64]

UNFOCUSED, KEPLERIAN, GALILEAN = 0, 1, 2
"""libpleno's ``PlenopticCamera::Mode`` integers."""

IDENTITY_SCALING = (0.0, 1.0, 0.0)
"""HEAD's default depth scaling a·z² + b·z + c (``QuadraticFunctionConfig``)."""

_SIN60 = float(np.sin(60.0 / 180.0 * np.pi))
_COS30 = float(np.cos(30.0 / 180.0 * np.pi))


# --- geometry ---------------------------------------------------------------------------
def eigen_euler_xyz(rotation: ArrayLike) -> FloatArray:
    """Eigen 3.4's ``R.eulerAngles(0, 1, 2)``: the ``Rxyz`` field HEAD saves (reference §10.2).

    R = Rx(a)·Ry(b)·Rz(c) with a in [0, π] (Graphics Gems IV, as Eigen implements it): a small
    tilt with θx < 0 comes out as (θx + π, π − θy, θz + π) modulo 2π, not as (θx, θy, θz).

    Parameters
    ----------
    rotation : array_like, shape (3, 3)

    Returns
    -------
    ndarray, shape (3,)
    """
    M = np.asarray(rotation, dtype=np.float64)
    # XYZ: i, j, k = 0, 1, 2 and "odd" = 0, so Eigen negates its Gems angles at the end.
    a = float(np.arctan2(M[1, 2], M[2, 2]))
    c2 = float(np.sqrt(M[0, 0] * M[0, 0] + M[0, 1] * M[0, 1]))
    if a > 0.0:
        a -= np.pi
        b = float(np.arctan2(-M[0, 2], -c2))
    else:
        b = float(np.arctan2(-M[0, 2], c2))
    s1, c1 = np.sin(a), np.cos(a)
    c = float(np.arctan2(s1 * M[2, 0] - c1 * M[1, 0], c1 * M[1, 1] - s1 * M[2, 1]))
    return -np.array([a, b, c])


def mesh_nodes(mesh: MeshDoc, k: ArrayLike, l: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Local positions of grid nodes (k, l) of a libpleno mesh, HEAD's ``GridMesh::node`` (reference §2.1).

    Geometry 1: x = p0·(k + ½[l even]), y = p1·l·sin60; geometry 2: x = p0·k·cos30,
    y = p1·(l − ½[k odd]); geometry 0: x = p0·k, y = p1·l.
    """
    if mesh.pitch is None:
        raise DataError("the mesh has no pitch")
    kk = np.asarray(k, dtype=np.int64)
    ll = np.asarray(l, dtype=np.int64)
    p0, p1 = mesh.pitch
    col_offset = np.where((mesh.geometry == 1) & (ll % 2 == 0), 0.5, 0.0)
    row_offset = np.where((mesh.geometry == 2) & (kk % 2 == 1), -0.5, 0.0)
    x = p0 * (kk + col_offset) * (_COS30 if mesh.geometry == 2 else 1.0)
    y = p1 * (ll + row_offset) * (_SIN60 if mesh.geometry == 1 else 1.0)
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)


def _require_mla(doc: CameraConfigDoc) -> MeshDoc:
    if doc.mla is None or doc.mla.pose is None or doc.mla.pitch is None:
        raise DataError("the camera document has no calibrated MLA (mla.mesh with pitch and pose)")
    if doc.sensor.pose is None:
        raise DataError("the camera document has no sensor pose")
    return doc.mla


def lens_centres(doc: CameraConfigDoc, k_mla: ArrayLike, l_mla: ArrayLike) -> FloatArray:
    """Camera-frame centres of MLA-space micro-lenses (k', l'): R_m·node(k', l') + t_m (reference §2.4), (N, 3)."""
    mla = _require_mla(doc)
    assert mla.pose is not None
    x, y = mesh_nodes(mla, k_mla, l_mla)
    R = np.asarray(mla.pose.rotation)
    t = np.asarray(mla.pose.translation)
    local = np.stack([x, y, np.zeros_like(x)], axis=-1)
    return local @ R.T + t


def lens_distances(doc: CameraConfigDoc, k_mla: ArrayLike, l_mla: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """HEAD's D(k', l') = |C_z| and d(k', l') = −t_sz − D(k', l') of MLA-space lenses (reference §3)."""
    D = np.abs(lens_centres(doc, k_mla, l_mla)[..., 2])
    assert doc.sensor.pose is not None  # checked by lens_centres
    return D, -doc.sensor.pose.translation[2] - D


def principal_point(doc: CameraConfigDoc) -> tuple[float, float]:
    """HEAD's ``pp()``: the main-lens centre seen on the sensor, in (u, v) (reference §3).

    (u0, v0) = (W−1 − (−t_sx)/s, H−1 − (−t_sy)/s) for an identity main-lens pose and sensor rotation.
    """
    _require_mla(doc)
    assert doc.sensor.pose is not None
    R = np.asarray(doc.sensor.pose.rotation)
    t = np.asarray(doc.sensor.pose.translation)
    o = np.zeros(3) if doc.main_lens.pose is None else np.asarray(doc.main_lens.pose.translation)
    p = R.T @ (o - t)
    s = doc.sensor.scale
    return float((doc.sensor.width - 1) - p[0] / s), float((doc.sensor.height - 1) - p[1] / s)


def head_mode(doc: CameraConfigDoc) -> int:
    """``mode`` as HEAD's ``mode()`` computes it (reference §10.2, §15 item 11).

    With micro-lens types (I > 0): unfocused (0) when d(0, 0) > f_0, else Galilean (2) — HEAD
    never reports Keplerian then, and treats a Keplerian multi-focus camera as unfocused. With
    I = 0: Keplerian (1) when F < D(0, 0), else Galilean (2).
    """
    D, d = (float(x) for x in lens_distances(doc, 0, 0))
    if doc.I > 0:
        if not doc.focal_lengths:
            raise DataError("mla.focal_lengths is empty but I > 0")
        return UNFOCUSED if d > doc.focal_lengths[0] else GALILEAN
    return KEPLERIAN if doc.main_lens.f < D else GALILEAN


def _quadratic(scaling: tuple[float, float, float], z: float) -> float:
    a, b, c = scaling
    return a * z * z + b * z + c


def focal_planes(doc: CameraConfigDoc, *, scaling: tuple[float, float, float] = IDENTITY_SCALING) -> tuple[float, ...]:
    """HEAD's ``focal_planes``: object distance (mm) each micro-lens type focuses on (reference §8.2).

    At lens (0, 0): a_i = f_i·d/(d − f_i ± 1e-24) in MLA space, object distance
    F·z/(z + F) with z = a_i − D, through the depth ``scaling`` twice, as HEAD does (reference §15
    item 4; harmless with the identity scaling plenocal writes). The depth distortion of
    ``distortions_inverse`` is taken as none (model 0, the only one plenocal writes). With I = 0,
    the plane of virtual depth max(2, (F − D)/d + 1e-6). One value per type (one when I ≤ 1).
    """
    D, d = (float(x) for x in lens_distances(doc, 0, 0))
    F = doc.main_lens.f

    def mla2obj(x: float) -> float:
        z = x - D
        return _quadratic(scaling, (F * z) / (z + F))

    if doc.I == 0:
        v = max(2.0, (F - D) / d + 1e-6)
        return (_quadratic(scaling, mla2obj(-v * d)),)
    eps = (-1.0 if F > D else 1.0) * 1e-24
    focal = tuple(doc.focal_lengths or ())[: doc.I if doc.I > 1 else 1]  # multi-focus: one per type
    return tuple(_quadratic(scaling, mla2obj((f * d) / (d - f + eps))) for f in focal)


def head_fields(doc: CameraConfigDoc, *, scaling: tuple[float, float, float] = IDENTITY_SCALING) -> dict[str, Any]:
    """The computed fields HEAD's ``save()`` writes beside a camera, as JSON values (reference §10.2).

    ``D``, ``d`` (lens (0, 0)), ``pp``, ``Rxyz``, ``focal_planes`` and ``scaling``; ``mode`` is a
    typed field of the document (:func:`head_mode`). libpleno ignores all of them on load.
    """
    mla = _require_mla(doc)
    assert mla.pose is not None
    D, d = (float(x) for x in lens_distances(doc, 0, 0))
    a, b, c = scaling
    return {
        "D": num(D),
        "d": num(d),
        "pp": vector_json(principal_point(doc)),
        "Rxyz": vector_json(eigen_euler_xyz(mla.pose.rotation)),
        "focal_planes": flat_json(focal_planes(doc, scaling=scaling)),
        "scaling": {"a": num(a), "b": num(b), "c": num(c)},
    }


# --- blur radius ------------------------------------------------------------------------
def lens_types(doc: CameraConfigDoc, k_mia: ArrayLike, l_mia: ArrayLike) -> NDArray[np.int64]:
    """Micro-lens type of MIA-space (k, l): ((l mod (I−1)) + k) mod I, k and l swapped for geometry 2 (reference §2.3)."""
    kk = np.asarray(k_mia, dtype=np.int64)
    ll = np.asarray(l_mia, dtype=np.int64)
    if doc.mla is not None and doc.mla.geometry == 2:
        kk, ll = ll, kk
    if doc.I == 0:
        return np.full(np.broadcast(kk, ll).shape, -1, dtype=np.int64)
    if doc.I == 1:
        return np.zeros(np.broadcast(kk, ll).shape, dtype=np.int64)
    return ((ll % (doc.I - 1)) + kk) % doc.I


def virtual_points(doc: CameraConfigDoc, points_cam: ArrayLike) -> FloatArray:
    """libpleno's ``project_through_main_lens``: thin lens −F/(|z| − F)·p, then the forward
    distortion (radial + tangential on x, y; no depth distortion) (reference §4 steps 3–4), (N, 3)."""
    p = np.asarray(points_cam, dtype=np.float64)
    F = doc.main_lens.f
    q = (-F / (np.abs(p[..., 2]) - F))[..., None] * p
    x, y = q[..., 0], q[..., 1]
    dist = doc.distortions
    (a0, a1, a2), (b0, b1) = (dist.radial, dist.tangential) if dist is not None else ((0.0,) * 3, (0.0,) * 2)
    r = np.sqrt(x * x + y * y)
    r2 = r * r
    radial = a0 * r2 + a1 * r2 * r2 + a2 * r2 * r2 * r2
    tx = b0 * (r2 + 2.0 * x * x) + 2.0 * b1 * x * y
    ty = b1 * (r2 + 2.0 * y * y) + 2.0 * b0 * x * y
    return np.stack([x + x * radial + tx, y + y * radial + ty, q[..., 2]], axis=-1)


def blur_radius_px(
    doc: CameraConfigDoc, dc_mm: float, points_cam: ArrayLike, k_mia: ArrayLike, l_mia: ArrayLike
) -> FloatArray:
    """libpleno HEAD's ρ (px, signed) of camera-frame points through MIA-space micro-images (k, l).

    Reference §4 step 7 (HEAD): lens (k', l') = (W−1−k, H−1−l); a = z_u + D(k', l');
    r = dc·D/(D + d)·(d/2)·(1/f − 1/a − 1/d) with D, d of that lens, f of its type and ``dc`` the
    ``params.js`` micro-image pitch; ρ = r/s.

    Parameters
    ----------
    doc : the ``intrinsics.js`` document (HEAD or legacy layout: only the camera is read).
    dc_mm : ``params.js`` ``dc``.
    points_cam : (N, 3) camera-frame points, mm.
    k_mia, l_mia : (N,) MIA-space indices.
    """
    mla = _require_mla(doc)
    if doc.I == 0:
        raise DataError("libpleno has no blur radius for a pinhole MLA (I = 0)")
    pu = virtual_points(doc, points_cam)
    kk = np.asarray(k_mia, dtype=np.int64)
    ll = np.asarray(l_mia, dtype=np.int64)
    D, d = lens_distances(doc, mla.width - 1 - kk, mla.height - 1 - ll)
    a = pu[..., 2] + D
    f = np.asarray(doc.focal_lengths, dtype=np.float64)[lens_types(doc, kk, ll)]
    r = dc_mm * (D / (D + d)) * (d / 2.0) * ((1.0 / f) - (1.0 / a) - (1.0 / d))
    return r / doc.sensor.scale
