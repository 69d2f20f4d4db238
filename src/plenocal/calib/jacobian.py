"""Exact derivatives of the calibration residuals (paper §5.2), by the chain rule.

The prediction of a BAP feature (paper eq:completemodel; reference §4) is a chain of small maps,
each differentiated here for all rows at once:

=====================  =====================================================  =================
link                   map                                                    parameters
=====================  =====================================================  =================
pose                   p_c = R(r)·p_w + t (``cam_from_world``, rotation vector)  r, t per frame
thin main lens         p' = −F/(z_c − F)·p_c (eq:thinlens)                     F
distortion             p_u = (x_u, y_u, z') (eq:distortion, Brown–Conrady)     Q1..Q3, P1, P2
micro-lens centre      C = t_m + R_m·(p0·a_x, p1·a_y, 0), t_m = (t_x, t_y, −D)   θ, t_x, t_y, D, pitch
chief ray              line C → p_u meets the sensor z = −(D + d); u = u0 − X/s  u0, v0, D, d
blur radius            ρ = A/(2s)·(d_f/f_i − 1 − d_v/a),                        D, d, f_i, e
                       A = Δc·(D − e)/(D + d − e)
                       (eq:blurradius, :class:`~plenocal.model.camera.RhoForm`)
=====================  =====================================================  =================

The micro-image-centre (MIC) term projects C from the exit-pupil centre (0, 0, −e) onto the sensor
(paper §5.2 with e = 0, the main-lens centre O; reference §4 "Main-lens-centre → MIC
projection"): u = u0 + C_x·(D + d − e)/((C_z + e)·s).

The per-point links (pose, thin lens, distortion: a few hundred (frame, node) points) are numpy
functions here; the per-row links (lens centre, chief ray, blur radius: 10⁴–10⁵ rows) run in the
numba kernels of :mod:`plenocal.calib._jacobian_kernels`, which take each row's derivatives with
respect to a few intermediate quantities — p_u, C, the sensor distance S = D + d at fixed C, the
aperture A, and for ρ the reference distance d, f_i and (legacy form) the MLA origin t_m and normal
n — and combine them with those quantities' derivatives with respect to each parameter. Each BAP
row depends on its own frame's pose only: its 6 pose columns are stored per row
(:class:`~plenocal.calib.residuals.JacobianBlocks`). The kernels write any contiguous range of rows
with a weight per row, so the solver can form the normal equations frame by frame without the
whole Jacobian in memory (:func:`plenocal.calib.solver.analytic_normal_equations`).

The Jacobian is taken of e = observed − predicted with respect to the solver's scaled variables
z = x/scale (:class:`~plenocal.calib.parameters.ParameterLayout`). The opt-in pupil-vignetting shift
(``Residuals(pupil_vignetting=True)``) is not differentiated here: that option keeps the
finite-difference Jacobian (:meth:`plenocal.calib.residuals.Residuals.jacobian`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.calib import _jacobian_kernels as kernels
from plenocal.model.camera import Distortion, PlenopticCamera, RhoForm, lattice_corner
from plenocal.model.geometry import rodrigues

FloatArray = NDArray[np.float64]

SERIES_BELOW_RAD = 1e-2
"""Below this rotation angle J_l(r) uses its Taylor series (the closed form cancels)."""


# --- links of the chain ------------------------------------------------------------------------
def skew(v: FloatArray) -> FloatArray:
    """Cross-product matrices [v]×, shape (n, 3) -> (n, 3, 3)."""
    out = np.zeros((*v.shape[:-1], 3, 3))
    out[..., 0, 1], out[..., 0, 2] = -v[..., 2], v[..., 1]
    out[..., 1, 0], out[..., 1, 2] = v[..., 2], -v[..., 0]
    out[..., 2, 0], out[..., 2, 1] = -v[..., 1], v[..., 0]
    return out


def rotation_vector_jacobian(rotvecs: FloatArray) -> FloatArray:
    """Left Jacobian J_l(r) of SO(3): R(r + δ) ≈ exp([J_l(r)·δ]×)·R(r).

    J_l = I + (1 − cos θ)/θ²·[r]× + (θ − sin θ)/θ³·[r]×², θ = |r|; Taylor series below
    :data:`SERIES_BELOW_RAD`.

    Parameters
    ----------
    rotvecs : ndarray, shape (n, 3), rad

    Returns
    -------
    ndarray, shape (n, 3, 3)
    """
    theta = np.linalg.norm(rotvecs, axis=1)
    small = theta < SERIES_BELOW_RAD
    th = np.where(small, 1.0, theta)
    t2 = theta * theta
    a = np.where(small, 0.5 - t2 / 24.0 + t2 * t2 / 720.0, 2.0 * np.sin(0.5 * th) ** 2 / (th * th))
    b = np.where(small, 1.0 / 6.0 - t2 / 120.0 + t2 * t2 / 5040.0, (th - np.sin(th)) / th**3)
    W = skew(rotvecs)
    return np.eye(3) + a[:, None, None] * W + b[:, None, None] * (W @ W)


def rotated_point_derivative(rotated: FloatArray, rotvecs: FloatArray) -> FloatArray:
    """∂(R(r)·p)/∂r = −[R(r)·p]×·J_l(r) for rotated points R(r)·p, each (n, 3); shape (n, 3, 3)."""
    return -skew(rotated) @ rotation_vector_jacobian(rotvecs)


def thin_lens_partials(points_cam: FloatArray, F: float) -> tuple[FloatArray, FloatArray, FloatArray]:
    """p' = κ·p_c with κ = −F/(z − F) (eq:thinlens), and its derivatives.

    Parameters
    ----------
    points_cam : ndarray, shape (n, 3), mm
    F : float
        Main-lens focal length, mm.

    Returns
    -------
    virtual : ndarray, shape (n, 3)
    d_point : ndarray, shape (n, 3, 3)
        ∂p'/∂p_c = κ·I + p_c ⊗ e_z·∂κ/∂z, ∂κ/∂z = F/(z − F)².
    d_F : ndarray, shape (n, 3)
        ∂p'/∂F = p_c·∂κ/∂F, ∂κ/∂F = −z/(z − F)².
    """
    z = points_cam[:, 2]
    w = 1.0 / (z - F)
    kappa = -F * w
    d_point = kappa[:, None, None] * np.eye(3)
    d_point[:, :, 2] += points_cam * (F * w * w)[:, None]
    return points_cam * kappa[:, None], d_point, points_cam * (-z * w * w)[:, None]


def distortion_partials(distortion: Distortion, x: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Derivatives of Brown–Conrady (x_u, y_u) (eq:distortion) at virtual-space (x, y), mm.

    Returns
    -------
    d_xy : ndarray, shape (n, 2, 2)
        ∂(x_u, y_u)/∂(x, y).
    d_coef : ndarray, shape (n, 2, 5)
        ∂(x_u, y_u)/∂(Q1, Q2, Q3, P1, P2).
    """
    q1, q2, q3, p1, p2 = distortion.q1, distortion.q2, distortion.q3, distortion.p1, distortion.p2
    r2 = x * x + y * y
    radial = q1 * r2 + q2 * r2 * r2 + q3 * r2 * r2 * r2
    d_radial = q1 + 2.0 * q2 * r2 + 3.0 * q3 * r2 * r2  # ∂radial/∂r²
    xy = x * y
    d_xy = np.empty((*x.shape, 2, 2))
    d_xy[:, 0, 0] = 1.0 + radial + 2.0 * x * x * d_radial + 6.0 * p1 * x + 2.0 * p2 * y
    d_xy[:, 0, 1] = 2.0 * xy * d_radial + 2.0 * p1 * y + 2.0 * p2 * x
    d_xy[:, 1, 0] = 2.0 * xy * d_radial + 2.0 * p2 * x + 2.0 * p1 * y
    d_xy[:, 1, 1] = 1.0 + radial + 2.0 * y * y * d_radial + 6.0 * p2 * y + 2.0 * p1 * x
    r4 = r2 * r2
    d_coef = np.empty((*x.shape, 2, 5))
    d_coef[:, 0, :] = np.stack([x * r2, x * r4, x * r4 * r2, r2 + 2.0 * x * x, 2.0 * xy], axis=-1)
    d_coef[:, 1, :] = np.stack([y * r2, y * r4, y * r4 * r2, 2.0 * xy, r2 + 2.0 * y * y], axis=-1)
    return d_xy, d_coef


@dataclass(frozen=True)
class VirtualPointPartials:
    """Distorted virtual points p_u of the (frame, node) points and their derivatives.

    Attributes
    ----------
    points : ndarray, shape (n, 3)
    d_params : ndarray, shape (n, 3, 12)
        ∂p_u/∂(F, Q1, Q2, Q3, P1, P2, r_x, r_y, r_z, t_x, t_y, t_z) (own frame's pose).
    """

    points: FloatArray
    d_params: FloatArray


def virtual_point_partials(
    camera: PlenopticCamera, rotvecs: FloatArray, translations: FloatArray, points_world: FloatArray,
    point_frame: NDArray[np.int64],
) -> VirtualPointPartials:
    """p_u = distortion(thin lens(R·p_w + t)) (eq:thinlens, eq:distortion) with its derivatives.

    Parameters
    ----------
    rotvecs, translations : ndarray, shape (n_frames, 3)
        ``cam_from_world`` of each frame.
    points_world : ndarray, shape (n, 3)
        Board nodes, world frame, mm.
    point_frame : ndarray of int, shape (n,)
        Frame (index into the pose arrays) of each point.
    """
    R = rodrigues(rotvecs) if len(rotvecs) else np.zeros((0, 3, 3))
    rotated = np.einsum("nij,nj->ni", R[point_frame], points_world)
    pc = rotated + translations[point_frame]
    d_pc_pose = np.concatenate(
        [rotated_point_derivative(rotated, rotvecs[point_frame]), np.broadcast_to(np.eye(3), (*rotated.shape, 3))],
        axis=2,
    )
    virt, d_lens_pc, d_lens_F = thin_lens_partials(pc, camera.main_lens.focal_length_mm)
    x, y = virt[:, 0], virt[:, 1]
    xu, yu = camera.distortion.apply(x, y)
    d_xy, d_coef = distortion_partials(camera.distortion, x, y)
    # ∂p_u/∂p' : distortion on (x', y'), z' unchanged.
    d_pu_pv = np.zeros((x.size, 3, 3))
    d_pu_pv[:, :2, :2] = d_xy
    d_pu_pv[:, 2, 2] = 1.0
    d = np.empty((x.size, 3, 12))
    d[:, :, 0] = np.einsum("nij,nj->ni", d_pu_pv, d_lens_F)
    d[:, :2, 1:6] = d_coef
    d[:, 2, 1:6] = 0.0
    d[:, :, 6:] = d_pu_pv @ d_lens_pc @ d_pc_pose
    return VirtualPointPartials(np.stack([xu, yu, virt[:, 2]], axis=-1), d)


def euler_xyz_derivatives(angles_rad: Sequence[float]) -> FloatArray:
    """∂R/∂θ_x, ∂R/∂θ_y, ∂R/∂θ_z of R = Rx(θx)·Ry(θy)·Rz(θz), shape (3, 3, 3)."""
    ax, ay, az = (float(a) for a in angles_rad)
    cx, sx, cy, sy, cz, sz = np.cos(ax), np.sin(ax), np.cos(ay), np.sin(ay), np.cos(az), np.sin(az)
    Rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    Ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    Rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    dRx = np.array([[0, 0, 0], [0, -sx, -cx], [0, cx, -sx]])
    dRy = np.array([[-sy, 0, cy], [0, 0, 0], [-cy, 0, -sy]])
    dRz = np.array([[-sz, -cz, 0], [cz, -sz, 0], [0, 0, 0]])
    return np.stack([dRx @ Ry @ Rz, Rx @ dRy @ Rz, Rx @ Ry @ dRz])


def lens_offsets(camera: PlenopticCamera, unit_gx: FloatArray, unit_gy: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(a_x, a_y) = c_unit − g_unit: lens offsets from the lattice corner in pitch units, each (n,).

    C = t_m + R_m·(p0·a_x, p1·a_y, 0) (:func:`~plenocal.model.camera.lattice_corner` is linear in the
    pitch, so a does not depend on it).
    """
    cxu, cyu = lattice_corner(camera.mla.lattice, (1.0, 1.0))
    return cxu - unit_gx, cyu - unit_gy



# --- rows: numba kernels (plenocal.calib._jacobian_kernels) --------------------------------------
_KINDS: dict[str, tuple[int, ...]] = {
    "F_mm": (0,), "q1": (1,), "q2": (2,), "q3": (3,), "p1": (4,), "p2": (5,), "u0_px": (6,), "v0_px": (7,),
    "d_mm": (8,), "theta_x_rad": (9,), "theta_y_rad": (10,), "theta_z_rad": (11,), "tx_mm": (12,), "ty_mm": (13,),
    "D_mm": (14,), "pitch0_mm": (15,), "pitch1_mm": (16,), "pitch_mm": (15, 16),
    "exit_pupil_mm": (kernels.KIND_EXIT_PUPIL,),
}
_RHO_FORM_CODES = {RhoForm.LEGACY: kernels.RHO_LEGACY, RhoForm.HEAD: kernels.RHO_HEAD,
                   RhoForm.VIRTUAL_DEPTH: kernels.RHO_VIRTUAL_DEPTH}


@dataclass(frozen=True)
class ColumnMap:
    """How the kernels fill the Jacobian's intrinsic columns (``_jacobian_kernels`` kind table).

    Attributes
    ----------
    kind_a, kind_b : ndarray of int, shape (n_columns,)
        The kind(s) whose derivatives a column sums (``kind_b`` −1: one kind only).
    factor : ndarray, shape (n_columns,)
        −scale of the column's parameter (e = observed − predicted, z = x/scale).
    """

    kind_a: NDArray[np.int64]
    kind_b: NDArray[np.int64]
    factor: FloatArray

    @classmethod
    def of(cls, names: Sequence[str], scales: FloatArray) -> ColumnMap:
        """The map of intrinsic ``names`` (``f<i>_mm`` for the micro-lens focal lengths)."""
        kinds = [_KINDS[n] if n in _KINDS else (kernels.N_BASE_KINDS + int(n[1:-3]) - 1,) for n in names]
        a = np.array([k[0] for k in kinds], dtype=np.int64)
        b = np.array([k[1] if len(k) > 1 else -1 for k in kinds], dtype=np.int64)
        return cls(a, b, -np.asarray(scales, dtype=np.float64))

    def subset(self, columns: NDArray[np.int64]) -> ColumnMap:
        """The map of some of the columns, in the order given."""
        return ColumnMap(self.kind_a[columns], self.kind_b[columns], self.factor[columns])


@dataclass(frozen=True)
class CameraState:
    """The camera quantities the row kernels use, as plain numbers and arrays.

    Attributes
    ----------
    R, dR : ndarray, shapes (3, 3) and (3, 3, 3)
        MLA rotation R_m and ∂R_m/∂(θx, θy, θz).
    origin : ndarray, shape (3,)
        MLA origin t_m = (t_x, t_y, −D).
    pitch : ndarray, shape (2,)
        (p0, p1), mm.
    S, s : float
        Main lens–sensor distance D + d and pixel size, mm.
    e : float
        The exit pupil's distance behind the main lens (:class:`~plenocal.model.camera.MainLens`).
    aperture, dA_dS, dA_dD, dA_de : float
        A = λ·Δc = Δc·(D − e)/(S − e) (eq:mlinterdist) and its partial derivatives at fixed D, S, e.
    d_ref : float
        d, the MLA–sensor distance at the MLA frame origin.
    focal : ndarray, shape (I,)
    rho_form : int
        ``_jacobian_kernels.RHO_*`` code.
    """

    R: FloatArray
    dR: FloatArray
    origin: FloatArray
    pitch: FloatArray
    S: float
    s: float
    e: float
    aperture: float
    dA_dS: float
    dA_dD: float
    dA_de: float
    d_ref: float
    focal: FloatArray
    rho_form: int

    @classmethod
    def of(cls, camera: PlenopticCamera) -> CameraState:
        mla = camera.mla
        S = camera.sensor.distance_mm
        e = camera.main_lens.exit_pupil_mm
        dc = camera.micro_image_pitch_mm
        Se = S - e
        return cls(mla.rotation, euler_xyz_derivatives(mla.rotation_xyz_rad), np.asarray(mla.translation_mm),
                   np.asarray(mla.pitch_mm), S, camera.sensor.pixel_size_mm, e, camera.micro_lens_aperture_mm,
                   -dc * (camera.D_mm - e) / (Se * Se), dc / Se, -dc * camera.d_mm / (Se * Se), camera.d_mm,
                   np.asarray(camera.mla.focal_lengths_mm, dtype=np.float64), _RHO_FORM_CODES[camera.rho_form])


@dataclass(frozen=True)
class BapRows:
    """What the kernels need to know of each BAP row (all shape (N,), rows sorted by frame).

    Attributes
    ----------
    point_of_row : ndarray of int
        The row's (frame, node) point.
    frame_index : ndarray of int
        The row's frame (index into the pose arrays).
    ax, ay : ndarray
        :func:`lens_offsets` of the row's lens.
    types : ndarray of int
        The row's micro-lens type (−1 for I = 0).
    """

    point_of_row: NDArray[np.int64]
    frame_index: NDArray[np.int64]
    ax: FloatArray
    ay: FloatArray
    types: NDArray[np.int64]


def bap_jacobian(
    cam: CameraState,
    vp: VirtualPointPartials,
    rows: BapRows,
    n_terms: int,
    columns: ColumnMap,
    pose_scale: FloatArray,
    out_int: FloatArray,
    out_pose: FloatArray,
    *,
    start: int = 0,
    stop: int | None = None,
    row_weight: FloatArray | None = None,
) -> None:
    """Jacobian of the BAP rows ``start..stop`` (u, v[, ρ]) of eq:completemodel.

    (u, v): the chief ray from C through p_u meets the sensor at −S, S = D + d; ρ: eq:blurradius
    with A = λ·Δc = Δc·D/S and the camera's ρ form (d_f, d_v, a of
    :func:`plenocal.model.projection.blur_radius_px`).

    Parameters
    ----------
    cam : CameraState
    vp : VirtualPointPartials
        The virtual points and their derivatives (:func:`virtual_point_partials`).
    rows : BapRows
    n_terms : int
        2 (u, v) or 3 (u, v, ρ).
    columns : ColumnMap
    pose_scale : ndarray, shape (n_frames, 6)
        Factor of each pose column (−scale, 0 where frozen).
    out_int : ndarray, shape (n_terms·(stop − start), n_columns)
        Intrinsic columns; term t of row i is written to row t·(stop − start) + i − start.
    out_pose : ndarray, shape (n_terms·(stop − start), 6)
        The same rows' derivatives with respect to their own frame's pose.
    row_weight : ndarray, shape (n_terms·(stop − start),), optional
        Factor of each output row (e.g. √w for the normal equations); default 1.
    """
    stop = rows.point_of_row.size if stop is None else stop
    n_out = n_terms * (stop - start)
    kernels.bap_jacobian_kernel(
        vp.points, vp.d_params, rows.point_of_row, rows.frame_index, rows.ax, rows.ay, rows.types, cam.R, cam.dR,
        cam.origin, cam.pitch, cam.S, cam.s, cam.aperture, cam.dA_dS, cam.dA_dD, cam.dA_de, cam.d_ref, cam.focal,
        cam.rho_form, n_terms, columns.kind_a, columns.kind_b, columns.factor,
        np.ascontiguousarray(pose_scale, dtype=np.float64), start, stop, stop - start,
        np.ones(n_out) if row_weight is None else row_weight, out_int, out_pose,
    )


def mic_jacobian(
    cam: CameraState,
    offsets: tuple[FloatArray, FloatArray],
    columns: ColumnMap,
    out_int: FloatArray,
    *,
    start: int = 0,
    stop: int | None = None,
    row_weight: FloatArray | None = None,
) -> None:
    """Jacobian of the micro-image centres ``start..stop``: u = u0 + C_x·(S − e)/((C_z + e)·s), v
    likewise.

    The central projection of the lens centre C from the exit-pupil centre (0, 0, −e) (the
    main-lens centre O of paper §5.2 and reference §4 when e = 0). Term t (u, v) of centre i is written to row t·(stop − start) + i − start of ``out_int``,
    times ``row_weight`` of that row (default 1); columns of parameters that do not move C or the
    sensor are zero.
    """
    stop = offsets[0].size if stop is None else stop
    n_out = 2 * (stop - start)
    kernels.mic_jacobian_kernel(offsets[0], offsets[1], cam.R, cam.dR, cam.origin, cam.pitch, cam.S, cam.e, cam.s,
                                cam.focal.size, columns.kind_a, columns.kind_b, columns.factor, start, stop,
                                stop - start, np.ones(n_out) if row_weight is None else row_weight, out_int)
