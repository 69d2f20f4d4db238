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
z = x/scale (:class:`~plenocal.calib.parameters.ParameterLayout`).

**Pupil vignetting** (``Residuals(pupil_vignetting=True)``, :mod:`plenocal.model.pupil`). The
observed position is p_o = c + ê·e_o: c the micro-image centre of the row's lens (the MIC
projection), e = |p_c − c| the chief-ray offset, ê its direction, and e_o the root of
e_o = e + γ_s·g(e_o; R_b, R_a) with γ = −ρ/R_b. With s = e_o/e and the implicit-function
derivatives of e_o (∂e_o/∂e, ∂ρ, ∂R_a, ∂R_b, :func:`plenocal.model.pupil.shift_partials`),

    δp_o = (1 − s)·δc + s·δp_c + ê·[(∂e_o/∂e − s)·ê·(δp_c − δc) + ∂e_o/∂ρ·δρ
                                   + ∂e_o/∂R_a·δR_a + ∂e_o/∂R_b·δR_b],

a per-row linear combination of rows this module already computes — the chief-ray u and v, ρ
and the MIC rows of the row's lens — and of the radius-law columns ∂R_a, ∂R_b
(:func:`radius_law_partials`; R_a = |m|/(N·s), R_b = |q_i|/s of
:func:`plenocal.model.white.radius_law`). :class:`VignettingRows` holds the combination's
coefficients; :func:`bap_jacobian` applies them.
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
    d_params : ndarray, shape (n, 3, 14)
        ∂p_u/∂(F, Q1, Q2, Q3, P1, P2, Z1, Z2, r_x, r_y, r_z, t_x, t_y, t_z) (own frame's pose).
    """

    points: FloatArray
    d_params: FloatArray


def virtual_point_partials(
    camera: PlenopticCamera, rotvecs: FloatArray, translations: FloatArray, points_world: FloatArray,
    point_frame: NDArray[np.int64],
) -> VirtualPointPartials:
    """p_u = distortion(thin lens(R·p_w + t)) (eq:thinlens, eq:distortion, and the depth distortion
    z_u = z′ + Z1·r′² + Z2·r′⁴) with its derivatives.

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
    dist = camera.distortion
    xu, yu = dist.apply(x, y)
    d_xy, d_coef = distortion_partials(dist, x, y)
    r2 = x * x + y * y
    # ∂p_u/∂p' : distortion on (x', y'); z_u = z' + Z1·r'² + Z2·r'⁴.
    d_pu_pv = np.zeros((x.size, 3, 3))
    d_pu_pv[:, :2, :2] = d_xy
    g = 2.0 * dist.z1 + 4.0 * dist.z2 * r2  # ∂Δz/∂(r'²)·2
    d_pu_pv[:, 2, 0] = g * x
    d_pu_pv[:, 2, 1] = g * y
    d_pu_pv[:, 2, 2] = 1.0
    d = np.empty((x.size, 3, 14))
    d[:, :, 0] = np.einsum("nij,nj->ni", d_pu_pv, d_lens_F)
    d[:, :2, 1:6] = d_coef
    d[:, 2, 1:6] = 0.0
    d[:, :2, 6:8] = 0.0
    d[:, 2, 6] = r2
    d[:, 2, 7] = r2 * r2
    d[:, :, 8:] = d_pu_pv @ d_lens_pc @ d_pc_pose
    return VirtualPointPartials(np.stack([xu, yu, virt[:, 2] + dist.depth(x, y)], axis=-1), d)


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
    "exit_pupil_mm": (kernels.KIND_EXIT_PUPIL,), "z1": (kernels.KIND_Z1,), "z2": (kernels.KIND_Z1 + 1,),
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
    vignetting: VignettingRows | None = None,
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
    vignetting : VignettingRows, optional
        (u, v) of the pupil-vignetting model (module docstring) instead of the chief ray.
    """
    stop = rows.point_of_row.size if stop is None else stop
    if vignetting is not None:
        _vignetted_bap_rows(cam, vp, rows, n_terms, columns, pose_scale, vignetting, out_int, out_pose, start, stop,
                            row_weight)
        return
    n_out = n_terms * (stop - start)
    kernels.bap_jacobian_kernel(
        vp.points, vp.d_params, rows.point_of_row, rows.frame_index, rows.ax, rows.ay, rows.types, cam.R, cam.dR,
        cam.origin, cam.pitch, cam.S, cam.s, cam.aperture, cam.dA_dS, cam.dA_dD, cam.dA_de, cam.d_ref, cam.focal,
        cam.rho_form, n_terms, columns.kind_a, columns.kind_b, columns.factor,
        np.ascontiguousarray(pose_scale, dtype=np.float64), start, stop, stop - start,
        np.ones(n_out) if row_weight is None else row_weight, out_int, out_pose,
    )


def radius_law_partials(camera: PlenopticCamera, columns: ColumnMap) -> tuple[FloatArray, FloatArray]:
    """∂e-scaled derivatives of R_a = |m|/(N·s) and R_b,i = |q_i|/s with respect to the columns.

    m = ±d·(F − e)/(2(D − e)), q_i = λ·Δc·d/(2f_i) − Δc/2 with λ = (D − e)/(D + d − e)
    (eq:miradiusfnumbermc with the exit pupil e, :func:`plenocal.model.white.radius_law`; Δc, N and
    s are not optimised): F, d, D, e and f_i move them, and nothing else does.

    Returns
    -------
    d_ra : ndarray, shape (n_columns,)
    d_rb : ndarray, shape (I, n_columns)
        Each column multiplied by the column's factor (−scale), like the rows of
        :func:`bap_jacobian`.
    """
    from plenocal.model.white import radius_law

    _, q = radius_law(camera)
    D, d, F = camera.D_mm, camera.d_mm, camera.main_lens.focal_length_mm
    e = camera.main_lens.exit_pupil_mm
    De, Fe, Se = D - e, F - e, D + d - e
    s, N = camera.sensor.pixel_size_mm, camera.main_lens.f_number
    dc = camera.micro_image_pitch_mm
    n_kinds = kernels.N_BASE_KINDS + camera.n_types
    k_ra = np.zeros(n_kinds)
    # |m| = d·(F − e)/(2(D − e)) whatever the configuration's sign.
    k_ra[0] = d / (2.0 * De) / (N * s)
    k_ra[8] = Fe / (2.0 * De) / (N * s)
    k_ra[14] = -d * Fe / (2.0 * De * De) / (N * s)
    k_ra[kernels.KIND_EXIT_PUPIL] = d * (F - D) / (2.0 * De * De) / (N * s)
    k_rb = np.zeros((camera.n_types, n_kinds))
    for i, f in enumerate(camera.mla.focal_lengths_mm):
        sign = np.sign(q[i]) / s
        k_rb[i, 8] = sign * dc / (2.0 * f) * De * De / (Se * Se)
        k_rb[i, 14] = sign * dc / (2.0 * f) * d * d / (Se * Se)
        k_rb[i, kernels.KIND_EXIT_PUPIL] = -sign * dc / (2.0 * f) * d * d / (Se * Se)
        k_rb[i, kernels.N_BASE_KINDS + i] = -sign * (De / Se) * dc * d / (2.0 * f * f)

    def to_columns(v: FloatArray) -> FloatArray:
        out = v[..., columns.kind_a]
        both = columns.kind_b >= 0
        out[..., both] += v[..., columns.kind_b[both]]
        return out * columns.factor

    return to_columns(k_ra), to_columns(k_rb)


@dataclass(frozen=True)
class VignettingRows:
    """The pupil-vignetting (u, v) rows as combinations of chief-ray, ρ and MIC rows (module
    docstring).

    Attributes
    ----------
    coef : ndarray, shape (N, 2, 7)
        For the observed u (0) and v (1) of each row, the factors of its chief-ray u, v, its ρ,
        its lens' MIC u, v, and ∂R_a, ∂R_b.
    d_ra : ndarray, shape (n_columns,)
    d_rb : ndarray, shape (I, n_columns)
        :func:`radius_law_partials`.
    """

    coef: FloatArray
    d_ra: FloatArray
    d_rb: FloatArray

    @classmethod
    def of(cls, e_uv: FloatArray, shift: FloatArray, d_ra: FloatArray, d_rb: FloatArray) -> VignettingRows:
        """From the chief-ray offsets p_c − c (N, 2) and :func:`plenocal.model.pupil.shifted_offset`'s
        (e_o, ∂e_o/∂e, ∂e_o/∂ρ, ∂e_o/∂R_a, ∂e_o/∂R_b) (N, 5) of each row."""
        e = np.hypot(e_uv[:, 0], e_uv[:, 1])
        away = e > 1e-12
        safe = np.where(away, e, 1.0)
        # At the centre (e = 0) p_o = c + ∂e_o/∂e·(p_c − c) to first order and ê drops out.
        s = np.where(away, shift[:, 0] / safe, shift[:, 1])
        n = np.where(away[:, None], e_uv / safe[:, None], 0.0)
        k = shift[:, 1] - s
        coef = np.empty((e.size, 2, 7))
        for a in range(2):
            b = 1 - a
            coef[:, a, a] = s + n[:, a] * n[:, a] * k
            coef[:, a, b] = n[:, a] * n[:, b] * k
            coef[:, a, 2] = n[:, a] * shift[:, 2]
            coef[:, a, 3 + a] = (1.0 - s) - n[:, a] * n[:, a] * k
            coef[:, a, 3 + b] = -n[:, a] * n[:, b] * k
            coef[:, a, 5] = n[:, a] * shift[:, 3]
            coef[:, a, 6] = n[:, a] * shift[:, 4]
        return cls(coef, d_ra, d_rb)


def jacobian_block(rows: int, n_columns: int) -> FloatArray:
    """An empty block for :func:`bap_jacobian`'s outputs side by side, (rows, n_columns + 6) plus
    one spare leading column when ``n_columns`` is 0; :func:`block_views` splits it. The kernel is
    compiled for one memory layout: the two outputs as strided views of one block, whichever
    caller (a pose-only solve's 0 intrinsic columns would otherwise be an empty, contiguous view:
    a second compilation of 5–7 s on a fresh install)."""
    return np.empty((rows, (0 if n_columns else 1) + n_columns + 6))


def block_views(block: FloatArray, n_columns: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(out_int, out_pose, both) of a :func:`jacobian_block` (or of its first rows): the views
    :func:`bap_jacobian` writes, and the n_columns + 6 columns they make together."""
    pad = 0 if n_columns else 1
    return block[:, : pad + n_columns], block[:, pad + n_columns :], block[:, pad:]


def _vignetted_bap_rows(
    cam: CameraState, vp: VirtualPointPartials, rows: BapRows, n_terms: int, columns: ColumnMap,
    pose_scale: FloatArray, vig: VignettingRows, out_int: FloatArray, out_pose: FloatArray, start: int, stop: int,
    row_weight: FloatArray | None,
) -> None:
    """:func:`bap_jacobian` with the (u, v) rows of the pupil-vignetting model: the chief-ray u, v,
    ρ rows and the MIC rows of the rows' lenses, combined by ``vig.coef`` (module docstring)."""
    n = stop - start
    p = columns.kind_a.size
    chief, chief_pose, _ = block_views(jacobian_block(3 * n, p), p)
    kernels.bap_jacobian_kernel(
        vp.points, vp.d_params, rows.point_of_row, rows.frame_index, rows.ax, rows.ay, rows.types, cam.R, cam.dR,
        cam.origin, cam.pitch, cam.S, cam.s, cam.aperture, cam.dA_dS, cam.dA_dD, cam.dA_de, cam.d_ref, cam.focal,
        cam.rho_form, 3, columns.kind_a, columns.kind_b, columns.factor,
        np.ascontiguousarray(pose_scale, dtype=np.float64), start, stop, n, np.ones(3 * n), chief, chief_pose,
    )
    centre = np.empty((2 * n, p))
    mic_jacobian(cam, (rows.ax, rows.ay), columns, centre, start=start, stop=stop)
    kernels.vignetted_rows_kernel(chief, chief_pose, centre, vig.coef, vig.d_ra, vig.d_rb, rows.types, start, n_terms,
                                  np.ones(n_terms * n) if row_weight is None else row_weight, out_int, out_pose)


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
