"""The rendered vignetted-pupil corner and its inversion (detect.corners.chief_ray_corners)."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.detect.corners import CornerFit, chief_ray_corners, locate_corners, render_corners
from plenocal.model.projection import pupil_shift_px

RA, RB = 6.47, 5.1  # R12-A at N = 4: aperture and lens radii (px)


def _scene(n=24, seed=0):
    rng = np.random.default_rng(seed)
    side = int(np.ceil(np.sqrt(n)))
    centres = np.array([[30.0 + 30 * (i % side) + rng.uniform(-0.5, 0.5), 30.0 + 30 * (i // side) + rng.uniform(-0.5, 0.5)] for i in range(n)])
    r = rng.uniform(1.0, 6.5, n)
    phi = rng.uniform(0, 2 * np.pi, n)
    chief = centres + np.c_[r * np.cos(phi), r * np.sin(phi)]
    th1 = rng.uniform(0, np.pi, n)
    angles = np.c_[th1, th1 + rng.uniform(np.radians(50), np.radians(130), n)]
    rho = rng.choice([-1, 1], n) * rng.uniform(1.0, 3.5, n)
    sign = rng.choice([-1.0, 1.0], n)
    shape = (30 * (side + 1), 30 * (side + 1))
    radius = np.full(n, RA + RB)
    return centres, chief, angles, rho, sign, shape, radius


def _white(shape, centres, usable):
    w = np.zeros(shape)
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]]
    for c, u in zip(centres, usable, strict=True):
        w[np.hypot(xx - c[0], yy - c[1]) <= u + 1.0] = 1.0
    return w


def test_rendering_with_a_wide_aperture_is_the_symmetric_disc_blur():
    """R_a ≫ R_b: no vignetting, the corner appears at its chief-ray position (paper's model)."""
    centres, chief, angles, rho, sign, shape, radius = _scene()
    usable = 0.85 * radius
    img = np.zeros(shape)
    render_corners(img, centres, radius + 2, chief, angles, sign, rho, 1e3, np.full(len(rho), RB))
    seen, fit = locate_corners(img, _white(shape, centres, usable), centres, usable, chief + 0.3, angles)
    e = np.hypot(*(seen - chief).T)
    assert np.all(fit.converged)
    assert e.max() < 0.02


def test_vignetted_corners_are_displaced_as_the_first_order_model_says_and_inverted_exactly():
    centres, chief, angles, rho, sign, shape, radius = _scene(seed=1)
    usable = 0.85 * radius
    rb = np.full(len(rho), RB)
    img = np.zeros(shape)
    render_corners(img, centres, radius + 2, chief, angles, sign, rho, RA, rb)
    white = _white(shape, centres, usable)
    seen, fit = locate_corners(img, white, centres, usable, pupil_shift_px(chief, rho, centres, RA, rb), angles)
    ok = fit.converged & (np.hypot(*(seen - centres).T) < usable - 1.0)
    assert ok.sum() >= 15
    first_order = pupil_shift_px(chief, rho, centres, RA, rb)
    shift = np.hypot(*(seen - chief).T)[ok]
    assert shift.max() > 1.0  # the displacement is large...
    assert np.sqrt(np.mean(np.sum((seen - first_order)[ok] ** 2, 1))) < 0.35 * np.sqrt(np.mean(shift**2))  # ...and mostly first order
    sel = np.flatnonzero(ok)
    f = fit.select(ok)
    K, conv = chief_ray_corners(seen[sel], f, rho[sel], white, centres[sel], usable[sel], RA, rb[sel])
    assert conv.all()
    assert np.abs(K - chief[sel]).max() < 0.02


def test_cornerfit_select_and_concatenate_keep_fields_aligned():
    centres, chief, angles, rho, sign, shape, radius = _scene(n=6, seed=2)
    usable = 0.85 * radius
    img = np.zeros(shape)
    render_corners(img, centres, radius + 2, chief, angles, sign, rho, 1e3, np.full(len(rho), RB))
    _, fit = locate_corners(img, _white(shape, centres, usable), centres, usable, chief, angles)
    mask = np.array([True, False, True, False, True, True])
    both = CornerFit.concatenate([fit.select(mask), fit.select(~mask)])
    order = np.r_[np.flatnonzero(mask), np.flatnonzero(~mask)]
    np.testing.assert_array_equal(both.corner, fit.corner[order])
    np.testing.assert_array_equal(both.sign, fit.sign[order])
    assert np.all(np.abs(fit.sign) == 1.0)
    np.testing.assert_array_equal(fit.sign, sign)


def _ellipses(n, seed):
    """Displaced (1–3 px), radially compressed (10–25 %) pupils, as a lens's periphery makes them."""
    from plenocal.model.pupil_ellipse import PupilEllipses, matrix_from_shape

    rng = np.random.default_rng(seed)
    phi = rng.uniform(0, 2 * np.pi, n)
    radial = np.c_[np.cos(phi), np.sin(phi)]
    comp = (1.0 - rng.uniform(0.10, 0.25, n)) ** 2  # radial variance ratio
    shape = np.c_[comp * radial[:, 0] ** 2 + radial[:, 1] ** 2, (comp - 1.0) * radial[:, 0] * radial[:, 1],
                  comp * radial[:, 1] ** 2 + radial[:, 0] ** 2]
    return PupilEllipses(rng.uniform(1.0, 3.0, n)[:, None] * radial, matrix_from_shape(shape), np.ones(n, dtype=bool))


@pytest.mark.parametrize(("unblurred", "elliptical", "natural"), [(0.0, False, False), (0.05, False, False), (0.0, True, False),
                                                                 (0.05, True, True)])
def test_render_gradients_match_finite_differences_of_the_render(unblurred, elliptical, natural):
    """render_grad_kernel: value = render_corners; ∂/∂K and ∂/∂θ = central differences (also with
    an unblurred fraction of light along the chief ray, with a displaced elliptical pupil, and with
    natural vignetting's weights)."""
    from plenocal.detect._kernels import render_grad_kernel
    from plenocal.detect.corners import (
        _DISC_OFFSETS,
        _DISC_POINTS,
        RENDER_DENSITY,
        RENDER_MASK_DENSITY,
        RENDER_SIGMA_PX,
    )

    centres, chief, angles, rho, sign, shape, radius = _scene(n=9, seed=3)
    rb = np.full(len(rho), RB)
    usable = 0.85 * radius
    h = int(np.ceil(usable.max()))
    origin = np.rint(centres).astype(np.int64)
    G = np.zeros((5, len(rho), (2 * h + 1) ** 2))
    from plenocal.model.pupil_ellipse import PupilEllipses

    pupil = _ellipses(len(rho), 4) if elliptical else PupilEllipses.discs(len(rho))
    from plenocal.detect.corners import NaturalVignetting

    nat = (NaturalVignetting(principal_point_px=(0.0, 0.0), d_px=40.0).rows(centres, lambda_=0.99, lens_radius_px=11.6)
           if natural else None)
    render_grad_kernel(G, origin, h, shape[0], shape[1], centres, usable, rb, np.full(len(rho), RA), rho, chief, angles, sign,
                       RENDER_SIGMA_PX, RENDER_DENSITY, RENDER_MASK_DENSITY, _DISC_POINTS, _DISC_OFFSETS, unblurred,
                       np.full(len(rho), 512.0), *pupil.kernel_arrays(), np.zeros((len(rho), 4)) if nat is None else nat)
    oy, ox = np.mgrid[-h : h + 1, -h : h + 1]
    px, py = origin[:, :1] + ox.reshape(1, -1), origin[:, 1:] + oy.reshape(1, -1)
    disc = (px - centres[:, :1]) ** 2 + (py - centres[:, 1:]) ** 2 <= (usable**2)[:, None]

    def render(K, th):
        img = np.zeros(shape)
        render_corners(img, centres, usable, K, th, sign, rho, RA, rb, unblurred_weight=unblurred, pupil=pupil, natural=nat)
        return img[py, px]

    np.testing.assert_allclose(G[0][disc], render(chief, angles)[disc], atol=1e-12)
    for q, (dk, dth) in enumerate((((1, 0), (0, 0)), ((0, 1), (0, 0)), ((0, 0), (1, 0)), ((0, 0), (0, 1))), start=1):
        e = 1e-4
        fd = (render(chief + e * np.array(dk), angles + e * np.array(dth)) - render(chief - e * np.array(dk), angles - e * np.array(dth))) / (2 * e)
        scale = np.abs(fd[disc]).max()
        assert scale > 0.05
        np.testing.assert_allclose(G[q][disc], fd[disc], atol=1e-3 * scale)


def _rendered_scene(seed):
    """_scene's corners rendered (unit contrast) with R12-A's vignetting, the usable radius, R_b
    and a binary white."""
    centres, chief, angles, rho, sign, shape, radius = _scene(seed=seed)
    usable = 0.85 * radius
    rb = np.full(len(rho), RB)
    img = np.zeros(shape)
    render_corners(img, centres, radius + 2, chief, angles, sign, rho, RA, rb)
    return centres, chief, angles, rho, sign, shape, usable, rb, img, _white(shape, centres, usable)


def test_fitting_the_rendered_corner_recovers_position_and_angles_from_a_poor_start():
    """refine_rendered on rendered vignetted corners, levels 0.1/0.9, starts 0.3 px and 3° off
    (chief_ray_corners hands it much closer ones). Noise-free: exact; with noise σ = 0.01
    (devignetted units), K within the noise (Cramér–Rao ≈ 0.01 px for these corners)."""
    from plenocal.detect.corners import refine_rendered

    centres, chief, angles, rho, sign, shape, usable, rb, img, white = _rendered_scene(seed=5)
    rng = np.random.default_rng(2)
    start = chief + rng.normal(0, 0.3, chief.shape)
    for noise, rms_max in ((0.0, 0.002), (0.01, 0.02)):
        obs = 0.1 + 0.8 * img + rng.normal(0, noise, shape)
        K, ok, th, b, rms, _sigma, _points = refine_rendered(obs, white, centres, usable, start, angles + np.radians(3.0), sign, rho, RA, rb)
        e = np.hypot(*(K - chief).T)
        # The 3° start error on the angles is removed too.
        assert np.abs(np.angle(np.exp(1j * (th[ok] - angles[ok])))).max() < (1e-4 if noise == 0 else 0.02)
        # Levels and residual: b = 0.8, residual RMS = noise / b (the fit absorbs a few dof).
        np.testing.assert_allclose(b[ok], 0.8, atol=0.01)
        assert np.all(rms[ok] < noise / 0.8 + 0.002), (noise, rms[ok].max())
        assert np.all(rms[ok] > 0.7 * noise / 0.8)
        assert ok.mean() > 0.9, noise
        assert np.sqrt(np.mean(e[ok] ** 2)) < rms_max, (noise, np.sqrt(np.mean(e[ok] ** 2)))


def test_rendered_fit_position_sigma_matches_the_scatter():
    """RenderedFit.sigma_px (worst-direction σ of K from the normal matrix and the residual
    variance) predicts the scatter of K over noise draws: noise ∝ 1/√white as devignetting
    makes it, 40 draws of 12 corners. The 2-D error RMS lies between σ (all error along the
    worst direction) and √2·σ (isotropic)."""
    from plenocal.detect.corners import refine_rendered

    centres, chief, angles, rho, sign, shape, usable, rb, img, white = _rendered_scene(seed=5)
    rng = np.random.default_rng(7)
    err2, sig2 = [], []
    for _ in range(40):
        obs = 0.1 + 0.8 * img + rng.normal(0, 0.03, shape) / np.sqrt(np.maximum(white, 0.05))
        fit = refine_rendered(obs, white, centres, usable, chief, angles, sign, rho, RA, rb)
        err2.append(np.sum((fit.corner - chief) ** 2, axis=1)[fit.ok])
        sig2.append(fit.sigma_px[fit.ok] ** 2)
    ratio = np.sqrt(np.mean(np.concatenate(err2)) / np.mean(np.concatenate(sig2)))
    assert 1.0 < ratio < 1.42, ratio  # measured 1.21


def _brute_force_render(centres, radius, rb, ra, rho, chief, angles, sign, shape, n_sub=8, n_lens=1000, pupil=None, natural=None):
    """Devignetted vignetted-pupil corners integrated by brute force: n_sub² points per pixel,
    each with its own hard pupil mask over n_lens lens points and the sharp X-junction; and the
    white (the mask's pixel fraction). Independent of the renderer's approximations. ``pupil``
    (a PupilEllipses): the mask |A·(X − c − o − R_b z)| ≤ R_a instead of the disc. ``natural``
    (M, 4) rows (f_x, f_y, L, (s/d)²): each lens point weighs d²/r⁴ = (1 + |L·z − (X − f)|²(s/d)²)⁻²
    at each sub-pixel point (natural vignetting), in the image and the white alike."""
    import numba as nb

    from plenocal.model.pupil_ellipse import PupilEllipses

    pupil = PupilEllipses.discs(len(centres)) if pupil is None else pupil

    @nb.njit(parallel=True, cache=False)
    def kernel(out, white, mic, R, rb, ra, rho, K, ang, sign, nsub, lens, off, A, nat):  # pragma: no cover
        for i in nb.prange(mic.shape[0]):
            c1, n1 = np.cos(ang[i, 0]), np.sin(ang[i, 0])
            c2, n2 = np.cos(ang[i, 1]), np.sin(ang[i, 1])
            for y in range(int(mic[i, 1] - R[i]) - 1, int(mic[i, 1] + R[i]) + 2):
                for x in range(int(mic[i, 0] - R[i]) - 1, int(mic[i, 0] + R[i]) + 2):
                    acc = 0.0
                    cnt = 0.0
                    for a in range(nsub):
                        for b in range(nsub):
                            X = x - 0.5 + (a + 0.5) / nsub
                            Y = y - 0.5 + (b + 0.5) / nsub
                            for s in range(lens.shape[0]):
                                vx = X - mic[i, 0] - off[i, 0] - rb[i] * lens[s, 0]
                                vy = Y - mic[i, 1] - off[i, 1] - rb[i] * lens[s, 1]
                                wx = A[i, 0] * vx + A[i, 1] * vy
                                wy = A[i, 1] * vx + A[i, 2] * vy
                                if wx * wx + wy * wy > ra * ra:
                                    continue
                                px = X + rho[i] * lens[s, 0] - K[i, 0]
                                py = Y + rho[i] * lens[s, 1] - K[i, 1]
                                dx = nat[i, 2] * lens[s, 0] - (X - nat[i, 0])
                                dy = nat[i, 2] * lens[s, 1] - (Y - nat[i, 1])
                                q = 1.0 + (dx * dx + dy * dy) * nat[i, 3]
                                wq = 1.0 / (q * q)
                                acc += wq if (c1 * px + n1 * py) * (c2 * px + n2 * py) > 0 else -wq
                                cnt += wq
                    if cnt > 0:
                        out[y, x] = 0.5 + 0.5 * sign[i] * acc / cnt
                        white[y, x] = cnt / (nsub * nsub * lens.shape[0])

    i = np.arange(n_lens) + 0.5
    r, a = np.sqrt(i / n_lens), i * np.pi * (3 - np.sqrt(5))
    lens = np.c_[r * np.cos(a), r * np.sin(a)]
    img, white = np.zeros(shape), np.zeros(shape)
    nat = np.zeros((len(centres), 4)) if natural is None else np.ascontiguousarray(natural, dtype=np.float64)
    kernel(img, white, centres, radius, rb, ra, rho, chief, angles, sign, n_sub, lens, pupil.offset_px, pupil.matrix, nat)
    return img, white


def test_rendered_fit_is_unbiased_on_brute_force_pixel_integration():
    """The renderer integrates the pixel's area with the pupil mask to first order (soft mask +
    covariance term) and samples the mask at ≤ 0.75 px: on brute-force integrated noise-free
    corners the fitted chief-ray corner is within a few mpx. Blurring only the sharp image (the
    renderer before 2026-11-21) left ~0.01 px outward bias; sampling the mask at the blur's
    density alone left 46 mpx RMS at |ρ| = 1."""
    from plenocal.detect.corners import refine_rendered

    for rho_mag, rms_max in ((0.7, 0.006), (2.0, 0.007), (3.0, 0.01)):  # measured 4, 5, 7 mpx
        centres, chief, angles, rho, sign, shape, radius = _scene(n=16, seed=11)
        rho = np.sign(rho) * rho_mag
        rb = np.full(len(rho), RB)
        img, white = _brute_force_render(centres, radius, rb, RA, rho, chief, angles, sign, shape)
        fit = refine_rendered(img, np.where(white > 0.1, white, 0.0), centres, 0.85 * radius, chief, angles, sign, rho, RA, rb, iterations=8)
        d = fit.corner - chief
        radial = np.sum(d * (chief - centres), axis=1) / np.hypot(*(chief - centres).T)
        assert fit.ok.all()
        assert np.sqrt(np.mean(np.sum(d**2, axis=1))) < rms_max, (rho_mag, np.sqrt(np.mean(np.sum(d**2, axis=1))))
        assert abs(radial.mean()) < 0.003, (rho_mag, radial.mean())


def test_a_disc_pupil_ellipse_renders_exactly_as_the_disc():
    """PupilEllipses.discs (o = 0, A = I, not elliptical) takes the disc's own code path: the render
    and the rendered fit are identical to the bit; an A = I ellipse flagged elliptical (the other
    code path) gives the same image to rounding."""
    from plenocal.detect.corners import refine_rendered
    from plenocal.model.pupil_ellipse import PupilEllipses, matrix_from_shape

    centres, chief, angles, rho, sign, shape, usable, rb, img, white = _rendered_scene(seed=5)
    n = len(rho)
    img2 = np.zeros(shape)
    render_corners(img2, centres, np.full(n, RA + RB) + 2, chief, angles, sign, rho, RA, rb, pupil=PupilEllipses.discs(n))
    np.testing.assert_array_equal(img2, img)
    obs = 0.1 + 0.8 * img + np.random.default_rng(3).normal(0, 0.01, shape)
    a = refine_rendered(obs, white, centres, usable, chief, angles, sign, rho, RA, rb)
    b = refine_rendered(obs, white, centres, usable, chief, angles, sign, rho, RA, rb, pupil=PupilEllipses.discs(n))
    np.testing.assert_array_equal(a.corner, b.corner)
    np.testing.assert_array_equal(a.sigma_px, b.sigma_px)
    np.testing.assert_allclose(matrix_from_shape(np.tile([1.0, 0.0, 1.0], (3, 1))), np.tile([1.0, 0.0, 1.0], (3, 1)), atol=1e-15)
    flagged = PupilEllipses(np.zeros((n, 2)), np.tile([1.0, 0.0, 1.0], (n, 1)), np.ones(n, dtype=bool))
    img3 = np.zeros(shape)
    render_corners(img3, centres, np.full(n, RA + RB) + 2, chief, angles, sign, rho, RA, rb, pupil=flagged)
    np.testing.assert_allclose(img3, img, atol=1e-12)


def test_matrix_from_shape_is_the_inverse_square_root():
    from plenocal.model.pupil_ellipse import matrix_from_shape

    S = np.array([[0.6, 0.15, 0.9], [0.35, -0.05, 1.0], [2.0, 0.3, 0.5]])
    A = matrix_from_shape(S)
    for a, s in zip(A, S, strict=True):
        Am = np.array([[a[0], a[1]], [a[1], a[2]]])
        np.testing.assert_allclose(np.linalg.inv(Am @ Am), [[s[0], s[1]], [s[1], s[2]]], atol=1e-12)


def test_the_ellipse_model_recovers_chief_rays_that_the_disc_model_misses():
    """Corners rendered by brute force (independent of the renderer) through displaced (1–3 px),
    radially compressed (10–25 %) pupils, as a real lens's periphery makes them, with noise
    σ = 0.01 (devignetted units, Cramér–Rao ≈ 0.01 px here), |ρ| = 2 px. The rendered fit with
    the true ellipse lands on the chief ray within the noise; with the paper's disc it is off by
    several times that, and the estimator inversion with the ellipse agrees."""
    from plenocal.detect.corners import refine_rendered

    centres, chief, angles, rho, sign, shape, radius = _scene(n=16, seed=11)
    rho = np.sign(rho) * 2.0
    rb = np.full(len(rho), RB)
    pupil = _ellipses(len(rho), 12)
    img, white = _brute_force_render(centres, radius, rb, RA, rho, chief, angles, sign, shape, pupil=pupil)
    w = np.where(white > 0.1, white, 0.0)
    obs = 0.1 + 0.8 * img + np.random.default_rng(5).normal(0, 0.01, shape)
    usable = 0.85 * radius
    ell = refine_rendered(obs, w, centres, usable, chief, angles, sign, rho, RA, rb, iterations=8, pupil=pupil)
    disc = refine_rendered(obs, w, centres, usable, chief, angles, sign, rho, RA, rb, iterations=8)
    e_ell = np.sqrt(np.mean(np.sum((ell.corner - chief)[ell.ok] ** 2, axis=1)))
    e_disc = np.sqrt(np.mean(np.sum((disc.corner - chief) ** 2, axis=1)))
    assert ell.ok.mean() > 0.9
    assert e_ell < 0.03, e_ell  # the noise: σ of the fits
    assert e_disc > 5 * e_ell and e_disc > 0.1, (e_disc, e_ell)
    # The inversion of the corner estimator (an independent route) with the ellipse, noise-free.
    seen, fit = locate_corners(0.1 + 0.8 * img, w, centres, usable, ell.corner, angles)
    ok = fit.converged & (np.hypot(*(seen - centres).T) < usable - 1.0)
    sel = np.flatnonzero(ok)
    assert len(sel) >= 10
    K, conv = chief_ray_corners(seen[sel], fit.select(ok), rho[sel], w, centres[sel], usable[sel], RA, rb[sel],
                                pupil=pupil.take(sel), iterations=8)
    assert np.sqrt(np.mean(np.sum((K - chief[sel])[conv] ** 2, axis=1))) < 0.03


def test_natural_vignetting_is_rendered_and_fitted_without_bias():
    """Natural vignetting (each lens point weighed cos θ_X·cos θ_P/r² from the pixel) makes a
    blurred corner's kernel lopsided towards the pixel's side of the lens axis: on brute-force
    images with it (R12-A: lens radius 11.6 px, d 59 px, the lens axis's foot 2 px from the
    micro-image centre; |ρ| = 5 px) the paper's uniform-lens renderer places the corners 0.18 %
    of their offset farther out and twice as scattered (measured 0.034 px RMS); with the weights
    (``natural``) the fit is as good as without vignetting (0.017 px, +0.06 %)."""
    from plenocal.detect.corners import NaturalVignetting, refine_rendered

    centres, chief, angles, rho, sign, shape, radius = _scene(n=16, seed=11)
    rho = np.sign(rho) * 5.0
    rb = np.full(len(rho), RB)
    pp = (centres[:, 0].mean() - 300.0, centres[:, 1].mean() - 200.0)
    natural = NaturalVignetting(principal_point_px=pp, d_px=59.1).rows(centres, lambda_=0.9943, lens_radius_px=11.6)
    img, white = _brute_force_render(centres, radius, rb, RA, rho, chief, angles, sign, shape, natural=natural)
    weight = np.where(white > 0.1, white, 0.0)
    offset = chief - centres

    def rms_and_scale(fit):
        d = fit.corner - chief
        return np.sqrt(np.mean(np.sum(d**2, axis=1))), np.sum(d * offset) / np.sum(offset * offset)

    with_nat = refine_rendered(img, weight, centres, 0.85 * radius, chief, angles, sign, rho, RA, rb, iterations=8, natural=natural)
    without = refine_rendered(img, weight, centres, 0.85 * radius, chief, angles, sign, rho, RA, rb, iterations=8)
    assert with_nat.ok.all() and without.ok.all()
    rms, scale = rms_and_scale(with_nat)
    rms0, scale0 = rms_and_scale(without)
    assert rms < 0.024 and abs(scale) < 1e-3, (rms, scale)
    assert rms0 > 0.028 and scale0 > 1.3e-3, (rms0, scale0)


def test_natural_vignetting_of_a_camera_is_its_principal_point_and_d_in_pixels(r12a_camera):
    """Detection takes the weights' inputs from pre-calibration's camera: the R12-A's principal
    point and d = 0.3248 mm over 5.5 µm pixels, 59.05 px."""
    from plenocal.detect.corners import NaturalVignetting

    nat = NaturalVignetting.of_camera(r12a_camera)
    s = r12a_camera.sensor.pixel_size_mm
    assert nat.principal_point_px == tuple(r12a_camera.sensor.principal_point_px)
    assert nat.d_px == pytest.approx(r12a_camera.d_mm / s, rel=1e-15)
    assert nat.d_px == pytest.approx(59.05, abs=0.01)
