"""The analytic Jacobian of Θ's residuals against central finite differences, column by column.

Every free column (intrinsics and poses), every ρ form, one and two pitches, I = 0, a frozen set,
and the fused normal equations of the solver. The tolerance of each entry comes from the
finite-difference truncation error, estimated from two step sizes; a derivative off by 1e-5
relative fails (:func:`test_check_fails_on_a_perturbed_derivative`).
"""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.calib.calibrate import as_pinhole
from plenocal.calib.parameters import ParameterLayout
from plenocal.calib.residuals import JacobianBlocks, Residuals
from plenocal.calib.solver import analytic_normal_equations, levenberg_marquardt, normal_equations
from plenocal.model.camera import RhoForm

FRAMES = 3
"""Frames of the sub-problem (the pose columns of each frame are checked)."""
FD_STEP = 0.05
"""Largest central-difference step, in solver units (the parameter's scale): large enough that
rounding stays below the extrapolated truncation error, small enough for the extrapolation."""


@pytest.fixture(scope="module")
def subproblem(r12a_synthetic, r12a_poses):
    """A few frames' features and every 25th micro-image centre of the synthetic R12-A data."""
    noisy, _ = r12a_synthetic
    frames = tuple(sorted(r12a_poses))[:FRAMES]
    bap = noisy.bap.select(np.isin(noisy.bap.frame, frames))
    mic = noisy.mic.select(np.arange(len(noisy.mic)) % 25 == 0)
    return bap, mic, frames


def _start(layout: ParameterLayout, camera, poses) -> np.ndarray:
    """The truth moved off zero distortion and tilt, so that every chain-rule term is exercised."""
    x = layout.pack(camera, poses)
    for name, dx in (("q1", 3e-5), ("q2", 2e-7), ("q3", 1e-9), ("p1", 2e-5), ("p2", -1e-5), ("theta_x_rad", 2e-3),
                     ("theta_y_rad", -1e-3), ("theta_z_rad", 5e-4)):
        x[layout.index[name]] += dx
    return x


def dense(res: Residuals, J: JacobianBlocks) -> np.ndarray:
    """The Jacobian blocks as one dense matrix over the free variables (intrinsics, then poses)."""
    lay = res.layout
    N, nt = res.n_bap, res.n_terms_bap
    pose_cols = np.flatnonzero(J.pose_free.reshape(-1))
    out = np.zeros((res.n_rows, J.intrinsics.shape[1] + pose_cols.size))
    out[:, : J.intrinsics.shape[1]] = J.intrinsics
    for c, k in enumerate(pose_cols):
        f, comp = divmod(int(k), 6)
        rows = res.frame_index == f
        for t in range(nt):
            out[t * N : (t + 1) * N, J.intrinsics.shape[1] + c][rows] = J.poses[t][rows, comp]
    assert len(lay.frames) == J.pose_free.shape[0]
    return out


def fd_column(res: Residuals, x: np.ndarray, j: int, step: float) -> np.ndarray:
    """∂e/∂z_j by central differences of step ``step`` in solver units."""
    h = step * res.layout.scale[j]
    xp, xm = x.copy(), x.copy()
    xp[j] += h
    xm[j] -= h
    return (res.residuals(xp) - res.residuals(xm)) / (2.0 * step)


STEP_CHANGE_PX = 0.05
"""Each term's steps are chosen so that its largest prediction changes by about this much: small
steps would drown a weak dependence (ρ on θz through the tilt) in rounding noise."""
MAX_STEP = 100.0
"""Largest step, solver units (θz: 1e-3 rad)."""
ROUNDING_FLOOR = 1e-9
"""Rounding floor of the reference, relative to the largest entry of the column in the term."""


def assert_matches_fd(res: Residuals, x: np.ndarray, J_dense: np.ndarray,
                      skip_uv: np.ndarray | None = None, step_change_px: float = STEP_CHANGE_PX) -> None:
    """Each entry within the error of the Richardson-extrapolated central difference.

    For each column and term (u, v, ρ, MIC u, MIC v), with D(h) the central difference at a step
    h such that the term's largest prediction moves by ~:data:`STEP_CHANGE_PX`,
    R(h) = (4·D(h/2) − D(h))/3 has an O(h⁴) truncation error; the reference R(h/2) is within
    |R(h) − R(h/2)| of the derivative (R(h/2) being ~16× more accurate), plus a rounding floor.
    Entries whose term does not depend on the parameter at all must be exactly zero.
    ``skip_uv`` (N,): BAP rows whose u, v are not checked (where the prediction is only C¹);
    ``step_change_px``: the largest prediction change of the steps."""
    free = np.flatnonzero(res.layout.free_mask)
    assert J_dense.shape == (res.n_rows, free.size)
    terms = list(res.term_slices().items())
    for c, j in enumerate(free):
        pilot = fd_column(res, x, j, FD_STEP)
        for term, sl in terms:
            got = J_dense[sl, c]
            keep = ~skip_uv if skip_uv is not None and term in ("u", "v") else slice(None)
            size = np.abs(pilot[sl]).max(initial=0.0)
            if size == 0.0:
                assert np.all(got == 0.0), f"{res.layout.names[j]} on {term}: expected zeros"
                continue
            h = min(step_change_px / size, MAX_STEP)
            d1, d2, d4 = (fd_column(res, x, j, h / k)[sl] for k in (1, 2, 4))
            r1, r2 = (4.0 * d2 - d1) / 3.0, (4.0 * d4 - d2) / 3.0
            tol = 2.0 * np.abs(r1 - r2) + ROUNDING_FLOOR * np.abs(r2).max()
            got, r2, tol = got[keep], r2[keep], tol[keep]
            err = np.abs(got - r2)
            worst = int(np.argmax(err - tol))
            assert np.all(err <= tol), (
                f"{res.layout.names[j]} on {term}: row {worst} analytic {got[worst]:.12g} vs FD {r2[worst]:.12g} "
                f"(tolerance {tol[worst]:.3g})")


@pytest.mark.parametrize("rho_form", list(RhoForm))
def test_depth_distortion_columns_match_finite_differences(subproblem, r12a_camera, r12a_poses, r12a_board, rho_form):
    """With the depth distortion Z1, Z2 (a curved field) non-zero and free: every column, including
    ∂/∂Z1, ∂/∂Z2 through z_u and every other column's new path through ∂z_u/∂(x′, y′)."""
    import dataclasses

    bap, mic, frames = subproblem
    camera = r12a_camera.replace(rho_form=rho_form,
                                 distortion=dataclasses.replace(r12a_camera.distortion, z1=0.0034, z2=-2e-6))
    lay = ParameterLayout(camera, frames, two_pitches=True, depth_distortion=True, exit_pupil=True)
    assert {"z1", "z2"} <= set(lay.names)
    res = Residuals(lay, bap, mic, r12a_board)
    x = _start(lay, camera, r12a_poses)
    assert_matches_fd(res, x, dense(res, res.jacobian(x, method="analytic")))


@pytest.mark.parametrize("rho_form", list(RhoForm))
@pytest.mark.parametrize("exit_pupil_mm", [9.35, -7.3])
def test_exit_pupil_column_matches_finite_differences(subproblem, r12a_camera, r12a_poses, r12a_board, rho_form,
                                                      exit_pupil_mm):
    """With the exit pupil e behind (> 0) or in front of (< 0) H′ and free: every column, including
    ∂/∂e of the micro-image centres and of ρ through A = Δc·(D − e)/(D + d − e)."""
    bap, mic, frames = subproblem
    ml = r12a_camera.main_lens
    camera = r12a_camera.replace(rho_form=rho_form,
                                 main_lens=type(ml)(ml.focal_length_mm, ml.f_number, exit_pupil_mm))
    lay = ParameterLayout(camera, frames, two_pitches=True, exit_pupil=True)
    assert "exit_pupil_mm" in lay.names
    res = Residuals(lay, bap, mic, r12a_board)
    x = _start(lay, camera, r12a_poses)
    assert_matches_fd(res, x, dense(res, res.jacobian(x, method="analytic")))


@pytest.mark.parametrize("rho_form", list(RhoForm))
@pytest.mark.parametrize("two_pitches", [True, False])
def test_every_column_matches_finite_differences(subproblem, r12a_camera, r12a_poses, r12a_board, rho_form,
                                                 two_pitches):
    bap, mic, frames = subproblem
    camera = r12a_camera.replace(rho_form=rho_form)
    lay = ParameterLayout(camera, frames, two_pitches=two_pitches)
    res = Residuals(lay, bap, mic, r12a_board)
    x = _start(lay, camera, r12a_poses)
    assert_matches_fd(res, x, dense(res, res.jacobian(x, method="analytic")))


@pytest.mark.parametrize("case", ["pinhole", "no_rho", "frozen", "mic_only", "bap_only"])
def test_special_problems_match_finite_differences(subproblem, r12a_camera, r12a_poses, r12a_board, case):
    """I = 0 (no ρ rows), the ρ term switched off, a frozen set (tilt, one pitch, F, one focal
    length, some pose entries), only micro-image centres, only BAP features."""
    bap, mic, frames = subproblem
    camera = as_pinhole(r12a_camera) if case == "pinhole" else r12a_camera
    frozen = ("tilt", "pitch1_mm", "F_mm", "f2_mm", f"pose[{frames[1]}].rx", f"pose[{frames[2]}].tz") \
        if case == "frozen" else ()
    lay = ParameterLayout(camera, () if case == "mic_only" else frames, two_pitches=True, frozen=frozenset(frozen))
    if case == "mic_only":
        bap = bap.select(np.zeros(len(bap), bool))
    if case == "bap_only":
        mic = mic.select(np.zeros(len(mic), bool))
    res = Residuals(lay, bap, mic, r12a_board, use_rho=case != "no_rho")
    x = _start(lay, camera, r12a_poses)
    J = res.jacobian(x, method="analytic")
    assert_matches_fd(res, x, dense(res, J))
    if case == "frozen":
        assert not J.pose_free[1, 0] and not J.pose_free[2, 5]


def test_check_fails_on_a_perturbed_derivative(subproblem, r12a_camera, r12a_poses, r12a_board):
    """The check can fail: one entry off by 1e-5 relative (the largest of F's column, of a pose
    column)."""
    bap, mic, frames = subproblem
    lay = ParameterLayout(r12a_camera, frames, two_pitches=True)
    res = Residuals(lay, bap, mic, r12a_board)
    x = _start(lay, r12a_camera, r12a_poses)
    Jd = dense(res, res.jacobian(x))
    for col in (lay.index["F_mm"], Jd.shape[1] - 2):
        row = int(np.argmax(np.abs(Jd[:, col])))
        bad = Jd.copy()
        bad[row, col] *= 1.0 + 1e-5
        with pytest.raises(AssertionError):
            assert_matches_fd(res, x, bad)


def test_analytic_and_fd_blocks_agree_and_have_the_same_structure(subproblem, r12a_camera, r12a_poses, r12a_board):
    bap, mic, frames = subproblem
    lay = ParameterLayout(r12a_camera, frames, two_pitches=True)
    res = Residuals(lay, bap, mic, r12a_board)
    x = _start(lay, r12a_camera, r12a_poses)
    Ja, Jf = res.jacobian(x), res.jacobian(x, method="fd")
    assert Ja.intrinsics.shape == Jf.intrinsics.shape and Ja.poses.shape == Jf.poses.shape
    np.testing.assert_array_equal(Ja.mic_columns, Jf.mic_columns)
    nb = res.n_terms_bap * res.n_bap
    others = np.setdiff1d(np.arange(Ja.intrinsics.shape[1]), Ja.mic_columns)
    assert np.all(Ja.intrinsics[nb:, others] == 0)  # F, distortion, f_i do not move the centres
    np.testing.assert_allclose(Ja.intrinsics, Jf.intrinsics, rtol=0, atol=1e-5 * np.abs(Jf.intrinsics).max())


def test_fused_normal_equations_equal_the_blocks(subproblem, r12a_camera, r12a_poses, r12a_board):
    """The solver's frame-by-frame normal equations equal JᵀWJ, JᵀWr of the Jacobian blocks."""
    bap, mic, frames = subproblem
    lay = ParameterLayout(r12a_camera, frames, two_pitches=True, frozen=frozenset({f"pose[{frames[0]}].ty"}))
    res = Residuals(lay, bap, mic, r12a_board)
    x = _start(lay, r12a_camera, r12a_poses)
    r = res.residuals(x)
    w = np.random.default_rng(0).uniform(0.0, 2.0, r.size)
    H0, g0, c0 = normal_equations(res, res.jacobian(x), r, w)
    H1, g1, c1 = analytic_normal_equations(res, x, r, w)
    np.testing.assert_array_equal(c0, c1)
    np.testing.assert_allclose(H1, H0, rtol=1e-12, atol=1e-12 * np.abs(H0).max())
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-12 * np.abs(g0).max())


def test_solvers_reach_the_same_cost(subproblem, r12a_camera, r12a_poses, r12a_board):
    """Levenberg–Marquardt with the analytic and the finite-difference Jacobian converge to the
    same cost (relative 1e-8) from a start off the truth."""
    bap, mic, frames = subproblem
    lay = ParameterLayout(r12a_camera, frames, two_pitches=True)
    res = Residuals(lay, bap, mic, r12a_board)
    x0 = _start(lay, r12a_camera, r12a_poses)
    x0[lay.index["F_mm"]] *= 1.01
    x0[lay.index["u0_px"]] += 20.0
    sigma = {"uv": 0.3, "rho": 0.05, "mic": 0.1}
    _, ra = levenberg_marquardt(res, x0, sigma=sigma, jacobian="analytic")
    _, rf = levenberg_marquardt(res, x0, sigma=sigma, jacobian="fd")
    assert ra.converged and rf.converged
    assert abs(ra.cost_history[-1] - rf.cost_history[-1]) <= 1e-8 * rf.cost_history[-1]


VIGNETTING_STEP_CHANGE_PX = 0.01
"""Steps of the pupil-vignetting check: a fifth of :data:`STEP_CHANGE_PX` (rounding stays
~1e-11 relative), because near a tangency of the discs the prediction's higher derivatives grow
(below)."""
SEAM_MARGIN_PX = 0.25
"""The shifted offset e_o is only C¹ where the discs become tangent (:mod:`plenocal.model.pupil`):
at e_o = R_a + R_b g″ jumps, and past e_o = |R_a − R_b| g grows as δ^{3/2}, so its k-th derivative
as δ^{3/2 − k}. The Richardson reference assumes bounded higher derivatives over the steps'
excursion (≤ 0.01 px): its error ~(0.01/δ)⁴ is negligible only for rows ≥ ~25 excursions from a
tangency."""


def near_seams(res: Residuals, x: np.ndarray) -> np.ndarray:
    """BAP rows whose shifted offset is within :data:`SEAM_MARGIN_PX` of a tangency of the discs."""
    from plenocal.model.pupil import shifted_offset

    camera = res.layout.unpack_camera(x)
    rv, tr = res.layout.pose_arrays(x)
    u, v, rho, C = res._chief_ray(camera, rv, tr, None)
    e_uv, _, ra, rb = res._vignetting_inputs(camera, u, v, C)
    eo = shifted_offset(np.hypot(e_uv[:, 0], e_uv[:, 1]), rho, ra, rb)
    skip = (np.abs(eo - np.abs(ra - rb)) < SEAM_MARGIN_PX) | (np.abs(eo - ra - rb) < SEAM_MARGIN_PX)
    assert skip.mean() < 0.1  # the check still covers nearly every row
    return skip


@pytest.mark.parametrize("rho_form", list(RhoForm))
@pytest.mark.parametrize("two_pitches", [True, False])
def test_pupil_vignetting_columns_match_finite_differences(subproblem, r12a_camera, r12a_poses, r12a_board, rho_form,
                                                           two_pitches):
    """The pupil-vignetting (u, v) rows (implicit-function theorem through the shift's fixed point,
    the MIC of each row's lens, ρ and the radius law) against Richardson central differences."""
    bap, mic, frames = subproblem
    camera = r12a_camera.replace(rho_form=rho_form)
    lay = ParameterLayout(camera, frames, two_pitches=two_pitches)
    res = Residuals(lay, bap, mic, r12a_board, pupil_vignetting=True)
    x = _start(lay, camera, r12a_poses)
    assert res.default_jacobian_method == "analytic"
    assert_matches_fd(res, x, dense(res, res.jacobian(x)), near_seams(res, x), VIGNETTING_STEP_CHANGE_PX)


@pytest.mark.parametrize("case", ["no_rho", "frozen", "measured_radii", "exit_pupil"])
def test_pupil_vignetting_special_problems_match_finite_differences(subproblem, r12a_camera, r12a_poses, r12a_board,
                                                                    case):
    """Vignetted (u, v) without the ρ term (the shift still needs ρ), with a frozen set, with
    the radii the white images measured (Ω's spatial law; fixed, no radius-law columns), and with
    the exit pupil e estimated."""
    from plenocal.calib.residuals import MeasuredPupilRadii
    from plenocal.model.camera import MainLens
    from plenocal.model.white import internal_parameters

    bap, mic, frames = subproblem
    frozen = ("tilt", "pitch1_mm", "F_mm", "f2_mm", f"pose[{frames[1]}].rx") if case == "frozen" else ()
    if case == "exit_pupil":
        ml = r12a_camera.main_lens
        r12a_camera = r12a_camera.replace(main_lens=MainLens(ml.focal_length_mm, ml.f_number, -7.3))
    lay = ParameterLayout(r12a_camera, frames, two_pitches=True, frozen=frozenset(frozen), exit_pupil=case == "exit_pupil")
    radii = MeasuredPupilRadii(internal_parameters(r12a_camera), r12a_camera.grid) if case == "measured_radii" else None
    res = Residuals(lay, bap, mic, r12a_board, use_rho=case != "no_rho", pupil_vignetting=True, pupil_radii=radii)
    x = _start(lay, r12a_camera, r12a_poses)
    assert_matches_fd(res, x, dense(res, res.jacobian(x)), near_seams(res, x), VIGNETTING_STEP_CHANGE_PX)


def test_pupil_vignetting_fused_normal_equations_equal_the_blocks(subproblem, r12a_camera, r12a_poses, r12a_board):
    bap, mic, frames = subproblem
    lay = ParameterLayout(r12a_camera, frames, two_pitches=True)
    res = Residuals(lay, bap, mic, r12a_board, pupil_vignetting=True)
    x = _start(lay, r12a_camera, r12a_poses)
    r = res.residuals(x)
    w = np.random.default_rng(1).uniform(0.0, 2.0, r.size)
    H0, g0, _ = normal_equations(res, res.jacobian(x), r, w)
    H1, g1, _ = analytic_normal_equations(res, x, r, w)
    np.testing.assert_allclose(H1, H0, rtol=1e-12, atol=1e-12 * np.abs(H0).max())
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-12 * np.abs(g0).max())


@pytest.mark.parametrize("exit_pupil_mm", [None, 9.35])
def test_radius_law_partials_match_finite_differences(r12a_camera, exit_pupil_mm):
    """∂R_a, ∂R_b of :func:`radius_law_partials` against central differences of
    ``model.white.radius_law`` through the layout (a change of the radius law must show here),
    also with the exit pupil e estimated."""
    from plenocal.calib.jacobian import ColumnMap, radius_law_partials
    from plenocal.model.camera import MainLens
    from plenocal.model.white import radius_law

    if exit_pupil_mm is not None:
        ml = r12a_camera.main_lens
        r12a_camera = r12a_camera.replace(main_lens=MainLens(ml.focal_length_mm, ml.f_number, exit_pupil_mm))
    lay = ParameterLayout(r12a_camera, (), two_pitches=True, exit_pupil=exit_pupil_mm is not None)
    names = lay.intrinsic_names
    cols = ColumnMap.of(names, lay.scale[: lay.n_intrinsics])
    d_ra, d_rb = radius_law_partials(r12a_camera, cols)
    x = lay.pack(r12a_camera, {})
    s = r12a_camera.sensor.pixel_size_mm

    def radii(xv):
        cam = lay.unpack_camera(xv)
        m, q = radius_law(cam)
        return np.concatenate([[abs(m) / cam.main_lens.f_number], np.abs(q)]) / s

    for j, name in enumerate(names):
        h = 1e-2 * lay.scale[j]
        xp, xm = x.copy(), x.copy()
        xp[j] += h
        xm[j] -= h
        fd = -(radii(xp) - radii(xm)) / (2e-2)  # e = obs − pred, per solver unit
        got = np.concatenate([[d_ra[j]], d_rb[:, j]])
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9, err_msg=name)


@pytest.mark.parametrize("n_columns", [0, 1, 17])
def test_jacobian_block_views_have_one_numba_type_for_any_column_count(n_columns):
    """The BAP kernel's two outputs are strided views of one block whatever the number of intrinsic
    columns (a pose-only solve has none): numba compiles a function once per argument type, and an
    empty contiguous view made it compile a second time (5–7 s on a fresh install)."""
    import numba

    from plenocal.calib.jacobian import block_views, jacobian_block

    for rows in (2, 9):
        block = jacobian_block(rows, n_columns)
        out_int, out_pose, both = block_views(block, n_columns)
        assert numba.typeof(out_int) == numba.typeof(out_pose) == numba.types.Array(numba.float64, 2, "A")
        assert out_pose.shape == (rows, 6) and both.shape == (rows, n_columns + 6)
        both[...] = np.arange(both.size).reshape(both.shape)
        assert np.array_equal(np.hstack([out_int[:, : n_columns], out_pose]), both)
