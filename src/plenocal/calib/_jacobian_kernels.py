"""numba kernels of the analytic Jacobian: one loop over residual rows, the chain rule of
:mod:`plenocal.calib.jacobian` per row, written straight into the Jacobian blocks.

Each row is computed independently (serial loop, no reduction), so the result does not depend on
anything but the inputs. Derivatives are first taken with respect to intermediate quantities of
the row — the distorted virtual point p_u (``gP``), the micro-lens centre C (``gC``), the sensor
distance S = D + d at fixed C (``gS``) and, for ρ, the aperture A, the reference distance d, the
lens focal length and (legacy form) the MLA origin t_m and normal n — and then combined per
intrinsic "kind" by :func:`_kind_values`:

====  ========  ====  ========  ====  ========  ====  ========
kind  quantity  kind  quantity  kind  quantity  kind  quantity
====  ========  ====  ========  ====  ========  ====  ========
0     F         5     P2        10    θy        15    pitch p0
1     Q1        6     u0        11    θz        16    pitch p1
2     Q2        7     v0        12    t_x       17    e (exit pupil)
3     Q3        8     d         13    t_y       18    Z1 (depth distortion)
4     P1        9     θx        14    D         19    Z2
                                                20+i  f_(i+1)
====  ========  ====  ========  ====  ========  ====  ========

Per (frame, node) point, ``point_d`` (3, 14) holds ∂p_u/∂(F, Q1, Q2, Q3, P1, P2, Z1, Z2) and the 6
pose derivatives (:data:`POINT_POSE`).

A column of the Jacobian is one kind or the sum of two (one shared pitch = p0 + p1).
"""

from __future__ import annotations

import numba as nb
import numpy as np

N_BASE_KINDS = 20
KIND_EXIT_PUPIL = 17
KIND_Z1 = 18
POINT_POSE = 8
"""Column of ``point_d`` where the pose derivatives start."""
RHO_LEGACY, RHO_HEAD, RHO_VIRTUAL_DEPTH = 0, 1, 2


@nb.njit(cache=True, inline="always")
def _dot3(a0, a1, a2, b0, b1, b2):  # pragma: no cover - compiled
    return a0 * b0 + a1 * b1 + a2 * b2


@nb.njit(cache=True, inline="always")
def _lens_centre(R, t_m, pitch, ax, ay):  # pragma: no cover - compiled
    """Camera-frame centre of the micro-lens at lattice coordinates (ax, ay): t_m + R·(p0·ax, p1·ay, 0)."""
    lx = pitch[0] * ax
    ly = pitch[1] * ay
    return (t_m[0] + R[0, 0] * lx + R[0, 1] * ly, t_m[1] + R[1, 0] * lx + R[1, 1] * ly,
            t_m[2] + R[2, 0] * lx + R[2, 1] * ly)


@nb.njit(cache=True, inline="always")
def _centre_directions(cd, R, dR, pitch, ax, ay):  # pragma: no cover - compiled
    """∂C/∂θx, ∂C/∂θy, ∂C/∂θz, ∂C/∂p0, ∂C/∂p1 of a lens at offsets (ax, ay) into ``cd`` (5, 3):
    C = t_m + R_m·(p0·a_x, p1·a_y, 0)."""
    lx = pitch[0] * ax
    ly = pitch[1] * ay
    for k in range(3):
        for j in range(3):
            cd[k, j] = dR[k, j, 0] * lx + dR[k, j, 1] * ly
    for j in range(3):
        cd[3, j] = R[j, 0] * ax
        cd[4, j] = R[j, 1] * ay


@nb.njit(cache=True, inline="always")
def _kind_values(vals, gP, gC, gS, term, aperture, d_ref, focal, lens_type, origin, normal, point_d, p, cd, dn,
                 dA_dS, dA_dD, ge, dA_de):  # pragma: no cover - compiled
    """∂pred/∂(each kind) of one row and term from its intermediate sensitivities (module table).

    ``ge``: the row's direct derivative with respect to the exit pupil's distance e (micro-image
    centres); ``dA_de``: ∂A/∂e of the micro-lens aperture A = Δc·(D − e)/(D + d − e).

    ``point_d[p]`` (3, 14): ∂p_u/∂(F, Q1, Q2, Q3, P1, P2, Z1, Z2, pose) of the row's point, ``p`` < 0 for
    rows that do not depend on p_u (micro-image centres); ``cd`` (5, 3): the lens'
    :func:`_centre_directions`; ``dn`` (3, 3): ∂n/∂θ of the MLA normal (legacy ρ).
    """
    if p >= 0:
        for j in range(6):
            vals[j] = _dot3(gP[0], gP[1], gP[2], point_d[p, 0, j], point_d[p, 1, j], point_d[p, 2, j])
        for j in range(2):
            vals[KIND_Z1 + j] = _dot3(gP[0], gP[1], gP[2], point_d[p, 0, 6 + j], point_d[p, 1, 6 + j],
                                      point_d[p, 2, 6 + j])
    else:
        for j in range(6):
            vals[j] = 0.0
        vals[KIND_Z1] = 0.0
        vals[KIND_Z1 + 1] = 0.0
    vals[6] = 1.0 if term == 0 else 0.0
    vals[7] = 1.0 if term == 1 else 0.0
    vals[8] = gS + aperture * dA_dS + d_ref
    for k in range(3):
        vals[9 + k] = (_dot3(gC[0], gC[1], gC[2], cd[k, 0], cd[k, 1], cd[k, 2])
                       + _dot3(normal[0], normal[1], normal[2], dn[k, 0], dn[k, 1], dn[k, 2]))
    vals[12] = gC[0] + origin[0]
    vals[13] = gC[1] + origin[1]
    vals[14] = -gC[2] + gS + aperture * (dA_dD + dA_dS) - origin[2]
    vals[15] = _dot3(gC[0], gC[1], gC[2], cd[3, 0], cd[3, 1], cd[3, 2])
    vals[16] = _dot3(gC[0], gC[1], gC[2], cd[4, 0], cd[4, 1], cd[4, 2])
    vals[KIND_EXIT_PUPIL] = ge + aperture * dA_de
    for i in range(vals.size - N_BASE_KINDS):
        vals[N_BASE_KINDS + i] = focal if lens_type == i else 0.0


@nb.njit(cache=True, inline="always")
def _write_columns(out, row, vals, kind_a, kind_b, col_scale, weight):  # pragma: no cover - compiled
    for c in range(kind_a.size):
        v = vals[kind_a[c]]
        if kind_b[c] >= 0:
            v += vals[kind_b[c]]
        out[row, c] = weight * col_scale[c] * v


@nb.njit(cache=True)
def bap_jacobian_kernel(points, point_d, point_of_row, frame_index, ax, ay, types, R, dR, t_m, pitch, S, s, A,
                        dA_dS, dA_dD, dA_de, d_ref, focal, rho_form, n_terms, kind_a, kind_b, col_scale, pose_scale,
                        start, stop, term_stride, row_weight, out_int, out_pose):  # pragma: no cover - compiled
    """Jacobian of the BAP rows ``start..stop`` (u, v[, ρ]): term t of row i goes to row
    ``o = t·term_stride + i − start`` of ``out_int`` (n_columns intrinsic columns) and ``out_pose``
    (the 6 columns of the row's own frame pose), multiplied by ``row_weight[o]``.

    Parameters
    ----------
    points : (n_points, 3) distorted virtual points p_u; point_d : (n_points, 3, 14) their
    derivatives; point_of_row, frame_index, types : (N,) per row; ax, ay : (N,) lens offsets
    (pitch units); R, dR : MLA rotation (3, 3) and its θ derivatives (3, 3, 3); t_m : (3,) MLA
    origin; pitch : (p0, p1); S : D + d; s : pixel size; A : micro-lens aperture λ·Δc and its
    derivatives dA_dS, dA_dD, dA_de (at fixed S); d_ref : d; focal : (I,) f_i; rho_form : RHO_*;
    kind_a, kind_b, col_scale : (n_free,) column kinds (kind_b −1 if none) and factors;
    pose_scale : (n_frames, 6) factors of the pose columns (0 where frozen).
    """
    vals = np.zeros(N_BASE_KINDS + focal.size)
    gP = np.zeros(3)
    gC = np.zeros(3)
    origin = np.zeros(3)
    normal = np.zeros(3)
    cd = np.zeros((5, 3))
    dn = np.zeros((3, 3))
    for kk in range(3):
        for j in range(3):
            dn[kk, j] = dR[kk, j, 2]
    k = -1.0 / s
    zs = -S
    half_a_s = A / (2.0 * s)
    for i in range(start, stop):
        p = point_of_row[i]
        Px, Py, Pz = points[p, 0], points[p, 1], points[p, 2]
        Cx, Cy, Cz = _lens_centre(R, t_m, pitch, ax[i], ay[i])
        _centre_directions(cd, R, dR, pitch, ax[i], ay[i])
        inv_dz = 1.0 / (Pz - Cz)
        t = (zs - Cz) * inv_dz
        q = (zs - Pz) * inv_dz * inv_dz  # ∂t/∂C_z
        f_row = frame_index[i]
        for term in range(n_terms):
            aperture = 0.0
            dref = 0.0
            foc = 0.0
            for j in range(3):
                origin[j] = 0.0
                normal[j] = 0.0
            if term < 2:
                # Chief ray: X = C + t·(p_u − C) on z = −S, u = u0 − X/s (v likewise).
                c = (Px - Cx) if term == 0 else (Py - Cy)
                gP[0] = gP[1] = gP[2] = 0.0
                gC[0] = gC[1] = gC[2] = 0.0
                gP[term] = k * t
                gP[2] = -k * t * c * inv_dz
                gC[term] = k * (1.0 - t)
                gC[2] = k * c * q
                gS = -k * c * inv_dz
            else:
                # ρ = A/(2s)·(d_f/f − 1 − d_v/a) (eq:blurradius).
                f = focal[types[i]]
                if rho_form == RHO_LEGACY:
                    rx, ry, rz = Px - t_m[0], Py - t_m[1], Pz - t_m[2]
                    a = _dot3(rx, ry, rz, R[0, 2], R[1, 2], R[2, 2])
                    d_f = d_ref
                    d_v = d_ref
                else:
                    a = Pz - Cz
                    d_v = S + Cz
                    d_f = d_v if rho_form == RHO_HEAD else d_ref
                rho_a = half_a_s * d_v / (a * a)
                rho_dv = -half_a_s / a
                rho_df = half_a_s / f
                aperture = (d_f / f - 1.0 - d_v / a) / (2.0 * s)
                foc = -half_a_s * d_f / (f * f)
                if rho_form == RHO_LEGACY:
                    for j in range(3):
                        gP[j] = rho_a * R[j, 2]
                        gC[j] = 0.0
                        origin[j] = -rho_a * R[j, 2]
                    normal[0], normal[1], normal[2] = rho_a * rx, rho_a * ry, rho_a * rz
                    gS = 0.0
                    dref = rho_dv + rho_df
                else:
                    d_dk = rho_dv + (rho_df if rho_form == RHO_HEAD else 0.0)
                    gP[0] = gP[1] = 0.0
                    gP[2] = rho_a
                    gC[0] = gC[1] = 0.0
                    gC[2] = d_dk - rho_a
                    gS = d_dk
                    dref = 0.0 if rho_form == RHO_HEAD else rho_df
            _kind_values(vals, gP, gC, gS, term, aperture, dref, foc, types[i], origin, normal, point_d, p, cd, dn,
                         dA_dS, dA_dD, 0.0, dA_de)
            row = term * term_stride + i - start
            wr = row_weight[row]
            _write_columns(out_int, row, vals, kind_a, kind_b, col_scale, wr)
            for c6 in range(6):
                out_pose[row, c6] = wr * pose_scale[f_row, c6] * _dot3(
                    gP[0], gP[1], gP[2], point_d[p, 0, POINT_POSE + c6], point_d[p, 1, POINT_POSE + c6],
                    point_d[p, 2, POINT_POSE + c6])


@nb.njit(cache=True)
def mic_jacobian_kernel(ax, ay, R, dR, t_m, pitch, S, e, s, n_types, kind_a, kind_b, col_scale, start, stop,
                        term_stride, row_weight, out_int):  # pragma: no cover - compiled
    """Jacobian of the micro-image centres ``start..stop``, u = u0 + C_x·(S − e)/((C_z + e)·s) and v
    likewise (the lens centre projected from the exit-pupil centre (0, 0, −e)): term t (u, v) of
    centre i goes to row ``o = t·term_stride + i − start`` of ``out_int``, multiplied by
    ``row_weight[o]``."""
    vals = np.zeros(N_BASE_KINDS + n_types)
    gP = np.zeros(3)
    gC = np.zeros(3)
    zero3 = np.zeros(3)
    no_point = np.zeros((0, 3, 14))
    cd = np.zeros((5, 3))
    dn = np.zeros((3, 3))
    for i in range(start, stop):
        Cx, Cy, Cz = _lens_centre(R, t_m, pitch, ax[i], ay[i])
        _centre_directions(cd, R, dR, pitch, ax[i], ay[i])
        ze = Cz + e
        inv = 1.0 / (ze * s)
        for term in range(2):
            c = Cx if term == 0 else Cy
            gC[0] = gC[1] = gC[2] = 0.0
            gC[term] = (S - e) * inv
            gC[2] = -c * (S - e) * inv / ze
            ge = -c * (Cz + S) * inv / ze
            _kind_values(vals, gP, gC, c * inv, term, 0.0, 0.0, 0.0, -1, zero3, zero3, no_point, -1, cd, dn, 0.0,
                         0.0, ge, 0.0)
            row = term * term_stride + i - start
            _write_columns(out_int, row, vals, kind_a, kind_b, col_scale, row_weight[row])


@nb.njit(cache=True)
def vignetted_rows_kernel(chief, chief_pose, centre, coef, d_ra, d_rb, types, start, n_terms, row_weight, out_int,
                          out_pose):  # pragma: no cover - compiled
    """The pupil-vignetting (u, v) rows of BAP rows ``start..start + n`` as combinations of their
    chief-ray u, v, ρ rows (``chief`` (3n, p), ``chief_pose`` (3n, 6)), their lens' MIC rows
    (``centre`` (2n, p)) and the radius-law columns ``d_ra`` (p,), ``d_rb`` (I, p) with the
    factors ``coef`` (N, 2, 7) (:class:`plenocal.calib.jacobian.VignettingRows`); the ρ rows
    (``n_terms`` 3) unchanged. Term t of row i goes to row t·n + i of ``out_int`` / ``out_pose``,
    times ``row_weight``."""
    n = centre.shape[0] // 2
    p = chief.shape[1]
    for i in range(n):
        c = coef[start + i]
        t = types[start + i]
        for a in range(2):
            o = a * n + i
            w = row_weight[o]
            for j in range(p):
                out_int[o, j] = w * (c[a, 0] * chief[i, j] + c[a, 1] * chief[n + i, j] + c[a, 2] * chief[2 * n + i, j]
                                     + c[a, 3] * centre[i, j] + c[a, 4] * centre[n + i, j] + c[a, 5] * d_ra[j]
                                     + c[a, 6] * d_rb[t, j])
            for j in range(6):
                out_pose[o, j] = w * (c[a, 0] * chief_pose[i, j] + c[a, 1] * chief_pose[n + i, j]
                                      + c[a, 2] * chief_pose[2 * n + i, j])
        if n_terms == 3:
            o = 2 * n + i
            w = row_weight[o]
            for j in range(p):
                out_int[o, j] = w * chief[2 * n + i, j]
            for j in range(6):
                out_pose[o, j] = w * chief_pose[2 * n + i, j]
